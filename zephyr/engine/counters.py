"""User counters under the engine's name; defined in `zephyr.counters` (below the filesystem layer,
which counts mirror copies and cross-region bytes with them)."""

from zephyr.counters import increment, internal, is_internal, merge, reset, snapshot

__all__ = ["increment", "snapshot", "reset", "merge", "internal", "is_internal"]
