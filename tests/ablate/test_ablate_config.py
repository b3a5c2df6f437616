"""Ablation configs: candidate kinds, fraction semantics, YAML overrides, and errors that say how to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from zephyr.ablate.config import (
    Component,
    MixtureSpec,
    TrainSettings,
    ablation_config_from_dict,
    load_ablation_config,
    mixture_with_fraction,
)
from zephyr.config import ConfigError

BASE = {
    "output_dir": "out",
    "baseline": {"mixture": {"web": ["stores/web", 3], "code": ["stores/code", 1]}},
    "train": {"tokens": 10_000, "seq_len": 64, "batch_size": 8},
    "eval": {"web": "stores/web/validation"},
}


def test_candidate_kinds_expand_to_named_normalised_mixtures() -> None:
    cfg = ablation_config_from_dict(
        {
            **BASE,
            "candidates": [
                {"name": "code_heavy", "mixture": {"web": ["stores/web", 1], "code": ["stores/code", 1]}},
                {"add": {"dataset": "wiki", "store": "stores/wiki", "fraction": 0.2}},
                {"sweep": {"dataset": "code", "fractions": [0.5, 0.125]}},
                {"negative_control": {"dataset": "wiki", "of": "baseline+wiki20"}},
            ],
        }
    )
    names = [m.name for m in cfg.mixtures]
    assert names == [
        "baseline",
        "code_heavy",
        "baseline+wiki20",
        "baseline+code50",
        "baseline+code12p5",
        "baseline+wiki20-shuffled-wiki",
    ]
    assert cfg.baseline.weights() == {"web": 0.75, "code": 0.25}  # normalised
    plus_wiki = cfg.candidates[1]
    assert plus_wiki.weights() == pytest.approx({"web": 0.6, "code": 0.2, "wiki": 0.2})
    assert cfg.candidates[2].weights() == pytest.approx({"web": 0.5, "code": 0.5})
    assert cfg.candidates[3].weights() == pytest.approx({"web": 0.875, "code": 0.125})
    control = cfg.candidates[4]
    assert control.components["wiki"].shuffled and not control.components["web"].shuffled
    assert control.weights() == plus_wiki.weights()
    assert "negative control" in control.derivation
    assert cfg.train.num_steps == 20 and cfg.train.num_tokens == 10_240  # ceil(10000 / 512) steps
    assert cfg.model["hidden_dim"] == 64  # the default "tiny" preset


def test_mixture_with_fraction_needs_a_store_for_a_new_dataset() -> None:
    base = MixtureSpec("b", {"web": Component("w", 1.0)})
    with pytest.raises(ConfigError, match="give its store"):
        mixture_with_fraction(base, "code", 0.3)
    with pytest.raises(ConfigError, match="needs other datasets"):
        mixture_with_fraction(base, "web", 0.5)
    assert mixture_with_fraction(base, "code", 0.3, store="c").weights() == pytest.approx({"web": 0.7, "code": 0.3})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"candidates": []}, "non-empty list"),
        ({"candidates": [{"mixture": {"web": ["w", 1]}}]}, "needs a name"),
        ({"candidates": [{"name": "x", "mixture": {"web": ["w", 1]}, "add": {}}]}, "exactly one of"),
        ({"candidates": [{"name": "baseline", "mixture": {"web": ["w", 1]}}]}, "names repeat"),
        ({"candidates": [{"name": "a b", "mixture": {"web": ["w", 1]}}]}, "directory name"),
        ({"candidates": [{"name": "x", "mixture": {"web": ["w", -1]}}]}, ">= 0"),
        ({"candidates": [{"negative_control": {"dataset": "nope"}}]}, "not in mixture"),
        ({"candidates": [{"name": "x", "mixture": {"web": ["w", 1]}}], "seeds": [1, 1]}, "seeds repeat"),
        ({"candidates": [{"name": "x", "mixture": {"web": ["w", 1]}}], "primary_eval": "code"}, "primary_eval"),
        (
            {
                "candidates": [{"name": "x", "mixture": {"web": ["w", 1]}}],
                "matched_exposure": {"zz": {"production_epochs": 2}},
            },
            "no mixture uses",
        ),
        (
            {"candidates": [{"name": "x", "mixture": {"web": ["w", 1]}}], "matched_exposure": {"web": {}}},
            "exactly one of production_tokens",
        ),
        ({"candidates": [{"name": "x", "mixture": {"web": ["w", 1]}}], "model": {"preset": "huge"}}, "preset"),
        ({"candidates": [{"name": "x", "mixture": {"web": ["w", 1]}}], "confidnce": 0.9}, "unknown key"),
    ],
)
def test_bad_configs_fail_with_a_fix(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ablation_config_from_dict({**BASE, **change})


def test_train_settings_budget() -> None:
    with pytest.raises(ConfigError, match="exactly one of tokens"):
        TrainSettings(tokens=1000, steps=10)
    s = TrainSettings(steps=40, seq_len=32, batch_size=4)
    assert s.num_tokens == 40 * 128 and s.resolved_eval_every == 5 and s.resolved_checkpoint_every == 10


def test_yaml_file_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "ablation.yaml"
    path.write_text(
        "output_dir: out\n"
        "baseline: {mixture: {web: [stores/web, 1.0]}}\n"
        "candidates:\n"
        "  - add: {dataset: code, store: stores/code, fraction: 0.25}\n"
        "train: {steps: 10, seq_len: 32, batch_size: 4}\n"
        "eval: {web: stores/web/validation}\n"
    )
    cfg = load_ablation_config(path, ["seeds=[3, 4, 5]", "train.steps=7", "confidence=0.9"])
    assert cfg.seeds == (3, 4, 5) and cfg.train.num_steps == 7 and cfg.confidence == 0.9
    assert cfg.candidates[0].name == "baseline+code25"
    with pytest.raises(ConfigError, match=str(path)):
        load_ablation_config(path, ["train.steps=0"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_ablation_config(tmp_path / "missing.yaml")
