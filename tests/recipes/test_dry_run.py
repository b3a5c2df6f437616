"""A dry run writes nothing a later run would trust (issue #17 item 2): every recipe, and StepRunner itself."""

from __future__ import annotations

import pytest

from zephyr import Dataset, execution
from zephyr.steps import DryRunStop, StepRunner


@pytest.mark.parametrize("name", ["nemotron_cc", "common_crawl", "datashop_edu"])
def test_a_recipe_dry_run_writes_nothing_and_exits_0(load_recipe, tmp_path, capsys, name):
    recipe = load_recipe(name)
    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False),
        pytest.raises(SystemExit) as stop,
    ):
        recipe.main(["--output", str(tmp_path / "out")])
    assert stop.value.code == 0
    assert "[dry run]" in capsys.readouterr().out
    assert [p for p in tmp_path.rglob("*")] == []  # no output, no scratch, no step marker


def _write_numbers(path: str, *, config=None, **inputs):
    paths = (
        Dataset.from_list(list(range(10)), num_shards=2)
        .map(lambda x: {"x": x})
        .write_jsonl(path + "/part-{shard}.jsonl")
    )
    return {"files": len(paths)}


def _count(path: str, *, config=None, numbers: str):
    return {"records": Dataset.from_files(numbers + "/*.jsonl").count()}


def test_step_runner_dry_run_reuses_complete_steps_and_stops_before_the_next(tmp_path, capsys):
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        numbers = StepRunner(str(tmp_path / "out")).run("numbers", _write_numbers)
    before = sorted(p for p in tmp_path.rglob("*") if "scratch" not in p.parts)
    with execution(backend="local", scratch=str(tmp_path / "scratch"), dry_run=True, progress=False, summary=False):
        steps = StepRunner(str(tmp_path / "out"))
        assert steps.run("numbers", _write_numbers).skipped  # complete: reused
        with pytest.raises(DryRunStop, match=r"1 step\(s\) complete: numbers \(reused\). Next, step 'count' would run"):
            steps.run("count", _count, inputs={"numbers": numbers})
    assert "plan " in capsys.readouterr().out  # the count pipeline's plan was printed
    assert sorted(p for p in tmp_path.rglob("*") if "scratch" not in p.parts) == before
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        assert StepRunner(str(tmp_path / "out")).run("count", _count, inputs={"numbers": numbers}).summary == {
            "records": 10
        }
