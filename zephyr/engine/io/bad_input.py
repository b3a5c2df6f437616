"""Bad input: the one place that raises `BadInputError` or counts a skipped record or file."""

from __future__ import annotations

import logging

from zephyr import counters
from zephyr.errors import BadInputError

logger = logging.getLogger(__name__)


SKIP_HINT = "pass on_bad_record='skip' to count and skip bad records"


def check_policy(on_bad_record: str) -> bool:
    """True when bad input is skipped and counted."""
    if on_bad_record not in ("raise", "skip"):
        raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {on_bad_record!r}")
    return on_bad_record == "skip"


def bad_record(url: str, skip: bool, line: int, reason: str, detail: str) -> None:
    """A line that is not a JSON object: raise naming the file, the line and the fix, or with `skip` count it as
    `bad_records/<reason>`."""
    counter = f"bad_records/{reason}"
    if not skip:
        raise BadInputError(
            f"{url}, line {line}: {detail}. Expected one JSON object per line (JSON Lines). "
            f"Fix or remove the line, or {SKIP_HINT} (counted as {counter})"
        )
    counters.increment(counter)


def bad_file(url: str, skip: bool, reason: str, detail: str, *, fix: str, kept: int) -> None:
    """A file that cannot be read to its end: raise naming it and the fix, or with `skip` count it as
    `bad_files/<reason>` (the records read before the damage are kept)."""
    counter = f"bad_files/{reason}"
    if not skip:
        raise BadInputError(
            f"{url}: {detail}. Fix: {fix}; or {SKIP_HINT}: the file then counts as {counter} and the "
            f"{kept} records read before the damage are kept"
        )
    logger.warning("skipping the rest of %s (%s: %s); kept %d records", url, counter, detail, kept)
    counters.increment(counter)


def short_error(exc: BaseException) -> str:
    """The first line of a library error (Vortex appends a Rust backtrace)."""
    text = str(exc).split("\nBacktrace:", 1)[0].strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ------------------------------------------------------------------------------------------------
