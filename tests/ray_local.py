"""A Ray cluster of several nodes on one machine (`ray start` processes on 127.0.0.1), for tests and
benchmarks of the Ray backend as a real multi-node cluster: separate raylets, temp dirs, custom
resources and working directories, and a node that can be killed. Tests import it as `ray_local`
(tests/ is on their path); a benchmark puts tests/ on `sys.path` first.

Why not `ray.cluster_utils.Cluster`: it runs every node inside the test's own session and working
directory; here each node is what an operator starts on a machine (`ray start --address ...`), with its
own environment and directory, so a relative or node-local path cannot be shared by accident.

Processes are ended by PID (everything whose command line names this cluster's root folder, and their
children): `ray stop` would end every Ray process on the machine, other users' included.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["LocalNodes", "Node", "free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Node:
    name: str  # also its custom resource ("node_a": 1)
    temp_dir: Path
    work_dir: Path  # the working directory of its workers
    head: bool = False


@dataclass
class LocalNodes:
    """`start()` a head (no CPUs: the driver's node), then `add("node_a")` worker nodes of `cpus` each."""

    env: dict[str, str] = field(default_factory=dict)  # extra environment of every node (and its workers)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zr", dir="/tmp")))  # short: socket paths
    nodes: dict[str, Node] = field(default_factory=dict)
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _ray(self, args: list[str], node: Node) -> None:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", **self.env}
        command = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            *args,
            "--node-ip-address",
            "127.0.0.1",
            "--temp-dir",
            str(node.temp_dir),
            "--disable-usage-stats",
        ]
        done = subprocess.run(command, cwd=node.work_dir, env=env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"`{' '.join(command)}` failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )

    def _node(self, name: str, head: bool = False) -> Node:
        node = Node(name, self.root / name[-1:], self.root / f"work-{name}", head)  # temp dirs short
        node.work_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[name] = node
        return node

    def start(self, *, head_cpus: int = 0) -> LocalNodes:
        self.port = free_port()
        node = self._node("head", head=True)
        self._ray(
            [
                "--head",
                "--port",
                str(self.port),
                "--num-cpus",
                str(head_cpus),
                "--include-dashboard",
                "false",
                "--resources",
                json.dumps({"head": 1}),
            ],
            node,
        )
        return self

    def add(self, name: str, *, cpus: int = 1, gpus: int = 0) -> Node:
        """A worker node; `gpus` it declares (Ray takes the number as given: a CPU machine can declare GPUs,
        and tasks holding one see its id in `ray.get_gpu_ids()` and CUDA_VISIBLE_DEVICES)."""
        node = self._node(name)
        args = ["--address", self.address, "--num-cpus", str(cpus), "--resources", json.dumps({name: 1})]
        self._ray([*args, "--num-gpus", str(gpus)] if gpus else args, node)
        return node

    def processes(self, name: str | None = None) -> list[psutil.Process]:
        """The cluster's processes (or one node's), children included: their command lines name the temp dir."""
        marks = [str(self.nodes[name].temp_dir if name else self.root)]
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(process.info.get("cmdline") or [])
            if any(mark + "/" in cmdline for mark in marks):
                found[process.pid] = process
                with contextlib.suppress(psutil.Error):
                    for child in process.children(recursive=True):
                        found[child.pid] = child
        return list(found.values())

    def raylet(self, name: str) -> psutil.Process:
        mark = str(self.nodes[name].temp_dir) + "/"
        for process in self.processes(name):
            with contextlib.suppress(psutil.Error):
                if process.name() == "raylet" and mark in " ".join(process.cmdline()):
                    return process
        raise LookupError(f"no raylet of node {name} running")

    def kill_raylet(self, name: str) -> int:
        """SIGKILL node `name`'s raylet (its workers lose their node and exit); returns its PID."""
        raylet = self.raylet(name)
        os.kill(raylet.pid, signal.SIGKILL)
        return raylet.pid

    def stop(self) -> None:
        processes = self.processes()
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(processes, timeout=10)
        time.sleep(0.2)
        shutil.rmtree(self.root, ignore_errors=True)
