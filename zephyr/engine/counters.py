"""User counters under the engine's name; defined in `zephyr.counters` (below the filesystem layer,
which counts mirror copies and cross-region bytes with them)."""

from zephyr.counters import increment, merge, reset, snapshot

__all__ = ["increment", "snapshot", "reset", "merge"]
