"""A per-process budget for bytes read across regions, so a misplaced job fails fast instead of billing.

Every cross-region read (guarded filesystems, the mirror's copies, and tools outside fsspec through
`zephyr.fs.region_guard.record_transfer`) calls `charge_cross_region`. Bytes add up in one
thread-safe counter per process; a read that would take the total past the budget raises
`CrossRegionBudgetExceeded`, naming the path, the bytes, the budget and the variable to change.

Configuration, read at every charge so a change applies at once:
  ``ZEPHYR_CROSS_REGION_BUDGET``  bytes allowed per process: ``10GB`` (default), ``500MiB``, ``0``
                                  (no cross-region reads at all) or ``unlimited``.
  ``ZEPHYR_ALLOW_CROSS_REGION=1`` lift the limit (bytes are still counted and logged).
In code: `set_cross_region_budget(nbytes)` and the `allow_cross_region()` context manager.

Without a run, the budget is per process. During an engine run on the processes or Ray backend the
budget is the run's: every worker charges one run-wide ledger (`set_run_ledger`; shared memory on the
processes backend, a Ray actor on Ray, see zephyr.engine.backends.ledger), whose limit the driver fixed from its
own settings when the run started, so 512 workers share one budget instead of having 512. A ledger may
be stale by what the other workers have not yet reported (each reports at least every 1% of the
budget); before refusing a read, a worker asks the ledger for the exact total.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from zephyr import counters
from zephyr.errors import RefusedError

__all__ = [
    "BUDGET_ENV",
    "ALLOW_ENV",
    "DEFAULT_BUDGET_BYTES",
    "CrossRegionBudgetExceeded",
    "charge_cross_region",
    "check_budget_left",
    "cross_region_bytes",
    "cross_region_budget",
    "set_cross_region_budget",
    "allow_cross_region",
    "reset_transfer_budget",
    "RunLedger",
    "set_run_ledger",
    "run_ledger",
    "parse_bytes",
    "format_bytes",
]

BUDGET_ENV = "ZEPHYR_CROSS_REGION_BUDGET"
ALLOW_ENV = "ZEPHYR_ALLOW_CROSS_REGION"
DEFAULT_BUDGET_BYTES = 10 * 10**9
COUNTER_NAME = "fs/cross_region_bytes"

_log = logging.getLogger("zephyr.fs")
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}  # fmt: skip
_UNLIMITED_WORDS = {"unlimited", "inf", "infinite", "none", "off"}

_lock = threading.Lock()
_used_bytes = 0
_programmatic_limit: int | None | str = "unset"  # "unset": fall back to the environment
_allow_depth = 0
_run_ledger: RunLedger | None = None


class RunLedger(Protocol):
    """Bytes read across regions by every process of one run, and the run's limit (None: unlimited)."""

    @property
    def limit(self) -> int | None:
        """The run's limit in bytes (None: unlimited)."""
        ...

    def estimate(self) -> int:
        """The run's total as this process knows it (may lag what other processes have not reported)."""
        ...

    def exact(self) -> int:
        """The run's total now (asks the ledger; used before refusing a read)."""
        ...

    def add(self, nbytes: int) -> None:
        """Count `nbytes` more (reported at once or soon after)."""
        ...


def set_run_ledger(ledger: RunLedger | None) -> None:
    """Charge `ledger` (one run's, shared by all its workers) instead of this process's own budget."""
    global _run_ledger
    with _lock:
        _run_ledger = ledger


def run_ledger() -> RunLedger | None:
    """The cross-region ledger of the run this process works for, or None outside a run (then the budget is this
    process's own)."""
    return _run_ledger


class CrossRegionBudgetExceeded(RefusedError):
    """A read from another region would take this process (or run) past its cross-region transfer budget.
    A refusal (`RefusedError`): never retried, reported as itself in one line."""


def parse_bytes(text: str) -> int | None:
    """``"10GB"`` -> 10_000_000_000, ``"512MiB"`` -> 536_870_912, ``"unlimited"`` -> None."""
    value = text.strip().lower().replace("_", "").replace(",", "")
    if value in _UNLIMITED_WORDS:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([a-z]*)", value)
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"{BUDGET_ENV} must be a byte count such as 10GB, 500MiB, 0 or unlimited; got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_bytes(nbytes: int | None) -> str:
    """``12_345_678_901`` -> ``"12.35 GB (12,345,678,901 bytes)"``."""
    if nbytes is None:
        return "unlimited"
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit} ({nbytes:,} bytes)"
    return f"{nbytes:,} bytes"


def cross_region_budget() -> int | None:
    """The limit in force now, in bytes (None: unlimited)."""
    if _allow_depth > 0 or os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes"):
        return None
    if _programmatic_limit != "unset":
        return _programmatic_limit  # type: ignore[return-value]
    raw = os.environ.get(BUDGET_ENV, "").strip()
    return parse_bytes(raw) if raw else DEFAULT_BUDGET_BYTES


def cross_region_bytes() -> int:
    """Bytes this process has read across regions so far."""
    with _lock:
        return _used_bytes


def set_cross_region_budget(nbytes: int | None) -> None:
    """Set this process's limit in code (None: unlimited); overrides ``ZEPHYR_CROSS_REGION_BUDGET``."""
    global _programmatic_limit
    with _lock:
        _programmatic_limit = nbytes


@contextlib.contextmanager
def allow_cross_region() -> Iterator[None]:
    """Lift the limit for this process while the block runs (bytes are still counted)."""
    global _allow_depth
    with _lock:
        _allow_depth += 1
    try:
        yield
    finally:
        with _lock:
            _allow_depth -= 1


