"""A dry run prints every step's plan and writes nothing a later run would trust (issue #17 item 2): every
recipe, the `zephyr run --dry-run` command, and StepRunner itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from zephyr import Dataset, execution
from zephyr.steps import DryRunStop, StepRunner

ROOT = Path(__file__).resolve().parents[2]

# every step of each recipe, in run order ("sample" of nemotron_cc is built outside a step)
RECIPE_STEPS = {
    "nemotron_cc": ["sample", "normalize", "exact_dedup", "fuzzy_dedup", "tokenize", "mixture", "train"],
    "common_crawl": ["sample", "extract", "langid", "quality", "pii", "exact_dedup", "fuzzy_dedup", "tokenize"],
    "datashop_edu": ["corpus", "pool", "label", "classifier", "score", "filter", "tokenize"],
}
# steps that run engine pipelines: each prints at least one plan, the later ones against pending inputs
PIPELINE_STEPS = {
    "nemotron_cc": ["normalize", "exact_dedup", "fuzzy_dedup", "tokenize"],
    "common_crawl": ["extract", "langid", "quality", "pii", "exact_dedup", "fuzzy_dedup", "tokenize"],
    "datashop_edu": ["corpus", "pool", "score", "filter", "tokenize"],
}


def _dry_run_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("zephyr-dry-run-*")}


def _step_sections(out: str) -> dict[str, str]:
    """The dry run's output cut into one section per step (from its '[dry run] ... step' line on)."""
    sections: dict[str, str] = {}
    current = None
    for line in out.splitlines():
        found = re.match(r"\[dry run\] (?:step )?'(\w+)' (?:\(version \w+\) )?would (?:run|write)", line)
        if found:
            current = found.group(1)
            sections[current] = ""
        if current is not None:
            sections[current] += line + "\n"
    return sections


@pytest.mark.parametrize("name", list(RECIPE_STEPS))
def test_a_recipe_dry_run_plans_every_step_writes_nothing_and_exits_0(load_recipe, tmp_path, capsys, name):
    recipe = load_recipe(name)
    throwaways = _dry_run_dirs()
    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False),
        pytest.raises(SystemExit) as stop,
    ):
        recipe.main(["--output", str(tmp_path / "out")])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    sections = _step_sections(out)
    assert list(sections) == RECIPE_STEPS[name], out
    for step in PIPELINE_STEPS[name]:
        assert re.search(r"^plan \w+: \d+ stage", sections[step], re.M), (step, sections[step])
    later = PIPELINE_STEPS[name][1:]  # they read what an earlier step would write: planned against it
    for step in later:
        assert "not written yet (its shard count is known once it runs)" in sections[step], (step, sections[step])
    listed = ", ".join(f"{s} (would run)" for s in RECIPE_STEPS[name])
    assert f"[dry run] {len(RECIPE_STEPS[name])} step(s): {listed}" in out
    assert [p for p in tmp_path.rglob("*")] == []  # no output, no scratch, no step marker, no run record
    assert _dry_run_dirs() == throwaways  # the throw-away output folders are gone too


def test_zephyr_run_dry_run_exits_0_and_leaves_the_folder_as_it_was(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ZEPHYR_PROGRESS": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "run", "--dry-run", "--backend", "local"]
        + [str(ROOT / "recipes" / "common_crawl.py"), "--output", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 step(s): sample (would run)" in proc.stdout
    assert "reads the output of step 'fuzzy_dedup'" in proc.stdout
    assert [p for p in tmp_path.rglob("*")] == []  # not even ./.zephyr (scratch, run records)


def _write_numbers(path: str, *, config=None, **inputs):
    paths = (
        Dataset.from_list(list(range(10)), num_shards=2)
        .map(lambda x: {"x": x})
        .write_jsonl(path + "/part-{shard}.jsonl")
    )
    return {"files": len(paths)}


def _count(path: str, *, config=None, numbers: str):
    return {"records": Dataset.from_files(numbers + "/*.jsonl").map(lambda r: r).write_jsonl(path + "/{shard}.jsonl")}


def test_step_runner_dry_run_plans_a_step_reading_what_an_earlier_one_would_write(tmp_path, capsys):
    with execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False):
        steps = StepRunner(str(tmp_path / "out"))
        numbers = steps.run("numbers", _write_numbers)
        assert numbers.planned and numbers.summary == {}
        count = steps.run("count", _count, inputs={"numbers": numbers})
        assert count.planned
        with pytest.raises(DryRunStop, match=r"2 step\(s\): numbers \(would run\), count \(would run\); 2 would run"):
            steps.end_dry_run()
    out = capsys.readouterr().out
    count_section = out[out.index("[dry run] step 'count'") :]
    assert "reading the output of 'numbers' (not written yet)" in count_section
    assert "stage 0 [? shards] read(" in count_section
    assert "reads the output of step 'numbers', not written yet" in count_section
    assert list(tmp_path.rglob("*")) == []


def test_step_runner_dry_run_reuses_complete_steps_and_plans_the_rest_on_their_outputs(tmp_path, capsys):
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        numbers = StepRunner(str(tmp_path / "out")).run("numbers", _write_numbers)
    before = sorted(p for p in tmp_path.rglob("*") if "scratch" not in p.parts)
    capsys.readouterr()
    with execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False):
        steps = StepRunner(str(tmp_path / "out"))
        assert steps.run("numbers", _write_numbers).skipped  # complete: reused
        steps.run("count", _count, inputs={"numbers": numbers})
        with pytest.raises(DryRunStop, match=r"2 step\(s\): numbers \(reused\), count \(would run\); 1 would run"):
            steps.end_dry_run()
    out = capsys.readouterr().out
    assert "stage 0 [2 shards] read(" in out  # the written output's real files
    assert sorted(p for p in tmp_path.rglob("*") if "scratch" not in p.parts) == before
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        count = StepRunner(str(tmp_path / "out")).run("count", _count, inputs={"numbers": numbers})
    assert len(count.summary["records"]) == 2


def test_a_pending_input_is_planned_only_in_a_dry_run(tmp_path):
    from zephyr.engine.run.pending import declare_pending
    from zephyr.errors import BadInputError

    missing = str(tmp_path / "step-out")
    with (
        declare_pending({missing: "step 'x'"}),
        execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False),
        pytest.raises(BadInputError, match="no files match"),  # a real run never plans against it
    ):
        Dataset.from_files(missing + "/*.jsonl").count()
    with (
        declare_pending({missing: "step 'x'"}),
        execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False),
    ):
        assert Dataset.from_files(missing + "/*.jsonl").count() == 0


def test_the_mixture_ablation_dry_run_prints_its_plans_and_writes_nothing(load_recipe, tmp_path, capsys):
    recipe = load_recipe("mixture_ablation")
    throwaways = _dry_run_dirs()
    with execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False):
        assert recipe.main(["--output", str(tmp_path / "out"), "--quick", "--chars", "20000"]) == 0
    out = capsys.readouterr().out
    assert out.count("write_token_store(") >= 2  # the prose and code stores' plans
    assert "would write" in out and "3 mixtures x 2 seeds" in out and "Nothing was written." in out
    assert list(tmp_path.rglob("*")) == []  # no text, tokenizer, store, ablation.yaml or runs
    assert _dry_run_dirs() == throwaways
