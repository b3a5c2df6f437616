"""Errors Zephyr raises (engine, filesystems, configuration).

Each message names the file, shard and record where known. They live here, below every package,
so that `zephyr.fs` and `zephyr.config` raise the same types as the engine.
"""

from __future__ import annotations

__all__ = ["ZephyrError", "BadInputError", "UserCodeError", "PlanError"]


class ZephyrError(Exception):
    """Base class of every error Zephyr raises on purpose."""


class BadInputError(ZephyrError):
    """Input that cannot be read: a corrupt file, an invalid record, a glob that matches nothing."""


class PlanError(ZephyrError):
    """A pipeline that cannot be planned or executed as written."""


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
