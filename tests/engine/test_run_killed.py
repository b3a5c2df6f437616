"""A run killed with `kill -9` reads as "killed", not "running" forever; a silent remote run as "lost".

The record of a `zephyr run` said "running" after its process was killed, in the record and in `zephyr ui`:
the dead process could not say otherwise. Readers now check: the same host's pid (and that it is still the
run's own process), or another host's heartbeat (the record is rewritten every HEARTBEAT_S while running).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from zephyr.engine.run import record as run_record
from zephyr.engine.run.record import RunRecorder, observed_status, read_run_records

REPO = Path(__file__).resolve().parents[2]

SLOW_SCRIPT = """
import sys, time
from zephyr import Dataset
from zephyr.steps import StepRunner

def slow(record):
    time.sleep(0.5)
    return record

def step(path, *, config):
    Dataset.from_list([{"i": i} for i in range(400)], num_shards=4).map(slow).write(path + "/p-{shard}.jsonl").execute()
    return {}

def main():
    with StepRunner(sys.argv[1]) as steps:
        steps.run("slow_step", step, config={})
"""


def _stamp(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_killed_zephyr_run_reads_as_killed_in_the_record_and_the_ui(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT)
    root = tmp_path / "root"
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_RUNS": str(tmp_path / "runs")}
    command = [sys.executable, "-m", "zephyr.cli", "run", "--backend", "local", "--scratch", str(tmp_path / "s")]
    process = subprocess.Popen(
        [*command, str(script), str(root)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            records = read_run_records(str(root))
            if records and records[0]["jobs"]:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run wrote no record with a job within 120 s")
        assert records[0]["status"] == "running"  # alive: read as it says
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    on_disk = json.loads(next((root / "_runs").glob("*.json")).read_text())
    assert on_disk["status"] == "running"  # the dead process could not finish its record
    (record,) = read_run_records(str(root))
    assert record["status"] == "killed" and record["recorded_status"] == "running"
    assert f"pid {process.pid} on {socket.gethostname()}" in record["status_note"]
    assert record["steps"][0]["status"] == "killed" and record["jobs"][0]["status"] == "killed"

    from zephyr.ui.runs import runs_view
    from zephyr.ui.source import Root

    view = runs_view(Root(str(root)))
    assert view["runs"][0]["status"] == "killed" and view["live"]["status"] == "killed"
    assert [s["status"] for s in view["steps"]] == ["killed"]


def test_a_pid_reused_by_a_later_process_is_not_the_run():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record = {
            "status": "running",
            "host": socket.gethostname(),
            "pid": child.pid,
            "started_at": _stamp(3600),  # the run started an hour before this process did
            "updated_at": _stamp(3500),
        }
        assert observed_status(record)["status"] == "killed"
        assert observed_status({**record, "started_at": _stamp(0)})["status"] == "running"
    finally:
        child.kill()
        child.wait()


def test_a_run_on_another_host_is_lost_when_its_heartbeat_stops():
    record = {"status": "running", "host": "some-other-host", "pid": 1, "updated_at": _stamp(10), "steps": []}
    assert observed_status(record) is record  # a recent heartbeat: running
    lost = observed_status({**record, "updated_at": _stamp(run_record.LOST_AFTER_S + 60)})
    assert lost["status"] == "lost" and "some-other-host" in lost["status_note"]
    assert observed_status({**record, "status": "succeeded", "updated_at": _stamp(99999)})["status"] == "succeeded"


def test_a_running_record_is_rewritten_by_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(run_record, "HEARTBEAT_S", 0.2)
    recorder = RunRecorder(record_dir=str(tmp_path))
    recorder.write(force=True)
    path = Path(recorder.path)
    first = path.stat().st_mtime_ns
    time.sleep(1.0)
    assert path.stat().st_mtime_ns > first  # nothing changed, yet the record was written again
    recorder.finish("succeeded")
    time.sleep(0.5)
    after = path.stat().st_mtime_ns
    time.sleep(0.6)
    assert path.stat().st_mtime_ns == after  # a finished run's record is left alone
