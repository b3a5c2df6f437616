"""What a backend is: the `Backend` protocol the executor drives, the `Outcome` it reports per task,
and `portable_error`, which every backend applies to a task's exception before shipping it back.

Its own module so that `backends` (local and process pools, `make_backend`) and `ray_backend` both
import it without importing each other.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import cloudpickle

from zephyr.engine.errors import UserCodeError, ZephyrError
from zephyr.engine.worker import ShardResult, ShardTask

__all__ = ["Backend", "ClusterError", "Outcome", "WorkerPool", "portable_error"]


class ClusterError(ZephyrError):
    """The cluster cannot run the job: unreachable, gone, misconfigured (scratch, packages on a node).

    Not retried: every shard would fail the same way. The CLI prints it as one line.
    """


@dataclass
class Outcome:
    task: ShardTask
    result: ShardResult | None = None
    error: BaseException | None = None
    lost: bool = False  # the worker died (infrastructure), as opposed to the task raising
    detail: str = ""
    worker_pid: int | None = None  # where the attempt ran, for retry reports and the run record
    worker_host: str | None = None


class Backend(Protocol):
    @property
    def capacity(self) -> int: ...  # tasks it can hold in flight at once

    def submit(self, task: ShardTask) -> None: ...

    def wait(self, timeout: float) -> list[Outcome]: ...

    def close(self) -> None: ...


@runtime_checkable
class WorkerPool(Backend, Protocol):
    """A backend whose workers outlive one run (the process pool, the Ray actor pool): all that
    `make_backend` and `release_backend` use to reuse it for the next run or give it back."""

    reuse_key: tuple  # how the pool was built; a run that would build it the same way may reuse it
    keep_warm_s: float | None  # after a run: stay up this long (None: until the next run or exit; 0: close)

    def healthy(self) -> bool: ...  # every worker still alive and usable

    def new_run(self) -> None: ...  # a run starts on this pool

    def end_run(self) -> None: ...  # the run ended: drop its per-run state (ledger, placement, ...)


def portable_error(error: Exception) -> Exception:
    """The error itself when it survives pickling, else a UserCodeError with its text and traceback."""
    try:
        cloudpickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001
        return UserCodeError(f"{type(error).__name__}: {error}", traceback_text=traceback.format_exc())
