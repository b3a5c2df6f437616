"""Where shard tasks run: in this process (`local`) or in a pool of worker processes (`processes`).

A backend only runs tasks and reports outcomes; retries, fencing and checkpoints live in the executor.
The process pool is hand-rolled rather than `concurrent.futures`: when a worker dies, we must know
exactly which task it held (to retry that shard as an infrastructure loss) and replace only that worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cloudpickle

from zephyr.engine.backends.api import Backend, Outcome, portable_error
from zephyr.engine.backends.ledger import SharedLedger, run_limit
from zephyr.engine.worker import ShardTask, run_task
from zephyr.fs.transfer_budget import set_run_ledger

__all__ = ["LocalBackend", "ProcessBackend", "visible_gpus"]


class LocalBackend(Backend):
    """Runs each task in this process as it is submitted: for debugging (breakpoints, profilers)."""

    capacity = 1

    def __init__(self) -> None:
        self._done: deque[Outcome] = deque()

    @classmethod
    def create(cls, config: Any) -> LocalBackend:
        return cls()

    def submit(self, task: ShardTask) -> None:
        try:
            self._done.append(Outcome(task, result=run_task(task)))
        except Exception as error:  # noqa: BLE001 - reported to the executor, which decides
            self._done.append(Outcome(task, error=error, worker_pid=os.getpid(), worker_host=socket.gethostname()))

    def wait(self, timeout: float) -> list[Outcome]:
        done = list(self._done)
        self._done.clear()
        return done

    def close(self) -> None:
        pass


def _worker_main(
    conn: multiprocessing.connection.Connection, sys_path: list[str], used: Any = None, limit: Any = None
) -> None:
    sys.path[:] = sys_path
    if used is not None:  # the pool's run-wide cross-region ledger, in shared memory
        set_run_ledger(SharedLedger(used, limit))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the driver is gone
        task_sys_path, task_environ, task = cloudpickle.loads(payload)
        if task_sys_path != sys.path:  # a warm worker follows the driver's path (e.g. a new script's folder)
            sys.path[:] = task_sys_path
        if task_environ != os.environ:
            _follow_environ(task_environ)
        message: tuple[str, Any]
        heartbeat = _Heartbeat(conn)
        try:
            message = ("ok", run_task(task))
        except Exception as error:  # noqa: BLE001
            message = ("error", portable_error(error))
        heartbeat.stop()  # no progress message may follow the result
        try:
            conn.send_bytes(cloudpickle.dumps(message))
        except (BrokenPipeError, OSError):
            return


class _Heartbeat:
    """Sends ("progress", records read so far) to the driver every second while a task runs (live view)."""

    def __init__(self, conn: multiprocessing.connection.Connection, every_s: float = 1.0) -> None:
        from zephyr.engine.inputs import reset_live_counts

        reset_live_counts()
        self._conn, self._every_s = conn, every_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zephyr-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from zephyr.engine.inputs import records_read_so_far

        while not self._stopped.wait(self._every_s):
            try:
                self._conn.send_bytes(cloudpickle.dumps(("progress", records_read_so_far())))
            except Exception:  # noqa: BLE001 - progress is best effort; the result still goes out
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def _follow_environ(environ: dict[str, str]) -> None:
    """Make this worker's environment the driver's of the moment the task was sent.

    Workers are forked from the forkserver, which keeps the environment it started with, and a warm
    pool outlives runs: without this, credentials or an emulator host (``STORAGE_EMULATOR_HOST``) set
    after the first run would never reach the tasks.
    """
    for name in [name for name in os.environ if name not in environ]:
        del os.environ[name]
    os.environ.update(environ)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Start a worker without re-running the driver's `__main__` in it.

    multiprocessing re-imports the main script in every new process (to find functions by name). Tasks
    ship their functions by value (cloudpickle), so workers never need it, and re-running it would run
    a script's top-level pipeline again in each worker: a plain `python script.py` without an
    `if __name__ == "__main__":` guard would then fail with hundreds of lines of bootstrapping errors.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    missing = object()
    saved_file, saved_spec = main.__dict__.get("__file__", missing), main.__dict__.get("__spec__", missing)
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        if saved_file is not missing:
            main.__dict__["__file__"] = saved_file
        if saved_spec is missing:
            main.__dict__.pop("__spec__", None)
        else:
            main.__dict__["__spec__"] = saved_spec


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection
    task: ShardTask | None = None


class ProcessBackend(Backend):
    """A pool of `workers` processes (forkserver), one task each at a time."""

    capacity: int = 0  # set per stage by `prepare`

    def __init__(self, workers: int) -> None:
        self.capacity = workers
        self.workers = workers
        self.reuse_key: tuple = ("processes", workers)
        self.keep_warm_s: float | None = None  # a machine's own pool stays up until the next run or exit
        self._devices: list[list[str]] = []  # per worker slot: the GPU ids it sees (a GPU stage)
        self.live: dict[tuple[int, int], int] = {}  # (stage, shard) of a running task -> records read so far
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["zephyr.engine.worker"])
        self._ledger_values = (self._ctx.Value("q", 0), self._ctx.Value("q", -1))
        self.ledger = SharedLedger(*self._ledger_values)
        self._workers = [self._start() for _ in range(workers)]

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=_worker_main, args=(child, list(sys.path), *self._ledger_values), daemon=True
        )
        with _main_not_reimported():
            process.start()
        child.close()
        return _Worker(process, parent)

    @classmethod
    def create(cls, config: Any) -> ProcessBackend:
        return cls(config.num_workers)

    @classmethod
    def reuse_key_for(cls, config: Any) -> tuple:
        """What must match for the next run to reuse this pool (see `make_backend`)."""
        return ("processes", config.num_workers)

    def new_run(self, config: Any) -> None:
        """A run starts: its cross-region budget (the driver's setting) is shared by every worker and
        by this process, from zero."""
        self.ledger.start_run(run_limit())
        set_run_ledger(self.ledger)

    def end_run(self) -> None:
        """Nothing of a run outlives it in the pool: the ledger restarts at the next `new_run`."""

    def prepare(self, request: Any) -> None:
        """Fit a stage's resource request (zephyr.engine.resources.Resources or None) on one machine.

        CPUs: `workers // cpus` tasks at a time. GPUs: one task per device (each sees only its own through
        CUDA_VISIBLE_DEVICES); with no device visible, one task at a time on the CPU. Memory and custom
        resources mean nothing here: a warning says so, and the stage runs as if they were not asked for.
        """
        self.capacity, self._devices = self.workers, []
        if request is None:
            return
        if request.cpus and request.cpus > 1:
            self.capacity = max(1, int(self.workers // request.cpus))
        if request.gpus:
            devices = visible_gpus()
            per_task = max(1, int(request.gpus)) if request.gpus >= 1 else 1
            slots = len(devices) // per_task if request.gpus >= 1 else int(len(devices) / request.gpus)
            if slots < 1:
                warnings.warn(
                    f"a stage asks for {request.gpus:g} GPU(s) per task but this machine shows "
                    f"{len(devices)} (CUDA_VISIBLE_DEVICES / nvidia-smi): the processes backend runs it "
                    "one task at a time without a GPU",
                    stacklevel=2,
                )
                self.capacity = 1
            else:
                self.capacity = min(self.capacity, slots)
                self._devices = [
                    devices[i * per_task : (i + 1) * per_task] if request.gpus >= 1 else [devices[i % len(devices)]]
                    for i in range(self.capacity)
                ]
        ignored = [f"memory={request.memory >> 20} MiB"] if request.memory else []
        ignored += [f"{name}={amount:g}" for name, amount in request.custom]
        if ignored:
            warnings.warn(
                f"the processes backend ignores a stage's {', '.join(ignored)}: it runs {self.capacity} task(s) "
                "at a time on this machine whatever they ask (memory_per_worker still bounds the shuffle); "
                "these requests take effect on the ray backend",
                stacklevel=2,
            )

    def submit(self, task: ShardTask) -> None:
        index = next((i for i, w in enumerate(self._workers[: self.capacity]) if w.task is None), None)
        if index is None:
            raise RuntimeError("submit() called with every worker busy: check capacity first")
        worker = self._workers[index]
        worker.task = task
        environ = dict(os.environ)
        if self._devices:
            environ["CUDA_VISIBLE_DEVICES"] = ",".join(self._devices[index])
        worker.conn.send_bytes(cloudpickle.dumps((list(sys.path), environ, task)))

    def wait(self, timeout: float) -> list[Outcome]:
        busy = [w for w in self._workers if w.task is not None]
        if not busy:
            return []
        waitables = [w.conn for w in busy] + [w.process.sentinel for w in busy]
        ready = set(multiprocessing.connection.wait(waitables, timeout))
        outcomes = []
        for index, worker in enumerate(self._workers):
            if worker.task is None or (worker.conn not in ready and worker.process.sentinel not in ready):
                continue
            task = worker.task
            try:
                kind, value = cloudpickle.loads(worker.conn.recv_bytes())
                if kind == "progress":  # a heartbeat of a running task: records read so far
                    self.live[(task.stage_index, task.shard)] = int(value)
                    continue
            except (EOFError, OSError):
                self.live.pop((task.stage_index, task.shard), None)
                code = worker.process.exitcode
                worker.process.join(timeout=1)
                code = worker.process.exitcode if code is None else code
                detail = f"worker pid {worker.process.pid} died (exit code {code}{_signal_name(code)})"
                outcomes.append(
                    Outcome(
                        task, lost=True, detail=detail, worker_pid=worker.process.pid, worker_host=socket.gethostname()
                    )
                )
                worker.conn.close()
                self._workers[index] = self._start()
                continue
            worker.task = None
            self.live.pop((task.stage_index, task.shard), None)
            outcomes.append(
                Outcome(task, result=value)
                if kind == "ok"
                else Outcome(task, error=value, worker_pid=worker.process.pid, worker_host=socket.gethostname())
            )
        return outcomes

    def healthy(self) -> bool:
        """Every worker alive and idle."""
        return all(w.task is None and w.process.is_alive() for w in self._workers)

    def close(self) -> None:
        for worker in self._workers:
            worker.conn.close()
        for worker in self._workers:
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=2)


def visible_gpus() -> list[str]:
    """The GPU ids this process may use: CUDA_VISIBLE_DEVICES when set, else what `nvidia-smi -L` lists."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f", killed by {signal.Signals(-code).name}"
        except ValueError:
            return ""
    return ""
