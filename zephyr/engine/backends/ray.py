"""Run shard tasks on a Ray cluster: a pool of long-lived Ray actors, one shard task at a time each.

Why actors rather than plain Ray tasks (both are implemented; `mode="tasks"` selects the other):
- a worker keeps its process, so `worker.load_stage` reads and unpickles a stage (and the tokenizer or
  classifier its functions hold) once per worker, not once per task; Ray may recycle or add task
  workers at will, and every new process pays the load again;
- the pool has exactly `size` processes with declared CPU/GPU/memory, so peak memory is known;
- when a worker dies we know its pid and node, and say so in the retry report.
`benchmarks/engine_groupby.py` measures both (per-task overhead and a warm-cache stage).

Retries stay in the executor: Ray's own task retries are off (`max_retries=0`, `max_restarts=0`), a dead
worker comes back as `Outcome(lost=True, detail=...)` naming the pid and node, and the actor is
replaced. A user exception is caught inside the worker and returned as a value, so it arrives as the
same `UserCodeError` (record preview, original traceback) as on the process backend.

A pool lives for one run (the cluster is shared: its CPUs go back the moment the run ends, unless
`ray_pool_idle_s` keeps it for the driver's next run), has one resource shape at a time (a stage asking
for GPUs or a custom resource gets actors of that shape), and hands shards only to actors Ray has placed
(a busy cluster, or a dead node's replacement with nowhere to go, never holds a shard). `ClusterWatch`
(ray_cluster.py) turns a dead local raylet into an error instead of an endless wait.

Scratch (shuffle runs, the pickled stages, results) must be a URL every worker and the driver can reach:
a local directory for a one-machine cluster, `gs://...` or `s3://...` (or a shared NFS mount) for a
cluster of several machines.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from zephyr.engine.backend_registry import RayOptions
from zephyr.engine.backends.api import Backend, ClusterError, Outcome, portable_error
from zephyr.engine.backends.ledger import LedgerActor, RayLedger, run_limit
from zephyr.engine.backends.ray_cluster import ClusterWatch, connect, missing_package
from zephyr.engine.resources import Resources, effective
from zephyr.engine.worker import ShardTask, run_task
from zephyr.fs.transfer_budget import run_ledger, set_run_ledger

__all__ = ["RayBackend", "connect"]

_MODES = ("actors", "tasks")


def _prepare_process(sys_path: list[str], cwd: str) -> None:
    """Let a Ray worker import what the driver imports (scripts, test modules) and resolve relative
    output paths like the driver does, when those paths exist on this machine."""
    for entry in sys_path:
        if entry not in sys.path and (entry == "" or os.path.isdir(entry)):
            sys.path.append(entry)
    if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)


def _run(task: ShardTask, ledger: tuple[Any, int | None] | None = None) -> tuple[str, Any]:
    client = _use_ledger(ledger)
    try:
        return "ok", run_task(task)
    except Exception as error:  # noqa: BLE001 - returned as a value: Ray would wrap it otherwise
        return "error", portable_error(error)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):  # the ledger's bytes were counted here either way
                client.flush()


def _use_ledger(ledger: tuple[Any, int | None] | None) -> RayLedger | None:
    """Charge this run's ledger actor from this worker process (one client per run, reused by its tasks)."""
    if ledger is None:
        set_run_ledger(None)
        return None
    handle, limit = ledger
    current = run_ledger()
    if isinstance(current, RayLedger) and current.handle == handle:
        return current
    client = RayLedger(handle, limit)
    set_run_ledger(client)
    return client


class ShardWorker:
    """A Ray actor that runs shard tasks one at a time, keeping the stage cache of its process warm."""

    def __init__(self, sys_path: list[str], cwd: str) -> None:
        _prepare_process(sys_path, cwd)

    def where(self) -> str:
        return _where()

    def run(self, task: ShardTask, ledger: tuple[Any, int | None] | None = None) -> tuple[str, Any]:
        return _run(task, ledger)


def _where() -> str:
    """This worker process and its node, as a retry report names them."""
    node = ray.get_runtime_context().get_node_id() or "?"
    return f"pid {os.getpid()} on {socket.gethostname()}, node {node[:12]}"


