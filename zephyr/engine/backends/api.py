"""What a backend is: the `Backend` protocol the executor drives, the `Outcome` it reports per task,
and `portable_error`, which every backend applies to a task's exception before shipping it back.

Its own module so that `local` (in-process and process pools), `ray` and `pool` (`make_backend`) all
import it without importing each other. A backend class subclasses `Backend`, implements `submit`,
`wait`, `close` and `create`, and inherits no-op defaults for the rest; it is registered by name in
`zephyr.engine.backend_registry`. A backend whose workers outlive a run also implements `WorkerPool`.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import cloudpickle

from zephyr.engine.worker import ShardResult, ShardTask
from zephyr.errors import UserCodeError, ZephyrError

__all__ = ["Backend", "ClusterError", "Outcome", "WorkerPool", "portable_error"]


class ClusterError(ZephyrError):
    """The cluster cannot run the job: unreachable, gone, misconfigured (scratch, packages on a node).

    Not retried: every shard would fail the same way. The CLI prints it as one line.
    """


@dataclass
class Outcome:
    """What became of one submitted task: its result, the error it raised, or the loss of its worker."""

    task: ShardTask
    result: ShardResult | None = None
    error: BaseException | None = None
    lost: bool = False  # the worker died (infrastructure), as opposed to the task raising
    detail: str = ""
    worker_pid: int | None = None  # where the attempt ran, for retry reports and the run record
    worker_host: str | None = None


class Backend(Protocol):
    """Runs shard tasks and reports their outcomes; retries, fencing and checkpoints are the executor's.

    The executor asks a backend for nothing outside this protocol: a backend without a use for `prepare`,
    `new_run` or `live` keeps the defaults below (by subclassing `Backend`).
    """

    # records read so far by each running task, by (stage, shard), for the live view (heartbeats)
    live: Mapping[tuple[int, int], int] = MappingProxyType({})

    @property
    def capacity(self) -> int:
        """Tasks it can hold in flight at once (a stage's `prepare` may change it)."""
        ...

    @classmethod
    def create(cls, config: Any) -> Backend:
        """A new backend for a run with `config` (an `ExecutionConfig`)."""
        raise NotImplementedError

    @classmethod
    def reuse_key_for(cls, config: Any) -> tuple | None:
        """What must match for a run with `config` to reuse a warm pool of this class (None: never reused)."""
        return None

    def new_run(self, config: Any) -> None:
        """A run with `config` starts on this backend (a reused pool takes the run's settings here)."""
        return None

    def prepare(self, request: Any) -> None:
        """Fit the workers to a stage's resource request (`zephyr.engine.resources`, None: the defaults)
        before its tasks are submitted."""
        return None

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

    def end_run(self) -> None: ...  # the run ended: drop its per-run state (ledger, placement, ...)


def portable_error(error: Exception) -> Exception:
    """The error itself when it survives pickling, else a UserCodeError with its text and traceback."""
    try:
        cloudpickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001
        return UserCodeError(f"{type(error).__name__}: {error}", traceback_text=traceback.format_exc())
