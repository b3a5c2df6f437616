"""Reduce tasks planned from the runs' sidecars: a large target split into key-hash ranges, small ones packed.

Part of the shuffle (see zephyr.engine.shuffle for how scatter and gather fit together)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from zephyr.engine.shuffle.runs import RunFile

__all__ = ["ReducePiece", "plan_tasks", "target_bytes", "task_bytes"]


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
_PACK_MAX_BYTES = 256 << 20  # small targets are packed into tasks of at most about this many bytes
_PACK_PER_WORKER = 4  # ... and only when there are more targets than this many per worker


def plan_tasks(sizes: list[int], workers: int) -> list[tuple[ReducePiece, ...]] | None:
    """Reduce tasks from the sidecars' bytes per target; each task gathers its pieces one after another.

    Split: a target of more than max(3/4 of total / workers, 64 MB) bytes, a straggler in the making, is
    split into key-hash ranges of about that size (key hashes are uniform, so the ranges share its bytes
    evenly, except for a giant key, which lands whole in one piece).
    Pack: when there are more than 4 targets per worker, neighbouring targets are joined into one task
    while it holds at most min(total / (4 x workers), 256 MB): many small (or empty) targets cost a task
    and an output file each otherwise, and about 4 tasks per worker keep the load balanced.
    Tasks hold targets in order and a split target's pieces in key-hash order, so the tasks' outputs in
    task order are the targets' outputs in target order. None when that is one task per target."""
    total = sum(sizes)
    if not sizes:
        return None
    workers = max(1, workers)
    limit = max(3 * total // (4 * workers), _SPLIT_MIN_BYTES)
    goal = min(max(1, total // (_PACK_PER_WORKER * workers)), _PACK_MAX_BYTES)
    packs = len(sizes) > _PACK_PER_WORKER * workers
    tasks: list[tuple[ReducePiece, ...]] = []
    pack: list[ReducePiece] = []
    packed = 0
    for target, size in enumerate(sizes):
        if size > limit or not packs:
            if pack:
                tasks.append(tuple(pack))
                pack, packed = [], 0
            k = max(1, min(_MAX_PIECES, -(-size // limit)))
            tasks += [(ReducePiece(target, (i << 64) // k, ((i + 1) << 64) // k),) for i in range(k)]
            continue
        if pack and packed + size > goal:
            tasks.append(tuple(pack))
            pack, packed = [], 0
        pack.append(ReducePiece(target))
        packed += size
    if pack:
        tasks.append(tuple(pack))
    if len(tasks) == len(sizes):
        return None  # one task per target, as planned
    return tasks


def task_bytes(sizes: list[int], task: tuple[ReducePiece, ...]) -> int:
    """A task's expected input bytes: its targets' bytes, a split piece its share of its target's."""
    return sum(sizes[piece.target] * (piece.hi - piece.lo) >> 64 for piece in task)
