"""Reduce tasks planned from the runs' sidecars: a skewed target split into key-hash ranges.

Part of the shuffle (see zephyr.engine.shuffle for how scatter and gather fit together)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from zephyr.engine.shuffle.runs import RunFile

__all__ = [
    "ReducePiece",
    "plan_pieces",
    "target_bytes",
]


def target_bytes(upstream_runs: Iterable[Iterable[RunFile]], num_targets: int) -> list[int]:
    """Bytes per target measured by the scatter sidecars (RunFile.segments) of all upstream stages: the
    reduce side schedules its largest targets first, so a skewed target starts at once instead of last."""
    sizes = [0] * num_targets
    for runs in upstream_runs:
        for run in runs:
            for target, segment in run.segments.items():
                if target < num_targets:
                    sizes[target] += segment[3]
    return sizes


@dataclass(frozen=True)
class ReducePiece:
    """What one reduce task gathers: the rows of `target` whose key hash is in [lo, hi). A key's rows all
    share one key hash, so a piece holds whole groups, and the pieces of a target in khash order give
    the target's groups in the order one task would have."""

    target: int
    lo: int = 0
    hi: int = 1 << 64

    @property
    def khash_range(self) -> tuple[int, int] | None:
        return None if (self.lo, self.hi) == (0, 1 << 64) else (self.lo, self.hi)


_SPLIT_MIN_BYTES = 64 << 20  # a target is split only above this
_MAX_PIECES = 64


def plan_pieces(sizes: list[int], workers: int) -> list[ReducePiece] | None:
    """Reduce tasks from the sidecars' bytes per target: a target of more than max(3/4 of total / workers,
    64 MB) bytes, a straggler in the making, is split into key-hash ranges of about that size (key hashes
    are uniform, so the ranges share its bytes evenly, except for a giant key, which lands whole in one
    piece). None when no target is that large: one task per target, as planned."""
    total = sum(sizes)
    if not sizes or not total:
        return None
    limit = max(3 * total // (4 * max(1, workers)), _SPLIT_MIN_BYTES)
    if max(sizes) <= limit:
        return None
    pieces = []
    for target, size in enumerate(sizes):
        k = max(1, min(_MAX_PIECES, -(-size // limit)))
        pieces += [ReducePiece(target, (i << 64) // k, ((i + 1) << 64) // k) for i in range(k)]
    return pieces
