"""Joining a Ray cluster, and noticing when it is gone: errors of one line, within seconds.

Ray on its own waits 30 s for an unreachable `ray://` address, forever for an unreachable `host:port`,
and forever for results when the raylet of the driver's node dies (Ray ends a raylet whose
`ray::DashboardAgent` or `ray::RuntimeEnvAgent` died, and the driver's pending results never resolve).
Here an address is probed with a plain TCP connect first (3 s), and the backend polls the local raylet
(and, for a cluster this driver started, its GCS server) by PID while it waits for results. The GCS of a
cluster the driver joined (`--address host:port`, possibly on another machine) is probed by a TCP connect
once a second: without it, actors keep running while the GCS is gone and Ray ends the driver process
60 s later with a log line, mid-run.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from typing import Any

import psutil
import ray

from zephyr.engine.backends.api import ClusterError
from zephyr.progress import verbosity

__all__ = ["connect", "keep_node_messages_out", "ClusterWatch", "missing_package"]

_PROBE_TIMEOUT_S = 3.0
_GCS_PROBE_EVERY_S = 1.0
_GCS_PROBE_TIMEOUT_S = 0.5


def connect(address: str | None = None, *, dashboard: bool = False) -> bool:
    """Connect to the Ray cluster at `address` ("auto", "ray://host:10001", "host:6379"), or start a
    local one on 127.0.0.1 when None; returns True when this call started or joined Ray.

    Reuses an already initialised Ray (e.g. a notebook's own `ray.init`). A local cluster has usage
    statistics off and no dashboard unless `dashboard=True` (then on http://127.0.0.1:8265). Raises
    ClusterError (one line: what was tried, what happened, the fix) when no cluster answers.
    """
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        _probe(address)
        try:
            ray.init(address=address, log_to_driver=True)
        except (ConnectionError, RuntimeError, TimeoutError) as error:
            raise ClusterError(
                f"cannot connect to the Ray cluster at {address!r}: {_first_line(error)}. {_ADDRESS_FIX}"
            ) from None
        keep_node_messages_out()
        return True
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        ray.init(
            address="local",  # a new cluster of our own, never another user's `ray start` found by default
            _node_ip_address="127.0.0.1",
            include_dashboard=dashboard,
            dashboard_host="127.0.0.1",
            log_to_driver=True,
        )
    except Exception as error:
        if dashboard and "dashboard" in str(error).lower():
            raise ClusterError(
                f"the Ray dashboard could not start ({_first_line(error)}): it needs Ray's optional packages, "
                "pip install 'ray[default]'; or run without the dashboard"
            ) from error
        raise
    keep_node_messages_out()
    return True


def keep_node_messages_out() -> None:
    """Show Ray's messages from its nodes themselves (printed as "(raylet) ...") in the driver's output only
    with -v; the workers' own output (the user's prints) still reaches it.

    When a node dies, Ray prints "(raylet) Raylet is terminated ..." with the 20 raylet log lines it quotes
    (state dumps), twice: ~50 lines amid the run's output, measured on a 3-raylet cluster with one raylet
    killed. The engine reports the loss itself (a retry line naming the worker, its pid and node, and the
    run record), so they add nothing but noise. `log_to_driver=False` does not stop them (they come from
    GCS's error channel, not the log stream) and would hide the user's prints; Ray has no setting for them,
    so the one function both of its printing paths call is wrapped, once per process."""
    from ray._private import worker

    original = worker.print_worker_logs
    if getattr(original, "zephyr_filtered", False):
        return

    def print_worker_logs(data: dict[str, Any], print_file: Any, ignore_prefix: bool = False) -> None:
        if data.get("pid") == "raylet" and verbosity() < 1:
            return
        original(data, print_file, ignore_prefix)

    print_worker_logs.zephyr_filtered = True  # type: ignore[attr-defined]
    worker.print_worker_logs = print_worker_logs


_ADDRESS_FIX = (
    "Fix: start the cluster (`ray start --head` on its head node), check the address (host:6379 for the "
    "GCS, ray://host:10001 for Ray Client), or leave --address out to run on a local Ray of this machine"
)


def _probe(address: str) -> None:
    """A TCP connect to the address's host and port: refused or silent is an error in seconds."""
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS") or _auto_address()
        if target is None:
            raise ClusterError(
                "--address auto found no running Ray cluster on this machine (no RAY_ADDRESS, no `ray start` "
                f"session, no GCS process). {_ADDRESS_FIX}"
            )
        if target == "auto":
            return
        address = target
    hostport = address.split("://", 1)[1] if "://" in address else address
    hostport = hostport.split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        if not host and hostport and not port.isdigit():
            host, port = hostport, "10001" if address.startswith("ray://") else "6379"
        else:
            raise ClusterError(f"cannot read the Ray address {address!r}: expected host:port or ray://host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_TIMEOUT_S):
            pass
    except OSError as error:
        reason = (
            "no answer within 3 s" if isinstance(error, TimeoutError | socket.timeout) else error.strerror or str(error)
        )
        raise ClusterError(f"no Ray cluster answers at {address!r} ({host}:{port}: {reason}). {_ADDRESS_FIX}") from None


def _auto_address() -> str | None:
    """What `ray.init(address="auto")` would find; None when it would find nothing."""
    try:
        from ray._private import services

        return services.canonicalize_bootstrap_address_or_die("auto")
    except ConnectionError:
        return None
    except Exception:  # noqa: BLE001 - Ray internals moved: let ray.init decide
        return "auto"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


class ClusterWatch:
    """The processes this driver's Ray needs on this machine, polled by PID (cheap, no RPC).

    - the raylet of the driver's node (always local: a driver attaches to a raylet of its machine);
    - for a cluster this driver started, the GCS server too;
    - the raylet's agents (ray::DashboardAgent, ray::RuntimeEnvAgent), only to name the cause.
    Ray Client (`ray://`) drivers have no local raylet: the client reports a lost server on its own.
    """

    def __init__(self) -> None:
        self.watched: list[tuple[str, psutil.Process, Any]] = []  # (name, process, Popen or None)
        self.agents: list[tuple[str, int]] = []
        self.gcs_address: str | None = None  # a joined cluster's GCS (host:port), probed by TCP connect
        self._gcs_next_probe = 0.0
        self._gcs_down_since: float | None = None
        node = getattr(getattr(ray, "_private", None), "worker", None)
        node = getattr(node, "_global_node", None)
        if node is None:
            return
        started = getattr(node, "all_processes", {}) or {}
        for kind in ("raylet", "gcs_server"):
            for info in started.get(kind, ()):
                with contextlib.suppress(psutil.Error):
                    self.watched.append((kind, psutil.Process(info.process.pid), info.process))
        if not any(kind == "gcs_server" for kind, _, _ in self.watched):
            with contextlib.suppress(Exception):  # Ray internals moved: no GCS probe
                self.gcs_address = str(node.gcs_address)
        if not any(kind == "raylet" for kind, _, _ in self.watched):
            raylet = _find_raylet(getattr(node, "raylet_socket_name", None))
            if raylet is not None:
                self.watched.append(("raylet", raylet, None))
        for kind, process, _ in self.watched:
            if kind == "raylet":
                with contextlib.suppress(psutil.Error):
                    for child in process.children():
                        name = " ".join(child.cmdline()[:1])
                        if name.startswith("ray::") and "Agent" in name:
                            self.agents.append((name, child.pid))

    def check(self) -> None:
        """Raise ClusterError naming what died, if any watched process is gone."""
        for kind, process, popen in self.watched:
            code = popen.poll() if popen is not None else None
            if code is None:
                try:
                    if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                        continue
                except psutil.Error:
                    pass
            what = "the raylet of this driver's node" if kind == "raylet" else "the cluster's GCS server"
            exit_text = f" (exit code {code})" if code is not None else ""
            dead_agents = [f"{name} (pid {pid})" for name, pid in self.agents if not psutil.pid_exists(pid)]
            cause = (
                f" after {', '.join(dead_agents)} died (Ray ends a raylet whose agent dies)"
                if dead_agents and kind == "raylet"
                else ""
            )
            raise ClusterError(
                f"lost the Ray cluster: {what}, {kind} pid {process.pid}, is gone{exit_text}{cause}. Shard tasks "
                "in flight are lost; committed shards are kept: run the same command again to resume (a local "
                "Ray is started afresh)."
            )
        if self.gcs_address is not None:
            self._check_gcs()

    def _check_gcs(self) -> None:
        """Raise ClusterError when the joined cluster's GCS has refused or ignored connections for longer than
        ZEPHYR_RAY_GCS_GRACE_S (default 5 s; a cluster with GCS fault tolerance restarts its GCS meanwhile)."""
        now = time.monotonic()
        if now < self._gcs_next_probe:
            return
        self._gcs_next_probe = now + _GCS_PROBE_EVERY_S
        assert self.gcs_address is not None
        host, _, port = self.gcs_address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=_GCS_PROBE_TIMEOUT_S):
                pass
            self._gcs_down_since = None
            return
        except (OSError, ValueError) as error:
            reason = "no answer" if isinstance(error, TimeoutError | socket.timeout) else str(error)
        if self._gcs_down_since is None:
            self._gcs_down_since = now
        grace = float(os.environ.get("ZEPHYR_RAY_GCS_GRACE_S", "5"))
        if now - self._gcs_down_since >= grace:
            raise ClusterError(
                f"lost the Ray cluster: its GCS at {self.gcs_address} does not answer ({reason}) for "
                f"{now - self._gcs_down_since:.0f} s (the head node or its gcs_server is gone). Shard tasks in "
                "flight are lost; committed shards are kept: restart the cluster and run the same command again "
                "to resume (ZEPHYR_RAY_GCS_GRACE_S sets how long a GCS may be away)."
            )


def _find_raylet(socket_name: str | None) -> psutil.Process | None:
    if not socket_name:
        return None
    for process in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if process.info["name"] == "raylet" and socket_name in " ".join(process.info["cmdline"] or []):
                return process
    return None


def missing_package(error: BaseException) -> str | None:
    """The module a worker could not import ("zephyr", a recipe's dependency), from Ray's error text."""
    found = re.findall(r"No module named '([\w.]+)'", str(error))
    return found[-1] if found else None
