"""The backend a run gets, and the warm worker pool kept between runs.

`make_backend` builds the backend a config names through the registry (`zephyr.engine.backend_registry`),
so the executor never names a backend; `release_backend` keeps an idle pool warm for the next run built
the same way. This holds for every backend that implements `WorkerPool` (processes, Ray actors), which is
why it lives beside them rather than in one of them.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from zephyr.engine.backend_registry import backend_spec
from zephyr.engine.backends.api import Backend, WorkerPool
from zephyr.fs.transfer_budget import set_run_ledger

__all__ = ["make_backend", "release_backend"]


# One warm worker pool per driver, reused by the next run built the same way: starting workers costs about
# a second, which a recipe of many small steps would otherwise pay at every step. A process pool stays
# until the next run or exit (it holds no shared resources); a Ray pool holds CPUs of a cluster that
# other jobs share, so it is closed when the run ends, or `ray_pool_idle_s` later (`keep_warm_s`).
_warm_pool: WorkerPool | None = None  # the last run's idle worker pool (processes or Ray actors), for the next run
_warm_timer: threading.Timer | None = None
_warm_lock = threading.Lock()


def make_backend(config: Any) -> Backend:
    """The backend `config` asks for (by its registered name), reusing the last run's worker pool when it
    was built the same way (`reuse_key_for`)."""
    global _warm_pool
    cls = backend_spec(config.backend).load()
    key = cls.reuse_key_for(config)
    with _warm_lock:
        _cancel_timer()
        warm, _warm_pool = _warm_pool, None
    backend: Backend
    if warm is not None and key is not None and warm.reuse_key == key and warm.healthy():
        backend = warm
    else:
        if warm is not None:
            warm.close()
        backend = cls.create(config)
    backend.new_run(config)
    return backend


def release_backend(backend: Backend, *, idle: bool) -> None:
    """Done with `backend`: keep an idle worker pool warm for the next run (for `keep_warm_s` seconds
    when it says so, 0: not at all), close anything else.

    A pool with tasks still running (a run that failed) is closed: its late results must never reach
    another run.
    """
    global _warm_pool, _warm_timer
    if isinstance(backend, WorkerPool):
        backend.end_run()
    set_run_ledger(None)  # this process's own budget again, until the next run
    if idle and isinstance(backend, WorkerPool) and backend.keep_warm_s != 0 and backend.healthy():
        keep = backend.keep_warm_s
        with _warm_lock:
            previous, _warm_pool = _warm_pool, backend
            _cancel_timer()
            if keep is not None:
                _warm_timer = threading.Timer(keep, _expire, args=(backend,))
                _warm_timer.daemon = True
                _warm_timer.start()
        if previous is not None and previous is not backend:
            previous.close()
        return
    backend.close()


def _cancel_timer() -> None:
    global _warm_timer
    if _warm_timer is not None:
        _warm_timer.cancel()
        _warm_timer = None


def _expire(backend: Backend) -> None:
    """The idle time is up: give the pool's resources back unless a new run took it meanwhile."""
    global _warm_pool
    with _warm_lock:
        if _warm_pool is not backend:
            return
        _warm_pool = None
    backend.close()


@atexit.register
def _close_warm_pool() -> None:
    with _warm_lock:
        _cancel_timer()
    if _warm_pool is not None:
        _warm_pool.close()
