"""User counters: `counters.increment("docs_dropped/too_short")` inside any user function.

Each task starts with empty counters; the worker ships its counters back with the task result and the
driver sums them, so the figures are exact whatever the backend (and retried attempts never count twice:
only the committed attempt's counters are kept).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

__all__ = ["increment", "snapshot", "reset", "merge", "internal", "is_internal"]

_current: Counter[str] = Counter()
_internal: set[str] = set()  # exact names, and prefixes ending in "/"


def internal(*names: str) -> None:
    """Declare counters that describe Zephyr's own mechanics rather than the user's data (a file rewritten
    to the folder's schema, a connected-components round that did not settle): the run record keeps them,
    the final summary shows them only with -v. A name ending in "/" covers every counter under it."""
    _internal.update(names)


def is_internal(name: str) -> bool:
    """Whether counter `name` was declared internal (itself, or a prefix ending in "/" above it)."""
    if name in _internal:
        return True
    parts = name.split("/")
    return any("/".join(parts[:i]) + "/" in _internal for i in range(1, len(parts)))


def increment(name: str, n: int = 1) -> None:
    """Add `n` to counter `name` for the task running in this process."""
    _current[name] += n


def snapshot() -> dict[str, int]:
    """The counters of the current task so far."""
    return dict(_current)


def reset() -> dict[str, int]:
    """Clear the current task's counters and return what they were."""
    global _current
    previous = dict(_current)
    _current = Counter()
    return previous


def merge(into: dict[str, int], other: Mapping[str, int]) -> dict[str, int]:
    """Sum `other` into `into` (in place) and return it."""
    for name, value in other.items():
        into[name] = into.get(name, 0) + value
    return into
