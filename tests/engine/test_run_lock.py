"""Two runs from one working folder do not break each other (issue #17 item 12)."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from zephyr import Dataset, execution
from zephyr.engine.run.lock import LOCK_NAME, RunLockedError
from zephyr.fs import url_to_fs

_SLOW = textwrap.dedent("""
    import sys, time
    from zephyr import Dataset, execution

    def slow(record):
        time.sleep(float(sys.argv[3]))
        return {"x": record}

    if __name__ == "__main__":
        with execution(backend="local", scratch=sys.argv[2], summary=False, progress=False):
            records = Dataset.from_list(list(range(3000)), num_shards=2).map(slow)
            records.write_jsonl(sys.argv[1] + "/part-{shard}.jsonl")
""")


def test_a_second_run_on_the_same_scratch_and_output_says_so_and_a_dead_ones_lock_is_taken_over(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(_SLOW)
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, str(script), str(out), str(scratch), "0.01"], env=env)
    try:
        deadline = time.monotonic() + 20
        while not (out / LOCK_NAME).exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the first run never started"
            time.sleep(0.02)
        # the same pipeline started again from the same folder: it shares the checkpoint directory
        second = subprocess.run(
            [sys.executable, str(script), str(out), str(scratch), "0"], env=env, capture_output=True, check=False
        )
        assert second.returncode != 0
        assert f"another run (pid {proc.pid} on " in second.stderr.decode()
        assert "is using the scratch (checkpoint) directory" in second.stderr.decode()
        with execution(backend="local", scratch=str(scratch), summary=False, progress=False):
            # another pipeline into the same output folder is refused too, in one line
            with pytest.raises(RunLockedError, match=r"is using the output folder .*/out") as info:
                Dataset.from_list([1]).map(lambda x: {"x": x}).write_jsonl(str(out / "other-{shard}.jsonl"))
            assert "\n" not in str(info.value)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # the killed run's locks (scratch and output) are taken over: the same pipeline resumes and finishes
    rerun = subprocess.run(
        [sys.executable, str(script), str(out), str(scratch), "0"], env=env, capture_output=True, check=False
    )
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["part-0.jsonl", "part-1.jsonl"]
    assert not list(scratch.rglob(LOCK_NAME))


@dataclass(frozen=True)
class _TryTheLock:
    """Runs inside the pipeline: tries to create the output's lock object the way a second run would."""

    lock_url: str

    def __call__(self, record):
        fs, path = url_to_fs(self.lock_url)
        try:
            fs.pipe_file(path, b"{}", mode="create")
            taken = "no lock object"
        except FileExistsError:
            taken = "held"
        return {"x": record, "lock": taken}


def test_a_bucket_output_is_locked_with_a_create_if_absent_object(s3_env, scratch):
    """S3 (moto) refuses a second create of the lock object (If-None-Match: *), so two runs cannot both
    take it; a foreign run's lock is reported in one line naming the object to delete."""
    bucket = s3_env.create_bucket("us-east-1")
    out = f"s3://{bucket}/out"
    lock_url = f"{out}/{LOCK_NAME}"
    fs, lock_path = url_to_fs(lock_url)
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        rows = (
            Dataset.from_list([1, 2], num_shards=1).map(_TryTheLock(lock_url)).write_jsonl(out + "/part-{shard}.jsonl")
        )
        assert not fs.exists(lock_path)  # released when the run ended
        assert [r["lock"] for r in Dataset.from_files(out + "/part-*.jsonl").collect()] == ["held", "held"]
        assert rows == [f"{out}/part-0.jsonl"]
        # a live run on another machine holds it: refused in one line, naming the holder and the object
        fs.pipe_file(lock_path, json.dumps({"pid": 1, "host": "node-7", "started": "2026-01-01 00:00:00"}).encode())
        with pytest.raises(RunLockedError, match=r"pid 1 on node-7.*output folder s3://.*/out.*delete s3://") as info:
            Dataset.from_list([3]).map(lambda x: {"x": x}).write_jsonl(out + "/other-{shard}.jsonl")
        assert "\n" not in str(info.value)
        assert json.loads(fs.cat_file(lock_path))["host"] == "node-7"  # the holder's lock is left alone
        fs.rm_file(lock_path)
        Dataset.from_list([3]).map(lambda x: {"x": x}).write_jsonl(out + "/other-{shard}.jsonl")
        assert not fs.exists(lock_path)


def _write_one(path, *, config):
    from zephyr.fs import open_url

    with open_url(path + "/one.txt", "w", compression=None) as handle:
        handle.write("1")
    return {"ok": 1}


def test_a_recipe_root_in_a_bucket_is_locked_while_its_step_runner_holds_it(s3_env, scratch):
    """Released at the end of the `with` block, not whenever the cycle collector frees the runner: looking
    for a step marker on a bucket leaves the runner in a reference cycle (fsspec's `sync()` keeps the
    FileNotFoundError), so a test that only dropped its runner failed in CI when no collection came."""
    from zephyr.steps import StepRunner

    bucket = s3_env.create_bucket("us-east-1")
    root = f"s3://{bucket}/recipe"
    fs, lock_path = url_to_fs(f"{root}/{LOCK_NAME}")
    gc.disable()  # no collection between the steps below: as in the failing CI run
    try:
        with execution(backend="local", scratch=scratch, summary=False, progress=False):
            with StepRunner(root) as runner:
                assert runner.run("one", _write_one, config={}).summary == {"ok": 1}
                assert fs.exists(lock_path)
            fs.invalidate_cache()
            assert not fs.exists(lock_path)
            # a runner used without `with` holds the root until it is collected (or the process ends)
            dropped = StepRunner(root)
            assert dropped.run("one", _write_one, config={}).skipped
            fs.invalidate_cache()
            assert fs.exists(lock_path)
            del dropped
            gc.collect()
            fs.invalidate_cache()
            assert not fs.exists(lock_path)
    finally:
        gc.enable()
