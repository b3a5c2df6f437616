"""Ray's node messages stay out of the driver's output; the engine reports a lost node itself (#31 item 5).

After a raylet was killed, Ray printed "(raylet) Raylet is terminated ..." and the twenty raylet log lines it
quotes, twice: about 50 lines in the middle of the run's output, beside the engine's own retry line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from zephyr.engine.backends import ray_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_RAYLET = {"lines": ["Raylet is terminated. Termination is unexpected."], "pid": "raylet", "is_err": False}


def _printed(data: dict, capsys) -> str:
    from ray._private import worker

    worker.print_to_stdstream(dict(data), ignore_prefix=False)
    return capsys.readouterr().out


def test_node_messages_are_shown_only_when_verbose_and_worker_output_always(capsys, monkeypatch):
    ray_cluster.keep_node_messages_out()
    monkeypatch.setenv("ZEPHYR_VERBOSITY", "0")
    assert _printed(_RAYLET, capsys) == ""
    worker_line = {"lines": ["user print 3"], "pid": 4242, "is_err": False, "ip": "127.0.0.1", "localhost": "127.0.0.1"}
    assert "user print 3" in _printed(worker_line, capsys)  # the user's own prints still reach the driver
    monkeypatch.setenv("ZEPHYR_VERBOSITY", "1")
    assert "Raylet is terminated" in _printed({**_RAYLET, "lines": ["Raylet is terminated (verbose)."]}, capsys)


_DRIVER = """
import os, sys, time
from zephyr import Dataset, execution

MARKER = sys.argv[2]  # a global of the driver's main module: shipped to the workers with `slow`

def slow(record):
    if os.path.basename(os.getcwd()) == "work-node_a":
        if not os.path.exists(MARKER):
            open(MARKER, "w").write(str(os.getpid()))
        time.sleep(0.05)
    return {**record, "n": len(record["t"])}

def count(key, records):
    return {"k": key, "n": sum(1 for _ in records)}

if __name__ == "__main__":
    ds = Dataset.from_list([{"i": i, "t": "x" * (i % 13)} for i in range(200)], num_shards=4).map(slow)
    settings = dict(backend="ray", ray_address=sys.argv[1], workers=2, scratch=sys.argv[3])
    with execution(**settings, progress=False, summary=False):
        out = ds.group_by(lambda r: r["i"] % 7, count, num_shards=3).collect()
    print("RESULT", sorted((r["k"], r["n"]) for r in out))
"""


@pytest.mark.slow  # ~40 s: a cluster of three raylets, one killed
@pytest.mark.ray
@pytest.mark.timeout(400)
def test_a_killed_raylet_leaves_only_the_engines_report_in_the_driver_output(tmp_path):
    from ray_local import LocalNodes

    script, marker = tmp_path / "driver.py", tmp_path / "node_a-started"
    script.write_text(_DRIVER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_SCRATCH_SHARED": "1", "ZEPHYR_VERBOSITY": "0"}
    nodes = LocalNodes(env={"PYTHONPATH": f"{REPO}:{tmp_path}"})
    try:
        nodes.start()
        nodes.add("node_a")
        nodes.add("node_b")
        driver = subprocess.Popen(
            [sys.executable, str(script), nodes.address, str(marker), str(tmp_path / "scratch")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "node_a never ran a shard"
        nodes.kill_raylet("node_a")
        output, _ = driver.communicate(timeout=300)
    finally:
        nodes.stop()
    assert "RESULT [(0, 29), (1, 29), (2, 29), (3, 29), (4, 28), (5, 28), (6, 28)]" in output, output
    assert "lost worker" in output and "died" in output  # the engine's own report of the lost node
    assert "(raylet)" not in output and "[state-dump]" not in output, output
