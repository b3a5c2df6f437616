"""Versioned steps: a rerun skips completed versions; a changed step reruns it and its dependents only."""

from __future__ import annotations

import json
from pathlib import Path

from zephyr.steps import StepRunner

calls: list[str] = []


def make_numbers(path, *, config):
    calls.append("numbers")
    Path(path).mkdir(parents=True, exist_ok=True)
    (Path(path) / "numbers.json").write_text(json.dumps(list(range(config["n"]))))
    return {"count": config["n"]}


def total(path, *, config, numbers):
    calls.append("total")
    values = json.loads((Path(numbers) / "numbers.json").read_text())
    return {"total": sum(values) * config["scale"]}


def unrelated(path, *, config):
    calls.append("unrelated")
    return {"ok": True}


def _pipeline(root, n, scale):
    steps = StepRunner(str(root))
    numbers = steps.run("numbers", make_numbers, config={"n": n})
    result = steps.run("total", total, config={"scale": scale}, inputs={"numbers": numbers})
    other = steps.run("unrelated", unrelated, config={})
    return numbers, result, other


def test_rerun_skips_and_changes_propagate_downstream_only(tmp_path):
    calls.clear()
    numbers, result, _ = _pipeline(tmp_path, 10, 1)
    assert result.summary == {"total": 45} and not result.skipped
    assert calls == ["numbers", "total", "unrelated"]

    calls.clear()
    again, result2, _ = _pipeline(tmp_path, 10, 1)
    assert calls == [] and result2.skipped and result2.summary == {"total": 45}
    assert again.path == numbers.path

    calls.clear()
    _, result3, _ = _pipeline(tmp_path, 10, 2)  # only the downstream step changed
    assert calls == ["total"] and result3.summary == {"total": 90}

    calls.clear()
    changed, result4, _ = _pipeline(tmp_path, 5, 2)  # upstream change reruns its dependents
    assert calls == ["numbers", "total"] and result4.summary == {"total": 20}
    assert changed.path != numbers.path


def test_failed_step_leaves_no_marker_and_reruns(tmp_path):
    def broken(path, *, config):
        raise RuntimeError("boom")

    steps = StepRunner(str(tmp_path))
    try:
        steps.run("broken", broken, config={})
    except RuntimeError:
        pass
    assert not list(tmp_path.rglob("_STEP.json"))
