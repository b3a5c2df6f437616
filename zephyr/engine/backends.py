"""Where shard tasks run: in this process (`local`) or in a pool of worker processes (`processes`).

A backend only runs tasks and reports outcomes; retries, fencing and checkpoints live in the executor.
The process pool is hand-rolled rather than `concurrent.futures`: when a worker dies, we must know
exactly which task it held (to retry that shard as an infrastructure loss) and replace only that worker.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cloudpickle

from zephyr.engine.backend_api import Backend, Outcome, portable_error
from zephyr.engine.worker import ShardTask, run_task

__all__ = ["Outcome", "Backend", "LocalBackend", "ProcessBackend", "make_backend"]


class LocalBackend:
    """Runs each task in this process as it is submitted: for debugging (breakpoints, profilers)."""

    capacity = 1

    def __init__(self) -> None:
        self._done: deque[Outcome] = deque()

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


def _worker_main(conn: multiprocessing.connection.Connection, sys_path: list[str]) -> None:
    sys.path[:] = sys_path
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
        try:
            message = ("ok", run_task(task))
        except Exception as error:  # noqa: BLE001
            message = ("error", portable_error(error))
        try:
            conn.send_bytes(cloudpickle.dumps(message))
        except (BrokenPipeError, OSError):
            return


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


class ProcessBackend:
    """A pool of `workers` processes (forkserver), one task each at a time."""

    def __init__(self, workers: int) -> None:
        self.capacity = workers
        self.reuse_key = self.reuse_key_for(workers)
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["zephyr.engine.worker"])
        self._workers = [self._start() for _ in range(workers)]

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, args=(child, list(sys.path)), daemon=True)
        with _main_not_reimported():
            process.start()
        child.close()
        return _Worker(process, parent)

    def submit(self, task: ShardTask) -> None:
        worker = next((w for w in self._workers if w.task is None), None)
        if worker is None:
            raise RuntimeError("submit() called with every worker busy: check capacity first")
        worker.task = task
        worker.conn.send_bytes(cloudpickle.dumps((list(sys.path), dict(os.environ), task)))

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
            except (EOFError, OSError):
                code = worker.process.exitcode
                worker.process.join(timeout=1)
                code = worker.process.exitcode if code is None else code
                detail = f"worker pid {worker.process.pid} died (exit code {code}{_signal_name(code)})"
                outcomes.append(Outcome(task, lost=True, detail=detail, worker_pid=worker.process.pid,
                                        worker_host=socket.gethostname()))
                worker.conn.close()
                self._workers[index] = self._start()
                continue
            worker.task = None
            outcomes.append(
                Outcome(task, result=value) if kind == "ok"
                else Outcome(task, error=value, worker_pid=worker.process.pid, worker_host=socket.gethostname())
            )
        return outcomes

    @staticmethod
    def reuse_key_for(workers: int) -> tuple:
        """What must match for the next run to reuse this pool (see `make_backend`)."""
        return ("processes", workers)

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


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f", killed by {signal.Signals(-code).name}"
        except ValueError:
            return ""
    return ""


# One warm process pool per driver, reused by every run with the same worker count: starting workers
# costs about a second, which a recipe of many small steps would otherwise pay at every step.
_warm_pool: Any = None  # the last run's idle worker pool (processes or Ray actors), for the next run


def make_backend(config: Any) -> Backend:
    """The backend `config` asks for, reusing the last run's worker pool when it was built the same way."""
    global _warm_pool
    if config.backend == "local":
        return LocalBackend()
    if config.backend == "processes":
        key = ProcessBackend.reuse_key_for(config.num_workers)
    elif config.backend == "ray":
        try:
            from zephyr.engine.ray_backend import RayBackend
        except ImportError as error:
            raise ImportError(
                f"the ray backend needs Ray: pip install 'zephyr[ray]' ({error})"
            ) from error
        key = RayBackend.reuse_key_for(config)
    else:
        raise ValueError(f"unknown backend {config.backend!r}")
    pool, _warm_pool = _warm_pool, None
    if pool is not None and pool.reuse_key == key and pool.healthy():
        return pool
    if pool is not None:
        pool.close()
    return ProcessBackend(config.num_workers) if config.backend == "processes" else RayBackend(config)


def release_backend(backend: Backend, *, idle: bool) -> None:
    """Done with `backend`: keep an idle worker pool warm for the next run, close anything else.

    A pool with tasks still running (a run that failed) is closed: its late results must never reach
    another run.
    """
    global _warm_pool
    if idle and hasattr(backend, "reuse_key") and backend.healthy():
        if _warm_pool is not None and _warm_pool is not backend:
            _warm_pool.close()
        _warm_pool = backend
        return
    backend.close()


@atexit.register
def _close_warm_pool() -> None:
    if _warm_pool is not None:
        _warm_pool.close()

