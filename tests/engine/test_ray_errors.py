"""`zephyr run` against Ray clusters that are not there, or stop being there: one line each, in seconds
(Ray alone waits 30 s for a silent `ray://`, and forever for a silent host:port or a dead raylet)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """
import os, threading, time
from zephyr import Dataset

def slow(x):
    time.sleep(1.0)
    return x

def main():
    print(Dataset.from_list(list(range(20)), num_shards=20).map(slow).collect())
"""

_KILL_AGENT = """
import os, signal, threading, time
import psutil
from zephyr import Dataset

def slow(x):
    open(os.environ["STARTED"], "a").close()
    time.sleep(1.0)
    return x

def kill_dashboard_agent():
    # what an OOM killer or an operator does to one of Ray's own processes on this node
    while not os.path.exists(os.environ["STARTED"]):
        time.sleep(0.1)
    import ray
    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    for child in psutil.Process(raylet).children():
        if child.cmdline()[:1] == ["ray::DashboardAgent"]:
            os.kill(child.pid, signal.SIGKILL)
            print(f"killed DashboardAgent {child.pid} at {time.time()}", flush=True)

def main():
    threading.Thread(target=kill_dashboard_agent, daemon=True).start()
    print(Dataset.from_list(list(range(60)), num_shards=60).map(slow).collect())
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _zephyr_run(tmp_path: Path, script: str, *args: str, timeout: float = 120, env: dict | None = None):
    path = tmp_path / "pipeline.py"
    path.write_text(textwrap.dedent(script))
    environ = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        **(env or {}),
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "run", "--scratch", str(tmp_path / "scratch"), *args, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=tmp_path,
    )
    return done, time.monotonic() - started


def _error_lines(stderr: str) -> list[str]:
    """The error lines (`zephyr run` also prints its run summary, a table, before the error)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith("zephyr run: error:")]


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_unreachable_address_is_one_line_in_seconds(tmp_path, scheme):
    address = f"{scheme}127.0.0.1:{_free_port()}"
    done, seconds = _zephyr_run(tmp_path, _SCRIPT, "--address", address)
    lines = _error_lines(done.stderr)
    assert done.returncode == 1, done.stderr[-3000:]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("zephyr run: error: ClusterError: no Ray cluster answers at") and address in lines[0]
    assert "ray start --head" in lines[0]
    assert seconds < 30, f"took {seconds:.1f} s"  # python + imports on 2 busy cores; the probe itself is < 3 s


def test_auto_without_a_cluster_is_one_line(tmp_path):
    if any(p.info["name"] == "gcs_server" for p in psutil.process_iter(["name"])):
        pytest.skip("another Ray cluster runs on this machine: `auto` would find it")
    done, seconds = _zephyr_run(tmp_path, _SCRIPT, "--address", "auto")
    lines = _error_lines(done.stderr)
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert "--address auto found no running Ray cluster" in lines[0]
    assert seconds < 30


def test_dead_raylet_is_an_error_naming_what_died(tmp_path):
    """#17 item 13: killing ray::DashboardAgent takes the raylet down; the driver used to wait forever."""
    started = tmp_path / "started"
    done, seconds = _zephyr_run(
        tmp_path, _KILL_AGENT, "--backend", "ray", "--workers", "2", env={"STARTED": str(started)}, timeout=240
    )
    assert "killed DashboardAgent" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]
    last = _error_lines(done.stderr)[-1]
    assert last.startswith("zephyr run: error: ClusterError: lost the Ray cluster: the raylet of this driver's node"), (
        done.stderr[-3000:]
    )
    assert "ray::DashboardAgent (pid" in last and "run the same command again to resume" in last
    killed_at = float(done.stdout.split("killed DashboardAgent")[1].split(" at ")[1].split()[0])
    assert time.time() - killed_at < 90  # bounded: the raylet dies ~1 s after its agent, we notice in 0.5 s


_KILL_GCS = """
import os, signal, threading, time
from zephyr import Dataset

def slow(x):
    open(os.environ["STARTED"], "a").close()
    time.sleep(1.0)
    return x

def kill_gcs():
    # the head node of a cluster this driver joined (not started) goes away mid-run
    while not os.path.exists(os.environ["STARTED"]):
        time.sleep(0.1)
    os.kill(int(os.environ["GCS_PID"]), signal.SIGKILL)
    print(f"killed gcs_server at {time.time()}", flush=True)

def main():
    threading.Thread(target=kill_gcs, daemon=True).start()
    print(Dataset.from_list(list(range(60)), num_shards=60).map(slow).collect())
"""


@pytest.mark.slow
def test_dead_gcs_of_a_joined_cluster_is_one_line_in_seconds(tmp_path):
    """Without the GCS probe the run went on (actors do not need the GCS) and Ray ended the driver process
    60 s later with a log line, not a Zephyr error."""
    from ray_local import LocalNodes

    started = str(tmp_path / "started")
    nodes = LocalNodes(env={"PYTHONPATH": str(REPO), "STARTED": started})  # the workers' environment
    try:
        nodes.start()
        nodes.add("node_a", cpus=1)
        (gcs,) = [p for p in nodes.processes("head") if p.name() == "gcs_server"]
        env = {"STARTED": started, "GCS_PID": str(gcs.pid), "ZEPHYR_SCRATCH_SHARED": "1"}
        args = ("--backend", "ray", "--address", nodes.address, "--workers", "1")
        done, _ = _zephyr_run(tmp_path, _KILL_GCS, *args, env=env, timeout=240)
    finally:
        nodes.stop()
    assert "killed gcs_server" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("zephyr run: error: ClusterError: lost the Ray cluster: its GCS at")
    assert f":{nodes.port} does not answer" in lines[0] and "run the same command again to resume" in lines[0]
    killed_at = float(done.stdout.split("killed gcs_server at ")[1].split()[0])
    assert time.time() - killed_at < 30  # 5 s of grace, a probe a second; Ray alone: 60 s, then a crash
