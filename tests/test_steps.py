"""Versioned steps: a rerun skips completed versions; a changed step reruns it and its dependents only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zephyr.steps import StepRunner


class _Calls(list):
    """The steps below append to this log of calls, so they read it: a fingerprint describes the module
    globals a function reads, and the log's growing content would change every version. It stands for
    itself by name (`__fingerprint__`): test instrumentation, no part of what the steps compute."""

    def __fingerprint__(self) -> str:
        return "calls"


calls = _Calls()


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
    with pytest.raises(RuntimeError, match="boom"):
        steps.run("broken", broken, config={})
    assert not list(tmp_path.rglob("_STEP.json"))
    assert StepRunner(str(tmp_path)).run("broken", unrelated, config={}).summary == {"ok": True}


class _Crash(dict):
    """Set ["after"] to make `write_parts` die midway: a lost worker, same code, same version (so it
    stands for itself by name, like `calls`)."""

    def __fingerprint__(self) -> str:
        return "crash switch"


crash = _Crash(after=None)


def write_parts(path, *, config):
    """Writes `parts` files; with crash["after"] set, raises after writing that many (a lost worker)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    for i in range(config["parts"]):
        if crash["after"] is not None and i == crash["after"]:
            raise RuntimeError("worker lost")
        (Path(path) / f"part-{i}.txt").write_text(f"{i} of {config['parts']}, attempt {len(calls)}")
    calls.append("parts")
    return {"parts": config["parts"], "first": str(Path(path) / "part-0.txt")}


def test_failed_forced_rerun_keeps_the_completed_output(tmp_path):
    calls.clear()
    crash["after"] = None
    done = StepRunner(str(tmp_path)).run("parts", write_parts, config={"parts": 3})
    before = {p.name: p.read_text() for p in Path(done.path).iterdir()}
    crash["after"] = 1
    try:
        with pytest.raises(RuntimeError, match="worker lost"):
            StepRunner(str(tmp_path), force=("parts",)).run("parts", write_parts, config={"parts": 3})
    finally:
        crash["after"] = None
    # The completed output is untouched, still marked complete, and the next run reuses it.
    assert {p.name: p.read_text() for p in Path(done.path).iterdir()} == before
    # the failed attempt left nothing (the run record's _runs/ aside)
    assert [p.name for p in tmp_path.iterdir() if p.name != "_runs"] == [Path(done.path).name]
    again = StepRunner(str(tmp_path)).run("parts", write_parts, config={"parts": 3})
    assert again.skipped and again.summary == done.summary


def test_forced_rerun_replaces_the_output_with_the_new_one(tmp_path):
    calls.clear()
    crash["after"] = None
    first = StepRunner(str(tmp_path)).run("parts", write_parts, config={"parts": 2})
    second = StepRunner(str(tmp_path), force=("parts",)).run("parts", write_parts, config={"parts": 2})
    assert second.path == first.path and not second.skipped
    assert second.summary["first"] == str(Path(first.path) / "part-0.txt")  # names the final place
    assert (Path(first.path) / "part-0.txt").read_text() == "0 of 2, attempt 1"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "_runs") == [Path(first.path).name]


def test_leftovers_of_a_failed_run_are_not_part_of_the_completed_output(tmp_path):
    calls.clear()
    crash["after"] = 3
    try:
        with pytest.raises(RuntimeError):
            StepRunner(str(tmp_path)).run("parts", write_parts, config={"parts": 5})
    finally:
        crash["after"] = None
    # The rerun writes 5 parts too; but a run of the same version that writes fewer must not inherit
    # the failed run's files: simulate with a stray file the failed attempt left.
    step_dir = next(tmp_path.glob("parts-*"))
    (step_dir / "part-9.txt").write_text("left by the failed attempt")
    done = StepRunner(str(tmp_path)).run("parts", write_parts, config={"parts": 5})
    assert sorted(p.name for p in Path(done.path).glob("part-*")) == [f"part-{i}.txt" for i in range(5)]


def test_a_second_run_on_the_same_output_root_is_refused_while_the_first_holds_it(tmp_path):
    """Two recipe runs on one --output: the second reran an unfinished step into the folder the first was
    reading; one failed and the other marked steps complete with documents missing."""
    import subprocess
    import sys

    from zephyr.engine.run.lock import RunLockedError

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from zephyr.engine.run.lock import hold_folder; "
            "hold_folder(sys.argv[1], 'recipe output folder'); print('held', flush=True); time.sleep(120)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        calls.clear()
        with pytest.raises(RunLockedError, match=rf"pid {holder.pid} .* recipe output folder {tmp_path}"):
            StepRunner(str(tmp_path)).run("numbers", make_numbers, config={"n": 3})
        assert calls == [] and not list(tmp_path.glob("numbers-*"))
    finally:
        holder.kill()
        holder.wait()
    # the holder died: its lock is taken over and the run goes on; the lock is released with the block
    with StepRunner(str(tmp_path)) as runner:
        assert runner.run("numbers", make_numbers, config={"n": 3}).summary == {"count": 3}
        assert (tmp_path / ".zephyr-run.lock").exists()
    assert not (tmp_path / ".zephyr-run.lock").exists()


def _write_paths(path, *, config, sample):
    Path(path).mkdir(parents=True, exist_ok=True)
    files = sorted(str(p) for p in Path(sample).glob("*.txt"))
    (Path(path) / "list.json").write_text(json.dumps(files))
    return {"files": files, "store": str(Path(path) / "list.json")}


def _read_paths(path, *, config, listed):
    return {"n": len(json.loads(Path(listed["store"]).read_text())), "tag": config["tag"]}


def test_step_versions_do_not_depend_on_how_the_output_root_is_spelled(tmp_path, monkeypatch):
    """Issue #28 fault 6: `--output O` then the absolute path of O recomputed every step into new version
    folders. Paths inside the root (in configs, plain inputs, earlier steps' summaries) count relative to it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "sample").mkdir(parents=True)
    (tmp_path / "out" / "sample" / "a.txt").write_text("a")
    versions = []
    for root in ("out", str(tmp_path / "out"), "./out/../out"):
        with StepRunner(root) as steps:
            sample = f"{root}/sample"
            listed = steps.run("list", _write_paths, config={"where": sample}, inputs={"sample": sample})
            read = steps.run("read", _read_paths, config={"tag": "x"}, inputs={"listed": listed.summary})
        versions.append((listed.version, read.version, listed.skipped, read.skipped))
    assert len({v[:2] for v in versions}) == 1, versions
    assert [v[2:] for v in versions] == [(False, False), (True, True), (True, True)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name != "_runs") == sorted(
        ["sample", f"list-{versions[0][0][:10]}", f"read-{versions[0][1][:10]}"]
    )
