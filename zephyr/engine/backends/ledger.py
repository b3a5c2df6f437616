"""The run-wide cross-region ledger: one budget for all workers of a run (zephyr.fs.transfer_budget).

- processes backend: two integers in shared memory (bytes so far, the run's limit), created with the
  pool and inherited by every worker; always exact.
- Ray: a small actor (no CPUs) per run; each worker process keeps a client that reports its bytes in
  batches of at most 1% of the budget (64 MB at most) or once a second, so a run may overshoot the
  budget by at most that much per worker, never more; a refusal is decided on the exact total.
The driver fixes the limit when the run starts, from its own ZEPHYR_CROSS_REGION_BUDGET /
ZEPHYR_ALLOW_CROSS_REGION (or `set_cross_region_budget`): one setting for the run, wherever it runs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from zephyr.fs.transfer_budget import cross_region_budget

__all__ = ["SharedLedger", "LedgerActor", "RayLedger", "run_limit"]

_UNLIMITED = -1
_log = logging.getLogger("zephyr.fs")


def run_limit() -> int | None:
    """The budget of a run starting now, as the driver is configured."""
    return cross_region_budget()


class SharedLedger:
    """A ledger in shared memory (multiprocessing Values of one pool)."""

    def __init__(self, used: Any, limit: Any) -> None:
        self._used = used
        self._limit = limit

    @property
    def limit(self) -> int | None:
        value = self._limit.value
        return None if value == _UNLIMITED else value

    def start_run(self, limit: int | None) -> None:
        with self._used.get_lock():
            self._used.value = 0
            self._limit.value = _UNLIMITED if limit is None else limit

    def estimate(self) -> int:
        return self._used.value

    exact = estimate

    def add(self, nbytes: int) -> None:
        with self._used.get_lock():
            self._used.value += nbytes

    def __getstate__(self) -> dict:
        raise TypeError("a SharedLedger is inherited by pool workers at start, never pickled")


class LedgerActor:
    """The Ray actor holding one run's total (declared with num_cpus=0: it takes no worker's place)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.total = 0

    def add(self, nbytes: int) -> tuple[int, int | None]:
        self.total += nbytes
        return self.total, self.limit

    def get(self) -> tuple[int, int | None]:
        return self.total, self.limit


class RayLedger:
    """A worker's (or the driver's) client of one run's LedgerActor, reporting in bounded batches."""

    def __init__(self, handle: Any, limit: int | None) -> None:
        self.handle = handle
        self.limit = limit
        self._known = 0  # the run's total at the last report
        self._pending = 0  # this process's bytes not yet reported
        self._reported_at = time.monotonic()
        self._lock = threading.Lock()
        self._lost = False
        self._batch = 64 << 20 if limit is None else max(1, min(64 << 20, limit // 100))

    def estimate(self) -> int:
        with self._lock:
            return self._known + self._pending

    def exact(self) -> int:
        self.flush()
        if self._lost:
            return self.estimate()
        import ray

        try:
            total, _ = ray.get(self.handle.get.remote(), timeout=30)
        except Exception as error:  # noqa: BLE001 - see _lose
            self._lose(error)
            return self.estimate()
        with self._lock:
            self._known = max(self._known, total)
            return self._known + self._pending

    def add(self, nbytes: int) -> None:
        with self._lock:
            self._pending += nbytes
            due = self._pending >= self._batch or time.monotonic() - self._reported_at > 1.0
        if due:
            self.flush()

    def flush(self) -> None:
        """Report this process's pending bytes (at the end of every shard task, and when a batch fills)."""
        import ray

        if self._lost:
            return
        with self._lock:
            pending, self._pending = self._pending, 0
            self._reported_at = time.monotonic()
        if pending:
            try:
                total, _ = ray.get(self.handle.add.remote(pending), timeout=30)
            except Exception as error:  # noqa: BLE001 - see _lose
                with self._lock:
                    self._pending += pending
                self._lose(error)
                return
            with self._lock:
                self._known = max(self._known, total)

    def _lose(self, error: BaseException) -> None:
        """The ledger actor is gone (its node died): keep enforcing the run's limit on what this process
        knows (the run's total at the last report plus its own bytes since), and say so once."""
        if not self._lost:
            self._lost = True
            _log.warning(
                "zephyr: the run's cross-region ledger is unreachable (%s: %s); this worker enforces the run's "
                "budget on the last known total plus its own reads",
                type(error).__name__,
                str(error).splitlines()[0][:200],
            )
