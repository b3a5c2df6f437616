"""Errors Zephyr raises (engine, filesystems, configuration).

Each message names the file, shard and record where known. They live here, below every package,
so that `zephyr.fs` and `zephyr.config` raise the same types as the engine.
"""

from __future__ import annotations

import errno

__all__ = [
    "ZephyrError",
    "BadInputError",
    "UserCodeError",
    "PlanError",
    "StorageError",
    "RefusedError",
    "RemoteStorageError",
    "storage_error",
]


class ZephyrError(Exception):
    """Base class of every error Zephyr raises on purpose."""


class BadInputError(ZephyrError):
    """Input that cannot be read: a corrupt file, an invalid record, a glob that matches nothing."""


class PlanError(ZephyrError):
    """A pipeline that cannot be planned or executed as written."""


class StorageError(ZephyrError):
    """The machine's storage refused: permission denied, a read-only file system, a full disk or quota.

    Neither the data nor the user's code is at fault, and retrying the shard would fail the same way, so
    the engine does not retry it as a user error; the message names the path and the fix."""


class RemoteStorageError(StorageError):
    """A bucket's service cannot be reached (no network, a wrong endpoint) or no credentials for it were
    found: found out once per process before the first request (`zephyr.fs.region_guard`), so a run fails
    in seconds with one line naming the URL and the fix instead of a client's minute of retries. Like
    every `StorageError`, never retried as a user error."""


class RefusedError(ZephyrError):
    """Zephyr refused an operation that a configured limit forbids (a cross-region read over its transfer
    budget, `zephyr.fs.transfer_budget.CrossRegionBudgetExceeded`).

    Neither the data nor the user's code is at fault, and a retry would be refused the same way, so the
    engine never retries it and reports it as itself, in one line naming the limit and how to change it,
    even when it was raised inside a user function (a map that opens a far file)."""


# errno -> (what happened, the fix)
_STORAGE_ERRNOS = {
    errno.EACCES: ("permission denied", "give this user write/read access to it, or choose another location"),
    errno.EPERM: ("operation not permitted", "give this user access to it, or choose another location"),
    errno.EROFS: ("read-only file system", "write to a writable location (--output, --scratch)"),
    errno.ENOSPC: ("no space left on the device", "free space there or choose a location with room"),
    errno.EDQUOT: ("disk quota exceeded", "free space under the quota or choose another location"),
}


def storage_error(error: BaseException, where: str, path: str | None = None) -> StorageError | RefusedError | None:
    """The one place that tells the environment's failures from the user's: a `StorageError` naming
    `where` and the path when `error` (or an error it was raised from) is such an OSError, the
    `RefusedError` or `StorageError` itself when it is (or was raised from) one, else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RefusedError | StorageError):
            return current  # classified already, with the path where it was known
        if isinstance(current, OSError) and current.errno in _STORAGE_ERRNOS:
            what, fix = _STORAGE_ERRNOS[current.errno]
            named = current.filename or path or "(path not reported)"  # `path`: the file being written
            return StorageError(
                f"{where}: {what}: {named} ({current.strerror or current}). This is the machine's "
                f"storage, not the data or the code: {fix}; then rerun (finished shards are kept)."
            )
        current = current.__cause__ or current.__context__
    return None


class UserCodeError(ZephyrError):
    """A user function raised; carries the stage, shard, record and the original traceback."""

    def __init__(self, message: str, *, traceback_text: str = "") -> None:
        super().__init__(message)
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n\nOriginal traceback:\n{self.traceback_text}" if self.traceback_text else base

    def __reduce__(self):
        return (_rebuild_user_code_error, (self.args[0], self.traceback_text))


def _rebuild_user_code_error(message: str, traceback_text: str) -> UserCodeError:
    return UserCodeError(message, traceback_text=traceback_text)