def _run_as_task(task: ShardTask, sys_path: list[str], cwd: str, ledger: Any = None) -> tuple[str, Any, str]:
    _prepare_process(sys_path, cwd)
    kind, value = _run(task, ledger)
    return kind, value, _where()


@dataclass
class _Actor:
    handle: Any
    where_ref: Any  # ObjectRef of ShardWorker.where(): resolved when we need to name a dead worker
    number: int
    task: ShardTask | None = None
    started: bool = False  # placed on a node and answering (or already dead: a task to it fails fast)

    def describe(self) -> str:
        try:
            where = ray.get(self.where_ref, timeout=0)
        except Exception:  # noqa: BLE001 - died before it started, or not started yet
            where = "pid unknown"
        return f"ray worker zephyr-worker-{self.number} ({where})"


class RayBackend(Backend):
    """The executor's backend on Ray: `capacity` shard tasks in flight, outcomes as they finish.

    The actor pool has one resource shape at a time (`prepare` switches it when a stage asks for GPUs,
    more memory or a custom resource): the previous shape's actors are killed first, so a stage never
    holds idle workers of another shape while it waits for its own.
    """

    def __init__(self, config: Any, *, mode: str = "actors") -> None:
        if mode not in _MODES:
            raise ValueError(f"unknown Ray backend mode {mode!r}: choose one of {', '.join(_MODES)}")
        options = config.options(RayOptions)
        connect(options.address, dashboard=options.dashboard)
        self.mode = mode
        self._config = config
        self.keep_warm_s: float | None = float(options.pool_idle_s)  # 0: give the CPUs back when the run ends
        self._check_scratch(config.scratch_url)
        self._sys_path = list(sys.path)
        # relative output paths resolve as in the driver on a one-machine cluster; on a remote cluster
        # they have no meaning (use absolute URLs), so workers keep Ray's working directory there
        self._cwd = "" if options.address else os.getcwd()
        self.reuse_key = self.reuse_key_for(config, mode=mode)
        self._running: dict[Any, _Actor | ShardTask] = {}  # ObjectRef -> actor (actors) or task (tasks)
        self._actors: list[_Actor] = []
        self._started = 0
        self._remote = ray.remote(_run_as_task)
        self._ledger: tuple[Any, int | None] | None = None  # this run's (LedgerActor handle, limit)
        self.shape: Resources | None = None
        self._watch = ClusterWatch()
        self._next_check = 0.0
        self._cluster_lost = False
        self.prepare(None)

    @classmethod
    def create(cls, config: Any) -> RayBackend:
        return cls(config, mode=config.options(RayOptions).mode)

    @classmethod
    def reuse_key_for(cls, config: Any, *, mode: str | None = None) -> tuple:
        """What must match for the next run to reuse this pool's actors (they hold the driver's sys.path)."""
        options = config.options(RayOptions)
        return (
            "ray",
            mode or options.mode,
            options.address,
            config.workers,
            config.memory_per_worker,
            config.worker_cpus,
            config.worker_gpus,
            tuple(sys.path),
            os.getcwd(),
        )

    def prepare(self, request: Resources | None) -> None:
        """Make the pool fit a stage asking for `request` (None: the run's defaults)."""
        shape = effective(request, self._config)
        if shape == self.shape:
            return
        if self._running:
            raise RuntimeError("prepare() called with shard tasks in flight: finish the stage first")
        self._kill_actors()
        self.shape = shape
        self.size = self._pool_size(shape, default=request is None)
        self._options: dict[str, Any] = {"num_cpus": shape.cpus, "num_gpus": shape.gpus, "memory": shape.memory}
        if shape.custom:
            self._options["resources"] = dict(shape.custom)
        if self.mode == "actors":
            self._actor_class = ray.remote(ShardWorker).options(
                max_restarts=0, max_concurrency=1, scheduling_strategy="SPREAD", **self._options
            )
            self._actors = [self._start_actor() for _ in range(self.size)]

    @property
    def capacity(self) -> int:
        """Shard tasks to keep in flight: the actors placed so far. An actor still waiting for CPUs (the
        cluster is busy with other jobs, or a node died and its replacement has nowhere to go) takes
        no shard, so no shard waits behind it while other workers are free."""
        if self.mode == "tasks":
            return self.size
        waiting = {actor.where_ref: actor for actor in self._actors if not actor.started}
        if waiting:
            ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            for ref in ready:
                waiting[ref].started = True
        return sum(actor.started for actor in self._actors)

    def healthy(self) -> bool:
        """Every actor idle and answering (a lost actor's replacement counts; a new Ray session does not)."""
        if not (
            self.mode == "actors" and ray.is_initialized() and not self._running and len(self._actors) == self.size
        ):
            return False
        try:
            ray.get([actor.handle.where.remote() for actor in self._actors], timeout=10)
        except Exception:  # noqa: BLE001 - dead, or from an earlier Ray session: build a new pool
            return False
        return True

    # ----------------------------------------------------------------------------------- sizing
    def _pool_size(self, shape: Resources, *, default: bool) -> int:
        """How many workers of `shape` the cluster holds now; `workers` caps it (and, for the default
        shape, sets it: an autoscaling cluster grows to it)."""
        workers = self._config.workers
        if workers is not None and default:
            return workers
        total = ray.cluster_resources()
        asked = {"CPU": shape.cpus, "GPU": shape.gpus, "memory": shape.memory, **dict(shape.custom)}
        wants: dict[str, float] = {name: amount for name, amount in asked.items() if amount}
        fits = {name: int(total.get(name, 0) // amount) for name, amount in wants.items()}
        size = min(fits.values()) if fits else (workers or int(total.get("CPU", 1)) or 1)
        if size < 1:
            short = ", ".join(
                f"{name} {_amount(name, wants[name])} (cluster has {_amount(name, total.get(name, 0))})"
                for name, fit in fits.items()
                if fit < 1
            )
            raise RuntimeError(
                f"the Ray cluster cannot hold one Zephyr worker asking for {shape.describe()}: short of {short}. "
                "Lower the stage's resources (or memory_per_worker), or add a node that has them."
            )
        return min(size, workers) if workers is not None else size

    @staticmethod
    def _check_scratch(scratch: str) -> None:
        """A local scratch path on a cluster of several nodes loses shuffle files between nodes: refuse it,
        unless the user says it is a shared mount (NFS) with ZEPHYR_SCRATCH_SHARED=1."""
        local = "://" not in scratch or scratch.startswith("file://")
        if not local or os.environ.get("ZEPHYR_SCRATCH_SHARED") == "1":
            return
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        if len(nodes) > 1:
            raise ClusterError(
                f"the scratch location {scratch!r} is a local path but the Ray cluster has {len(nodes)} nodes: "
                "shuffle files written on one node must be readable on every other node. Pass a bucket "
                "(--scratch gs://BUCKET/zephyr-scratch or s3://...), or set ZEPHYR_SCRATCH_SHARED=1 if "
                "the path is a mount every node shares (NFS)."
            )

    # -------------------------------------------------------------------------------- protocol
    def submit(self, task: ShardTask) -> None:
        options: dict[str, Any] = {"name": _task_name(task)}
        if self.mode == "tasks":
            options.update(self._options, max_retries=0, retry_exceptions=False)
            ref = self._remote.options(**options).remote(task, self._sys_path, self._cwd, self._ledger)
            self._running[ref] = task
            return
        actor = next((a for a in self._actors if a.task is None and a.started), None)
        if actor is None:
            raise RuntimeError("submit() called with every Ray worker busy: check capacity first")
        actor.task = task
        self._running[actor.handle.run.options(**options).remote(task, self._ledger)] = actor

    def wait(self, timeout: float) -> list[Outcome]:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + 0.5
            try:
                self._watch.check()
            except ClusterError:
                self._cluster_lost = True  # close() must not wait on a cluster that is gone
                raise
        if not self._running:
            waiting = [actor.where_ref for actor in self._actors if not actor.started]
            if waiting:  # nothing to collect until an actor is placed
                ray.wait(waiting, num_returns=1, timeout=timeout)
            return []
        refs = list(self._running)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:  # collect everything else that is done too
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return [self._outcome(ref) for ref in ready]

    def new_run(self, config: Any) -> None:
        """A run starts: one cross-region ledger for all its workers (an actor without CPUs, on the
        driver's node), the limit fixed from the driver's settings; the pool stays up after it as long
        as this run's `RayOptions.pool_idle_s` says (also for a reused pool)."""
        self.keep_warm_s = float(config.options(RayOptions).pool_idle_s)
        self.end_run()
        limit = run_limit()
        options: dict[str, Any] = {"num_cpus": 0}
        node = None
        with contextlib.suppress(Exception):  # Ray Client: no node of our own; Ray places it
            node = ray.get_runtime_context().get_node_id()
        if node:
            # the driver's node: it lives as long as the run does (a worker node may die mid-run)
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        handle = ray.remote(LedgerActor).options(**options).remote(limit)
        self._ledger = (handle, limit)
        set_run_ledger(RayLedger(handle, limit))

    def end_run(self) -> None:
        if self._ledger is not None and not self._cluster_lost and ray.is_initialized():
            client = run_ledger()
            if isinstance(client, RayLedger):
                with contextlib.suppress(Exception):
                    client.flush()
            with contextlib.suppress(Exception):
                ray.kill(self._ledger[0], no_restart=True)
        self._ledger = None

    def close(self) -> None:
        """Kill the actors: their CPUs, GPUs and memory go back to the cluster at once."""
        self.end_run()
        self._kill_actors()
        for ref in list(self._running):
            if self.mode == "tasks" and ray.is_initialized() and not self._cluster_lost:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
        self._running.clear()

    def _kill_actors(self) -> None:
        for actor in self._actors if ray.is_initialized() and not self._cluster_lost else ():
            # An actor of an earlier Ray session is already gone: nothing left to kill.
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
        self._actors = []

    # --------------------------------------------------------------------------------- helpers
    def _start_actor(self) -> _Actor:
        self._started += 1
        handle: Any = self._actor_class.remote(self._sys_path, self._cwd)
        return _Actor(handle, handle.where.remote(), self._started)

    def _outcome(self, ref: Any) -> Outcome:
        owner = self._running.pop(ref)
        task = owner if isinstance(owner, ShardTask) else owner.task
        assert task is not None  # an actor with a result in flight holds its task
        try:
            value = ray.get(ref)
        except ray.exceptions.RayError as error:
            if missing_package(error):
                self._raise_missing(owner, error)
            if not isinstance(error, ray.exceptions.RayTaskError):
                return Outcome(task, lost=True, detail=self._lost(owner, error))
            # raised outside our guarded call (e.g. the task arguments failed to unpickle)
            if isinstance(owner, _Actor):
                owner.task = None
            cause = getattr(error, "cause", None)
            return Outcome(task, error=cause if isinstance(cause, Exception) else error)
        if isinstance(owner, _Actor):
            owner.task = None
        kind, result = value[0], value[1]
        if kind == "ok":
            return Outcome(task, result=result)
        return Outcome(task, error=result)

    def _raise_missing(self, owner: _Actor | ShardTask, error: Exception) -> None:
        name = missing_package(error)
        where = owner.describe() if isinstance(owner, _Actor) else "a ray task worker"
        raise ClusterError(
            f"{where} cannot import {name!r} (ModuleNotFoundError): every node of the Ray cluster needs the "
            f"same Zephyr and the packages your pipeline imports. Install them on each node (or start the nodes "
            f"from an image that has them), then run again."
        )

    def _lost(self, owner: _Actor | ShardTask, error: Exception) -> str:
        reason = _reason(error)
        if not isinstance(owner, _Actor):
            return f"ray task worker died: {reason}"
        detail = f"{owner.describe()} died: {reason}{_node_state(owner)}"
        ray.kill(owner.handle, no_restart=True)
        self._actors[self._actors.index(owner)] = self._start_actor()
        return detail


def _node_state(actor: _Actor) -> str:
    """ "; node X is dead" when Ray already knows the actor's whole node is gone (raylet or machine)."""
    try:
        where = ray.get(actor.where_ref, timeout=0)
        node = where.rsplit("node ", 1)[1]
        for info in ray.nodes():
            if info["NodeID"].startswith(node) and not info.get("Alive"):
                return f"; its node {node} ({info.get('NodeManagerAddress')}) is dead"
    except Exception:  # noqa: BLE001 - unknown: say nothing more
        pass
    return ""


def _amount(name: str, value: float) -> str:
    return f"{int(value) >> 20} MiB" if name == "memory" else f"{value:g}"


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