def reset_transfer_budget() -> None:
    """Zero the counter and drop any limit set in code (tests; a long-lived process between jobs)."""
    global _used_bytes, _programmatic_limit, _allow_depth, _run_ledger
    with _lock:
        _used_bytes = 0
        _run_ledger = None
        _programmatic_limit = "unset"
        _allow_depth = 0


def check_budget_left(url: str, *, source: str, destination: str) -> None:
    """Raise before a transfer of unknown size when the budget is already spent."""
    ledger = _run_ledger
    if ledger is not None and _allow_depth == 0:
        if ledger.limit is not None and ledger.estimate() >= ledger.limit:
            used = ledger.exact()
            if used >= ledger.limit:
                raise CrossRegionBudgetExceeded(_message(url, 0, used, ledger.limit, source, destination, _RUN))
        return
    limit = cross_region_budget()
    with _lock:
        used = _used_bytes
    if limit is not None and used >= limit:
        raise CrossRegionBudgetExceeded(_message(url, 0, used, limit, source, destination))


def charge_cross_region(url: str, nbytes: int, *, source: str, destination: str, transferred: bool = False) -> int:
    """Add `nbytes` read from `url` (stored at `source`, read into `destination`) to the budget.

    `transferred=False` (the default) means the bytes have not moved yet: a charge past the budget
    raises and is not recorded, so nothing is paid. `transferred=True` (streaming reads, where the
    bytes already arrived) records them even when it raises. Returns the new total.
    """
    global _used_bytes
    if nbytes < 0:
        raise ValueError(f"cannot charge a negative byte count ({nbytes}) for {url}")
    ledger = _run_ledger
    if ledger is not None and _allow_depth == 0:
        return _charge_run(ledger, url, nbytes, source=source, destination=destination, transferred=transferred)
    limit = cross_region_budget()
    with _lock:
        new_total = _used_bytes + nbytes
        over = limit is not None and new_total > limit
        if transferred or not over:
            _used_bytes = new_total
            counters.increment(COUNTER_NAME, nbytes)
        used_before = new_total - nbytes
    if over:
        raise CrossRegionBudgetExceeded(_message(url, nbytes, used_before, limit, source, destination))
    if limit is None and nbytes:
        _log.info(
            "zephyr: read %s across regions from %s (%s -> %s), no limit",
            format_bytes(nbytes),
            url,
            source,
            destination,
        )
    return new_total


def _charge_run(ledger: RunLedger, url: str, nbytes: int, *, source: str, destination: str, transferred: bool) -> int:
    """`charge_cross_region` against the run's ledger; returns the run's total as known here."""
    global _used_bytes
    limit = ledger.limit
    used = ledger.estimate()
    over = limit is not None and used + nbytes > limit
    if over:
        used = ledger.exact()  # refuse only on the exact figure
        over = used + nbytes > limit
    if transferred or not over:
        ledger.add(nbytes)
        with _lock:
            _used_bytes += nbytes
        counters.increment(COUNTER_NAME, nbytes)
    if over:
        raise CrossRegionBudgetExceeded(_message(url, nbytes, used, limit, source, destination, _RUN))
    return used + nbytes


@dataclass(frozen=True)
class _Scope:
    """Whose budget a refusal speaks of, in its own words: the run's (all its workers) or this process's."""

    transfer: str  # whose transfer a read would bring over
    budget: str  # whose budget it would exceed
    spent: str  # whose budget is spent
    machine: str  # the machine reading
    read: str  # what was read so far ({} gets the bytes)
    raise_: str  # what to raise
    where: str  # where the setting goes


_RUN = _Scope(
    "this run's cross-region transfer (all workers together)",
    "the run's budget",
    "this run's cross-region budget (all workers together)",
    "this worker's machine",
    "the run has read {} across regions so far",
    "raise the run's budget",
    "the driver, the command that starts the run.",
)
_PROCESS = _Scope(
    "this process's cross-region transfer",
    "its budget",
    "this process's cross-region budget",
    "this machine",
    "already read: {}",
    "raise the budget",
    "every worker.",
)


def _message(
    url: str, nbytes: int, used: int, limit: int, source: str, destination: str, scope: _Scope = _PROCESS
) -> str:
    """The refusal of a cross-region read: where the file is, where the reader is, what was read and the fix."""
    wanted = used + nbytes
    suggestion = max(2 * limit, wanted + 1)
    over = (
        f"reading {format_bytes(nbytes)} more would bring {scope.transfer} to {format_bytes(wanted)}, over "
        f"{scope.budget} of {format_bytes(limit)}"
        if nbytes
        else f"{scope.spent} of {format_bytes(limit)} is spent"
    )
    return (
        f"cross-region read refused: {url} is stored in {source!r} but {scope.machine} is in {destination!r}; "
        f"{over} ({scope.read.format(format_bytes(used))}). Cross-region reads are billed as egress. Fix: read from "
        f"a bucket in {destination!r} (e.g. through mirror://), or {scope.raise_} with "
        f"{BUDGET_ENV}={_round_up_gb(suggestion)} (or {ALLOW_ENV}=1 to lift it) in the environment of {scope.where}"
    )


def _round_up_gb(nbytes: int) -> str:
    if nbytes < 10**9:
        return f"{-(-nbytes // 10**6)}MB"
    return f"{-(-nbytes // 10**9)}GB"
