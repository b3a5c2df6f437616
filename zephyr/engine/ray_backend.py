"""Run shard tasks on a Ray cluster: a pool of long-lived Ray actors, one shard task at a time each.

Why actors rather than plain Ray tasks (both are implemented; `mode="tasks"` selects the other):
- a worker keeps its process, so `worker.load_stage` reads and unpickles a stage (and the tokenizer or
  classifier its functions hold) once per worker, not once per task; Ray may recycle or add task
  workers at will, and every new process pays the load again;
- the pool has exactly `capacity` processes with declared CPU/GPU/memory, so peak memory is known;
- when a worker dies we know its pid and node, and say so in the retry report.
`benchmarks/engine_groupby.py` measures both (per-task overhead and a warm-cache stage).

Retries stay in the executor: Ray's own task retries are off (`max_retries=0`, `max_restarts=0`), a dead
worker comes back as `Outcome(lost=True, detail=...)` naming the pid and node, and the actor is
replaced. A user exception is caught inside the worker and returned as a value, so it arrives as the
same `UserCodeError` (record preview, original traceback) as on the process backend.

Scratch (shuffle runs, the pickled stages, results) must be a URL every worker and the driver can reach:
a local directory for a one-machine cluster, `gs://...` or `s3://...` (or a shared NFS mount) for a
cluster of several machines.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import ray
import ray.exceptions

from zephyr.engine.backend_api import Outcome, portable_error
from zephyr.engine.worker import ShardResult, ShardTask, run_task

__all__ = ["WorkerResources", "RayBackend", "connect"]

_MODES = ("actors", "tasks")


@dataclass(frozen=True)
class WorkerResources:
    """What each Zephyr worker (one shard task at a time) asks Ray for.

    memory None reserves the run's `memory_per_worker`, so Ray never packs more workers on a node than
    its memory holds (the shuffle's buffers are bounded by that figure).
    """

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int | None = None

    def __post_init__(self) -> None:
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError(f"num_cpus and num_gpus must be >= 0, got {self.num_cpus} and {self.num_gpus}")


def connect(address: str | None = None, *, dashboard: bool = False) -> bool:
    """Connect to the Ray cluster at `address` ("auto", "ray://host:10001", "host:6379"), or start a
    local one on 127.0.0.1 when None; returns True when this call started or joined Ray.

    Reuses an already initialised Ray (e.g. a notebook's own `ray.init`). A local cluster has usage
    statistics off and no dashboard unless `dashboard=True` (then on http://127.0.0.1:8265).
    """
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        ray.init(address=address, log_to_driver=True)
        return True
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        ray.init(
            _node_ip_address="127.0.0.1",
            include_dashboard=dashboard,
            dashboard_host="127.0.0.1",
            log_to_driver=True,
        )
    except Exception as error:
        if dashboard and "dashboard" in str(error).lower():
            raise RuntimeError(
                f"the Ray dashboard could not start ({error}): it needs Ray's optional packages, "
                "pip install 'ray[default]'; or run without the dashboard"
            ) from error
        raise
    return True


def _prepare_process(sys_path: list[str], cwd: str) -> None:
    """Let a Ray worker import what the driver imports (scripts, test modules) and resolve relative
    output paths like the driver does, when those paths exist on this machine."""
    for entry in sys_path:
        if entry not in sys.path and (entry == "" or os.path.isdir(entry)):
            sys.path.append(entry)
    if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)


def _run(task: ShardTask) -> tuple[str, Any]:
    try:
        return "ok", run_task(task)
    except Exception as error:  # noqa: BLE001 - returned as a value: Ray would wrap it otherwise
        return "error", portable_error(error)


class ShardWorker:
    """A Ray actor that runs shard tasks one at a time, keeping the stage cache of its process warm."""

    def __init__(self, sys_path: list[str], cwd: str) -> None:
        _prepare_process(sys_path, cwd)

    def where(self) -> str:
        return f"pid {os.getpid()} on {socket.gethostname()}"

    def run(self, task: ShardTask) -> tuple[str, Any]:
        return _run(task)


def _run_as_task(task: ShardTask, sys_path: list[str], cwd: str) -> tuple[str, Any, str]:
    _prepare_process(sys_path, cwd)
    kind, value = _run(task)
    return kind, value, f"pid {os.getpid()} on {socket.gethostname()}"


@dataclass
class _Actor:
    handle: Any
    where_ref: Any  # ObjectRef of ShardWorker.where(): resolved when we need to name a dead worker
    number: int
    task: ShardTask | None = None

    def describe(self) -> str:
        try:
            where = ray.get(self.where_ref, timeout=0)
        except Exception:  # noqa: BLE001 - died before it started, or not started yet
            where = "pid unknown"
        return f"ray worker zephyr-worker-{self.number} ({where})"


class RayBackend:
    """The executor's backend on Ray: `capacity` shard tasks in flight, outcomes as they finish."""

    def __init__(
        self,
        config: Any,
        *,
        mode: str = "actors",
        resources: WorkerResources | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"unknown Ray backend mode {mode!r}: choose one of {', '.join(_MODES)}")
        connect(config.ray_address, dashboard=bool(getattr(config, "ray_dashboard", False)))
        self.mode = mode
        self.resources = resources or WorkerResources(
            num_cpus=float(getattr(config, "worker_cpus", 1.0)),
            num_gpus=float(getattr(config, "worker_gpus", 0.0)),
        )
        self._memory = self.resources.memory or config.memory_per_worker
        self.capacity = self._pool_size(config.workers)
        self._check_scratch(config.scratch_url)
        self._sys_path = list(sys.path)
        # relative output paths resolve as in the driver on a one-machine cluster; on a remote cluster
        # they have no meaning (use absolute URLs), so workers keep Ray's working directory there
        self._cwd = "" if config.ray_address else os.getcwd()
        self._options = {
            "num_cpus": self.resources.num_cpus,
            "num_gpus": self.resources.num_gpus,
            "memory": self._memory,
        }
        self.reuse_key = self.reuse_key_for(config, mode=mode, resources=resources)
        self._running: dict[Any, _Actor | ShardTask] = {}  # ObjectRef -> actor (actors) or task (tasks)
        self._actors: list[_Actor] = []
        self._started = 0
        if mode == "actors":
            self._actor_class = ray.remote(ShardWorker).options(
                max_restarts=0, max_concurrency=1, scheduling_strategy="SPREAD", **self._options
            )
            self._actors = [self._start_actor() for _ in range(self.capacity)]
        else:
            self._remote = ray.remote(_run_as_task)

    @staticmethod
    def reuse_key_for(config: Any, *, mode: str = "actors", resources: WorkerResources | None = None) -> tuple:
        """What must match for the next run to reuse this pool's actors (they hold the driver's sys.path)."""
        return ("ray", mode, resources, config.ray_address, config.workers, config.memory_per_worker,
                float(getattr(config, "worker_cpus", 1.0)), float(getattr(config, "worker_gpus", 0.0)),
                tuple(sys.path), os.getcwd())

    def healthy(self) -> bool:
        """Every actor idle and answering (a lost actor's replacement counts; a new Ray session does not)."""
        if not (self.mode == "actors" and ray.is_initialized() and not self._running and len(self._actors) == self.capacity):
            return False
        try:
            ray.get([actor.handle.where.remote() for actor in self._actors], timeout=10)
        except Exception:  # noqa: BLE001 - dead, or from an earlier Ray session: build a new pool
            return False
        return True

    # ----------------------------------------------------------------------------------- sizing
    def _pool_size(self, workers: int | None) -> int:
        """`workers` when given (an autoscaling cluster grows to it), else what the cluster holds now."""
        if workers is not None:
            return workers
        total = ray.cluster_resources()
        fits = [int(total.get("CPU", 0) // self.resources.num_cpus)] if self.resources.num_cpus else []
        if self.resources.num_gpus:
            fits.append(int(total.get("GPU", 0) // self.resources.num_gpus))
        if self._memory and total.get("memory"):
            fits.append(int(total["memory"] // self._memory))
        size = min(fits) if fits else 1
        if size < 1:
            raise RuntimeError(
                f"the Ray cluster cannot hold one Zephyr worker: each asks for {self.resources.num_cpus} CPU, "
                f"{self.resources.num_gpus} GPU and {self._memory >> 20} MiB of memory, the cluster has "
                f"{total.get('CPU', 0)} CPU, {total.get('GPU', 0)} GPU and {int(total.get('memory', 0)) >> 20} "
                "MiB. Lower memory_per_worker, or set workers=N to wait for an autoscaler to add nodes."
            )
        return size

    @staticmethod
    def _check_scratch(scratch: str) -> None:
        local = "://" not in scratch or scratch.startswith("file://")
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        if local and len(nodes) > 1:
            warnings.warn(
                f"the scratch location {scratch!r} is a local path but the Ray cluster has {len(nodes)} nodes: "
                "shuffle files written on one node must be readable on every other node. Unless it is a "
                "shared mount (NFS), pass a bucket: --scratch gs://BUCKET/zephyr-scratch (or s3://...).",
                stacklevel=3,
            )

    # -------------------------------------------------------------------------------- protocol
    def submit(self, task: ShardTask) -> None:
        options = {"name": _task_name(task)}
        if self.mode == "tasks":
            options.update(self._options, max_retries=0, retry_exceptions=False)
            ref = self._remote.options(**options).remote(task, self._sys_path, self._cwd)
            self._running[ref] = task
            return
        actor = next((a for a in self._actors if a.task is None), None)
        if actor is None:
            raise RuntimeError("submit() called with every Ray worker busy: check capacity first")
        actor.task = task
        self._running[actor.handle.run.options(**options).remote(task)] = actor

    def wait(self, timeout: float) -> list[Outcome]:
        if not self._running:
            return []
        refs = list(self._running)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:  # collect everything else that is done too
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return [self._outcome(ref) for ref in ready]

    def close(self) -> None:
        for actor in self._actors if ray.is_initialized() else ():
            try:
                ray.kill(actor.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - an actor of an earlier Ray session is already gone
                pass
        self._actors = []
        for ref in list(self._running):
            if self.mode == "tasks":
                ray.cancel(ref, force=True)
        self._running.clear()

    # --------------------------------------------------------------------------------- helpers
    def _start_actor(self) -> _Actor:
        self._started += 1
        handle = self._actor_class.remote(self._sys_path, self._cwd)
        return _Actor(handle, handle.where.remote(), self._started)

    def _outcome(self, ref: Any) -> Outcome:
        owner = self._running.pop(ref)
        task = owner if isinstance(owner, ShardTask) else owner.task
        try:
            value = ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            # raised outside our guarded call (e.g. the task arguments failed to unpickle)
            if isinstance(owner, _Actor):
                owner.task = None
            cause = getattr(error, "cause", None)
            return Outcome(task, error=cause if isinstance(cause, Exception) else error)
        except ray.exceptions.RayError as error:
            return Outcome(task, lost=True, detail=self._lost(owner, error))
        if isinstance(owner, _Actor):
            owner.task = None
        kind, result = value[0], value[1]
        if kind == "ok":
            return Outcome(task, result=result)
        return Outcome(task, error=result)

    def _lost(self, owner: _Actor | ShardTask, error: Exception) -> str:
        reason = _reason(error)
        if not isinstance(owner, _Actor):
            return f"ray task worker died: {reason}"
        detail = f"{owner.describe()} died: {reason}"
        ray.kill(owner.handle, no_restart=True)
        self._actors[self._actors.index(owner)] = self._start_actor()
        return detail


def _task_name(task: ShardTask) -> str:
    """What the Ray dashboard shows: stage index and name, and the shard."""
    name = getattr(task, "stage_name", "") or "shard task"
    return f"stage-{task.stage_index}:{name}"[:200] + f" [shard {task.shard}]"


def _reason(error: Exception) -> str:
    """Ray's long death messages, cut to the lines that say what happened."""
    if isinstance(error, ray.exceptions.OutOfMemoryError):
        return "killed by Ray's memory monitor (out of memory): lower memory_per_worker or add memory"
    text = " ".join(str(error).split())
    summary = text.split(". ")[0].rstrip(".")
    exit_detail = re.search(r"Worker exit detail: (.*?)(?: Some common causes|$)", text)
    if exit_detail:
        summary += f"; {exit_detail.group(1).strip()}"
    return f"{type(error).__name__}: {summary[:300]}"
