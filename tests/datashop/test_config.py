"""Datashop configs: YAML round trip, and errors that say what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from zephyr.datashop.config import FilterConfig, LabelerConfig, PromptConfig, StageConfig, load_config


def test_yaml_config_loads_with_defaults_and_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(
        "input: data/*.jsonl.zst\n"
        "output_dir: out\n"
        "engine_backend: local\n"
        "stages:\n"
        "  - name: cheap\n"
        "    prompt: {template: 'Rate {example} from 0 to 5', answer_prefix: 'Score: '}\n"
        "    pool: {size: 40, seed: 3}\n"
        "    filter: {keep_fraction: 0.5}\n"
        "  - name: strong\n"
        "    prompt: {template: 'Is this programming? {example}', labels: ['No', 'Yes'], values: [0, 1]}\n"
        "    labeler: {backend: openai, url: 'http://127.0.0.1:8000/v1', model: smol}\n"
        "    classifier: {kind: embedding}\n"
        "    filter: {threshold: 0.5}\n"
    )
    config = load_config(path)
    assert config.input == (str(tmp_path / "data/*.jsonl.zst"),)
    assert config.output_dir == str(tmp_path / "out")
    cheap, strong = config.stages
    assert cheap.prompt.values == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    assert cheap.pool.size == 40 and cheap.labeler.backend == "llamacpp"  # the default
    assert strong.prompt.score_range == (0.0, 1.0) and strong.prompt.labels == ("No", "Yes")
    assert strong.labeler.url == "http://127.0.0.1:8000/v1" and strong.classifier.kind == "embedding"
    assert strong.score_field == "datashop_strong"


def test_unquoted_yes_no_labels_are_refused_with_the_fix(tmp_path: Path) -> None:
    # YAML 1.1 reads [No, Yes] as [false, true]; the labels used to become "False"/"True" silently.
    path = tmp_path / "shop.yaml"
    path.write_text(
        "input: x.jsonl\noutput_dir: o\nstages:\n  - name: a\n"
        "    prompt: {template: '{example}', labels: [No, Yes], values: [0, 1]}\n"
    )
    with pytest.raises(
        ValueError, match=r"shop\.yaml: stages\[0\]\.prompt\.labels\[0\]: expected a string, got False.*quote"
    ):
        load_config(path)


def test_unknown_key_is_named_with_the_allowed_ones(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "input: x.jsonl\noutput_dir: o\nstages:\n  - name: a\n    prompt: {template: '{example}'}\n"
        "    pool: {sise: 3}\n"
    )
    with pytest.raises(ValueError, match=r"stages\[0\]\.pool: unknown key\(s\) \['sise'\].*'size'"):
        load_config(path)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PromptConfig(template="no slot here"), "exactly once"),
        (lambda: PromptConfig(template="{example}", labels=("No", "Yes")), "give `values`"),
        (lambda: PromptConfig(template="{example}", labels=("0", "1"), values=(0.0,)), "one number per label"),
        (lambda: FilterConfig(threshold=1.0, keep_fraction=0.5), "exactly one of threshold"),
        (lambda: FilterConfig(), "exactly one of threshold"),
        (lambda: LabelerConfig(backend="openai"), "needs `url`"),
        (lambda: LabelerConfig(backend="llama"), "backend must be one of"),
        (lambda: StageConfig(name="bad name", prompt=PromptConfig(template="{example}")), "name must be"),
    ],
)
def test_invalid_configs_fail_with_the_fix(build, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()
