"""The one config loader (zephyr.config): path-to-field errors, one ConfigError for every config."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from zephyr import ZephyrError
from zephyr.config import ConfigError, from_dict, load_yaml, require, to_dict


@dataclass(frozen=True)
class Inner:
    n_layers: int = 2
    kind: Literal["a", "b"] = "a"
    rate: float = 0.1

    def __post_init__(self) -> None:
        require(self.n_layers > 0, f"model.n_layers must be > 0, got {self.n_layers}.")


@dataclass(frozen=True)
class Outer:
    name: str
    model: Inner = field(default_factory=Inner)
    sources: dict[str, tuple[str, float]] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    limit: int | None = None


def test_builds_nested_dataclasses_and_round_trips():
    cfg = from_dict(
        Outer, {"name": "x", "model": {"n_layers": 3, "rate": 1}, "sources": {"web": ["w", 2]}, "seeds": [1, 2]}
    )
    assert cfg == Outer("x", Inner(3, "a", 1.0), {"web": ("w", 2.0)}, (1, 2))
    assert from_dict(Outer, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x", "model": {"n_layers": "x"}}, r"^train\.yaml: model\.n_layers: expected an integer, got 'x'$"),
        ({"name": "x", "model": {"kind": "c"}}, r"^train\.yaml: model\.kind: expected one of \['a', 'b'\], got 'c'$"),
        ({"name": "x", "model": {"layers": 2}}, r"^train\.yaml: model: unknown key\(s\) \['layers'\]; Inner accepts"),
        ({"name": "x", "sources": {"web": ["w"]}}, r"^train\.yaml: sources\.web: expected 2 items, got \['w'\]$"),
        ({"name": "x", "seeds": [1, "two"]}, r"^train\.yaml: seeds\[1\]: expected an integer, got 'two'$"),
        ({"name": "x", "limit": "many"}, r"^train\.yaml: limit: expected an integer, got 'many'$"),
        ({"model": {}}, r"^train\.yaml: Outer: missing required key\(s\) \['name'\]"),
        ({"name": "x", "model": {"n_layers": 0}}, r"^train\.yaml: model\.n_layers must be > 0, got 0\.$"),
        ({"name": True}, r"^train\.yaml: name: expected a string, got True: YAML reads unquoted yes/no"),
        ([1, 2], r"^train\.yaml: top level: expected a mapping of Outer fields, got list"),
    ],
)
def test_errors_name_the_file_and_the_field(data, message):
    with pytest.raises(ConfigError, match=message) as info:
        from_dict(Outer, data, "train.yaml")
    assert isinstance(info.value, ZephyrError) and isinstance(info.value, ValueError)


def test_load_yaml_names_the_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_yaml(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: expected a YAML mapping at top level, got list"):
        load_yaml(bad)


def test_every_config_error_is_the_one_type():
    from zephyr.ablate.config import TrainSettings
    from zephyr.datashop.config import FilterConfig
    from zephyr.train.checkpoint import CheckpointError
    from zephyr.train.config import ConfigError as TrainConfigError
    from zephyr.train.config import OptimizerConfig

    assert TrainConfigError is ConfigError and issubclass(CheckpointError, ZephyrError)
    for build in (lambda: TrainSettings(tokens=1000, steps=10), FilterConfig, lambda: OptimizerConfig(max_grad_norm=0)):
        with pytest.raises(ConfigError):
            build()
