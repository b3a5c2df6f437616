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
    after_the_block = []
    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False),
        pytest.raises(DryRunStop, match=r"2 step\(s\): numbers \(would run\), count \(would run\); 2 would run"),
    ):
        with StepRunner(str(tmp_path / "out")) as steps:  # its end ends the dry run: the recipe says nothing
            numbers = steps.run("numbers", _write_numbers)
            assert numbers.planned and numbers.summary == {}
            count = steps.run("count", _count, inputs={"numbers": numbers})
            assert count.planned
        after_the_block.append(count.summary["records"])  # a summary after the block: never reached
    assert after_the_block == []
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
    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False),
        pytest.raises(DryRunStop, match=r"2 step\(s\): numbers \(reused\), count \(would run\); 1 would run"),
        StepRunner(str(tmp_path / "out")) as steps,
    ):
        assert steps.run("numbers", _write_numbers).skipped  # complete: reused
        steps.run("count", _count, inputs={"numbers": numbers})
    out = capsys.readouterr().out
    assert "stage 0 [2 shards] read(" in out  # the written output's real files
    assert sorted(p for p in tmp_path.rglob("*") if "scratch" not in p.parts) == before
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        count = StepRunner(str(tmp_path / "out")).run("count", _count, inputs={"numbers": numbers})
    assert len(count.summary["records"]) == 2


def test_a_runner_block_ends_a_dry_run_only_when_it_ends_without_an_error(tmp_path, capsys):
    """The `with` block's end lists the plan and raises DryRunStop; an error inside the block is the error (a
    dry run that failed must not exit 0); a real run's block ends quietly; a runner without `with` plans its
    steps and leaves ending to its caller."""
    dry = {"backend": "local", "scratch": str(tmp_path / "scratch"), "progress": False, "summary": False}
    with (
        execution(**dry, dry_run=True),
        pytest.raises(ValueError, match="the recipe's own error"),
        StepRunner(str(tmp_path / "out")) as steps,
    ):
        steps.run("numbers", _write_numbers)
        raise ValueError("the recipe's own error")
    assert "step(s)" not in capsys.readouterr().out
    with execution(**dry, dry_run=True):
        loose = StepRunner(str(tmp_path / "out"))
        assert loose.run("numbers", _write_numbers).planned  # no DryRunStop: nothing ends it for the caller
        loose.close()
    assert list(tmp_path.rglob("*")) == []
    with execution(**dry), StepRunner(str(tmp_path / "out")) as steps:
        ran = steps.run("numbers", _write_numbers)
    assert not ran.planned and ran.summary == {"files": 2}


def test_would_write_plans_work_outside_a_step_and_an_estimate_skips_what_no_sample_can_stand_for(tmp_path, capsys):
    dry = {"backend": "local", "scratch": str(tmp_path / "scratch"), "progress": False, "summary": False}
    done = []
    with (
        execution(**dry, dry_run=True),
        pytest.raises(DryRunStop, match=r"3 step.*train \(would run\); 3 would run"),
        StepRunner(str(tmp_path / "out")) as steps,
    ):
        assert steps.would_write("sample", str(tmp_path / "out" / "sample"), "the sample")
        steps.run("count", _count, inputs={"numbers": str(tmp_path / "out" / "sample")})
        assert steps.would_write("train", str(tmp_path / "out" / "train"), "the runs", builds_input=False)
    out = capsys.readouterr().out
    assert "[dry run] 'sample' would write the sample; not written, the steps reading it are planned" in out
    assert "reads the output of 'sample', not written yet" in out  # the step reading it is planned against it
    assert "[dry run] 'train' would write the runs; not written\n" in out
    with (
        execution(**dry, dry_run=True, estimate=True),
        pytest.raises(DryRunStop, match=r"\[estimate\] 0 step"),
        StepRunner(str(tmp_path / "out")) as steps,
    ):
        done.append(steps.would_write("sample", str(tmp_path / "sample"), "the sample"))
        done.append(steps.would_write("train", str(tmp_path / "train"), "the runs", builds_input=False))
    assert done == [False, True]  # the sample is built (the estimate samples it), the training skipped
    assert "[estimate] 'train' is not estimated: it would write the runs" in capsys.readouterr().out
    assert list(tmp_path.rglob("*")) == []


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
    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False),
        pytest.raises(SystemExit) as stop,
    ):
        recipe.main(["--output", str(tmp_path / "out"), "--quick", "--chars", "20000"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert list(_step_sections(out)) == ["sample", "ablation"]
    assert out.count("write_token_store(") >= 2  # the prose and code stores' plans
    assert re.search(
        r"'ablation' would write \S+ablation.yaml and train 3 mixtures x 2 seeds \(6 runs of 60 steps", out
    )
    assert "[dry run] 2 step(s): sample (would run), ablation (would run); 2 would run. Nothing was written." in out
    assert list(tmp_path.rglob("*")) == []  # no text, tokenizer, store, ablation.yaml or runs
    assert _dry_run_dirs() == throwaways


def test_the_mixture_ablation_dry_run_on_given_stores_checks_them_and_plans_the_training_only(
    load_recipe, tmp_path, capsys
):
    from zephyr.ablate.sample_text import write_sample_stores

    recipe = load_recipe("mixture_ablation")
    engine = {"backend": "local", "scratch": str(tmp_path / "scratch"), "progress": False, "summary": False}
    with execution(**engine):
        stores = write_sample_stores(tmp_path / "given", chars=20_000)
    argv = ["--output", str(tmp_path / "out"), "--store", f"web={stores['prose']}", "--store", f"py={stores['code']}"]
    with execution(**engine, dry_run=True), pytest.raises(SystemExit) as stop:
        recipe.main([*argv, "--ladder", "8,12"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "'ablation' would write" in out and "a ladder of widths 8,12 (target 4x the largest)" in out
    assert "[dry run] 1 step(s): ablation (would run); 1 would run." in out
    assert not (tmp_path / "out").exists()
    with execution(**engine, dry_run=True), pytest.raises(SystemExit, match="has no validation/ split"):
        recipe.main([*argv[:-1], f"py={tmp_path / 'given' / 'text'}"])  # checked in a dry run too
