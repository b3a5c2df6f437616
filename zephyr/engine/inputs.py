"""Where a stage's records come from: one tagged type per kind of input, each opening one shard.

Sources (`FileInput`, `ListInput`, `IterableInput`) read shard i of their data; shuffle reads (`ShuffleRead`:
`GroupInput`, `JoinInput`, `ReshardInput`, `AggregateInput`) gather target i of the runs their upstream
stages scattered.
`open(task, result)` returns the shard's stream and counts what it reads into `result`. The planner
builds these; the worker only calls `open`, so it never needs to know which kind it holds, and the
executor reads only what every input says of itself: `upstream` (the stages it reads), `splittable` (a
large shuffle target may be split into key-hash ranges) and `locations` (the URLs it reads).
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import pickle
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa
import xxhash

from zephyr.engine import ops as O
from zephyr.engine.ops import callable_name, preview
from zephyr.engine.shuffle import (
    ReducePiece,
    RunFile,
    as_records,
    iter_group_batches,
    iter_groups,
    iter_values,
    merged_blocks,
    order_checked,
)
from zephyr.engine.shuffle.aggregate_runs import fold_partials, target_values
from zephyr.engine.shuffle.runs import records_of
from zephyr.engine.sortkey import UnorderableKeysError
from zephyr.engine.task import ShardResult, ShardTask
from zephyr.errors import UserCodeError
from zephyr.fs import join

__all__ = [
    "Input",
    "SourceShard",
    "FileInput",
    "ListInput",
    "IterableInput",
    "ShuffleRead",
    "GroupInput",
    "JoinInput",
    "ReshardInput",
    "AggregateInput",
    "StageInput",
]


@dataclass(frozen=True)
class SourceShard:
    """What one source shard reads: a file, a chunk of a list, or `shard_fn(index)`."""

    index: int
    name: str  # for messages: the file path, or "list[0:100]"
    path: str | None = None
    size: int = 0
    records: tuple[Any, ...] | None = None

    def __fingerprint__(self) -> Any:
        # list chunks by a digest of their records: a list of a million records stays a short key
        return [self.name, self.path, self.size, _records_digest(self.records)]


class Input(Protocol):
    """What the worker, the planner and the executor ask of a stage input; the defaults suit most inputs.
    Each input also has `upstream`, the stages whose shuffle output it reads (a field of shuffle reads, ()
    for sources)."""

    splittable: ClassVar[bool] = False  # a large shuffle target may be split into key-hash ranges (reduce tasks)

    @property
    def name(self) -> str: ...

    def describe(self) -> str: ...

    def shard_name(self, shard: int) -> str: ...

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]: ...

    @property
    def locations(self) -> tuple[str, ...]:
        """The URLs (patterns) it reads, as given (shuffle runs live in the run's scratch: none)."""
        return ()

    @property
    def pending(self) -> str | None:
        """In a dry run, who would write what it reads, not written yet (only a file source can wait)."""
        return None


# ------------------------------------------------------------------------------------------ sources
@dataclass(frozen=True)
class FileInput(Input):
    """One shard per file; with `batch_rows`, columnar files are read as Arrow batches of that many rows
    (for a following map_batches, or a scatter on fields), else as records."""

    source: O.FilesSource
    shards: tuple[SourceShard, ...]
    batch_rows: int | None = None
    pending: str | None = None  # dry run only: who would write the patterns not there yet (engine.run.pending)

    @property
    def upstream(self) -> tuple[int, ...]:
        return ()

    @property
    def locations(self) -> tuple[str, ...]:
        return self.source.patterns

    @property
    def name(self) -> str:
        source = self.source
        extra = f", filter={source.filter!r}" if source.filter is not None else ""
        cols = f", columns={list(source.columns)}" if source.columns is not None else ""
        first = "/".join(source.patterns[0].rstrip("/").split("/")[-2:])
        more = f", +{len(source.patterns) - 1} more" if len(source.patterns) > 1 else ""
        return f"read({first}{more}{cols}{extra})"

    def describe(self) -> str:
        if self.pending is not None:
            listed = f"{len(self.shards)} source shard(s) and " if self.shards else ""
            return f"{listed}the output of {self.pending}, not written yet (its shard count is known once it runs)"
        return f"{len(self.shards)} source shard(s)"

    def shard_name(self, shard: int) -> str:
        return self.shards[shard].name

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        from zephyr.engine.io import read_batches, read_records

        if self.pending is not None:  # a dry run's plan never runs; a real run never plans a pending input
            raise RuntimeError(f"{self.name} reads the output of {self.pending}, which was not written")

        shard, source = self.shards[task.shard], self.source
        result.bytes_in = shard.size
        assert shard.path is not None  # file shards always have a path
        policy = source.on_bad_record
        assert policy is not None  # plan._lower_source resolves None to the run's setting
        if self.batch_rows is not None:
            batches = read_batches(
                shard.path,
                format=source.format,
                columns=source.columns,
                filter=source.filter,
                batch_size=self.batch_rows,
                on_bad_record=policy,
            )
            return _counted_batches(batches, result)
        records = read_records(
            shard.path,
            format=source.format,
            columns=source.columns,
            filter=source.filter,
            on_bad_record=policy,
        )
        return _counted(records, result)


@dataclass(frozen=True)
class ListInput(Input):
    """In-memory records, one contiguous chunk per shard."""

    shards: tuple[SourceShard, ...]
    total: int  # records in all shards, for the stage's name

    @property
    def upstream(self) -> tuple[int, ...]:
        return ()

    @property
    def name(self) -> str:
        return f"from_list({self.total})"

    def describe(self) -> str:
        return f"{len(self.shards)} source shard(s)"

    def shard_name(self, shard: int) -> str:
        return self.shards[shard].name

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        return _counted(self.shards[task.shard].records or (), result)


@dataclass(frozen=True)
class IterableInput(Input):
    """`shard_fn(i)` yields shard i's records, inside the worker."""

    shard_fn: Callable[[int], Iterable[Any]]
    num_shards: int

    @property
    def upstream(self) -> tuple[int, ...]:
        return ()

    @property
    def name(self) -> str:
        return f"from_iterable({callable_name(self.shard_fn)})"

    def describe(self) -> str:
        return f"{self.num_shards} source shard(s)"

    def shard_name(self, shard: int) -> str:
        return f"{callable_name(self.shard_fn)}({shard})"

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        return _counted(self.shard_fn(task.shard), result)


# ------------------------------------------------------------------------------------ shuffle reads
@dataclass(frozen=True)
class ShuffleRead(Input):
    """What every shuffle read shares: the stages whose runs it reads; shard i is their target i."""

    upstream: tuple[int, ...]

    def describe(self) -> str:
        return f"shuffle of stage(s) {', '.join(map(str, self.upstream))}"

    def shard_name(self, shard: int) -> str:
        return f"shuffle target {shard}"


@dataclass(frozen=True)
class GroupInput(ShuffleRead):
    """Target i of a keyed shuffle, grouped by key: `reducer(key, items)`'s records, key after key."""

    splittable: ClassVar[bool] = True  # whole groups per key-hash range: a large target may be split

    reducer: Callable[[Any, Iterator[Any]], Any]
    batch: bool = False  # the reducer takes (key, iterator of pyarrow.RecordBatch): group_by(batch=True)

    @property
    def name(self) -> str:
        return f"group_by({callable_name(self.reducer)})"

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        walk = iter_group_batches if self.batch else iter_groups
        giant = task.memory_per_worker // 16  # groups above this are reported (key, records, bytes)
        check = order_checked(run for runs in task.upstream_runs for run in runs)
        return self._reduced(walk(_merged(task, result, ordered=True), giant_bytes=giant, check_order=check), task)

    def _reduced(self, groups: Iterator[tuple[Any, Iterator[Any]]], task: ShardTask) -> Iterator[Any]:
        reducer = self.reducer
        with _naming_stage(task):
            for key, items in groups:
                try:
                    yield from as_records(reducer(key, items))
                except UnorderableKeysError:
                    raise  # met while the reducer read its group: the shuffle's sort keys, not the reducer
                except Exception as error:  # noqa: BLE001
                    raise UserCodeError(
                        f"reducer {callable_name(reducer)} failed in stage {task.stage_index}, shard {task.shard}, "
                        f"for key {preview(key)}: {type(error).__name__}: {error}",
                        traceback_text=traceback.format_exc(),
                    ) from None


@dataclass(frozen=True)
class JoinInput(ShuffleRead):
    """Target i of two shuffles keyed alike (upstream: the left stage, tagged 0, and the right, 1): matching
    pairs, combined."""

    splittable: ClassVar[bool] = True

    how: str
    combine: Callable[[Any, Any], Any] | None

    @property
    def name(self) -> str:
        return "join"

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        with _naming_stage(task):
            yield from self._joined(task, result)

    def _joined(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        combine = self.combine or _merge_records
        check = order_checked(run for runs in task.upstream_runs for run in runs)
        for _, items in iter_groups(_merged(task, result, ordered=True), check_order=check):
            lefts: list[Any] = []
            matched = False
            for side, record in items:
                if side == 0:
                    lefts.append(record)
                    continue
                matched = True
                for left in lefts:
                    yield combine(left, record)
            if not matched and self.how == "left":
                for left in lefts:
                    yield combine(left, None) if self.combine else left


@dataclass(frozen=True)
class ReshardInput(ShuffleRead):
    """Target i of a round-robin shuffle: the records, in run order."""

    @property
    def name(self) -> str:
        return "reshard" if len(self.upstream) == 1 else f"union({len(self.upstream)} inputs)"

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        return iter_values(_merged(task, result, ordered=False))


@dataclass(frozen=True)
class AggregateInput(ShuffleRead):
    """Target i of an aggregate's shuffle: its partial rows folded per key (`shuffle.aggregate`)."""

    splittable: ClassVar[bool] = True  # whole keys per key-hash range

    aggregation: Any  # shuffle.aggregate.Aggregation
    # yield Arrow batches (set by the planner when the output takes them: a columnar sink), with records only
    # where the Python fold's values do not convert to Arrow exactly; else records throughout
    as_batches: bool = False

    @property
    def name(self) -> str:
        return f"aggregate({self.aggregation.key})"

    def open(self, task: ShardTask, result: ShardResult) -> Iterator[Any]:
        budget = task.memory_per_worker // 4  # partial rows waiting for a fold; the folded ones come on top
        runs = [run for stage_runs in task.upstream_runs for run in stage_runs]
        for target, khash_range in _key_ranges(task, runs, result, budget):
            values = _counted_batches(target_values(runs, target, khash_range), result)
            out = fold_partials(values, self.aggregation, budget)
            if self.as_batches:
                yield from out
            else:
                for item in out:
                    if isinstance(item, pa.RecordBatch):
                        yield from records_of(item)
                    else:
                        yield item


StageInput = FileInput | ListInput | IterableInput | GroupInput | JoinInput | ReshardInput | AggregateInput


# ------------------------------------------------------------------------------------------ helpers
def _merged(task: ShardTask, result: ShardResult, *, ordered: bool) -> Iterator[pa.RecordBatch]:
    """The rows of this task's targets (or pieces of one) across all upstream runs, merged by key when
    `ordered`, target after target."""
    runs = [run for stage_runs in task.upstream_runs for run in stage_runs]
    pieces = task.pieces or (ReducePiece(task.shard),)
    result.bytes_in = sum(_piece_bytes(runs, piece) for piece in pieces)

    def blocks() -> Iterator[pa.RecordBatch]:
        for piece in pieces:
            yield from merged_blocks(
                runs,
                piece.target,
                memory_budget=task.memory_per_worker // 2,
                spill_dir=join(task.out_dir, "spill"),
                ordered=ordered,
                khash_range=piece.khash_range,
            )

    return _counted_batches(blocks(), result)


@contextlib.contextmanager
def _naming_stage(task: ShardTask) -> Iterator[None]:
    """Sort keys that cannot be ordered, found while merging a shuffle: the error names the stage."""
    try:
        yield
    except UnorderableKeysError as error:
        where = f"stage {task.stage_index} ({task.stage_name}), shard {task.shard}"
        raise UnorderableKeysError(f"{where}: {error}") from None


def _merge_records(left: Any, right: Any) -> Any:
    if right is None:
        return left
    return {**left, **right}


_LIVE: list[_Counted] = []  # this worker's task's counted inputs, for live progress (read by its heartbeat)
_UNLIMITED = sys.maxsize


def records_read_so_far() -> int:
    """Records the current task has read so far (for the live view; read by a heartbeat thread)."""
    return sum(counted.read for counted in list(_LIVE))


def reset_live_counts() -> None:
    """A new task starts in this worker: forget the previous task's inputs."""
    _LIVE.clear()


def _counted(records: Iterable[Any], result: ShardResult) -> Iterator[Any]:
    return _Counted(records, result)


class _Counted:
    """The records, counted into `result.records_in` when the worker closes the stream (as many as were read).

    Counting happens in C, not in a Python generator, so it costs no frame switch per record: the records
    are zipped with `itertools.repeat(None, N)`, records first (so the repeat moves only for records
    read), and `operator.length_hint` of the repeat (what it has left) tells how many went through.
    """

    def __init__(self, records: Iterable[Any], result: ShardResult) -> None:
        self._records = records
        self._result: ShardResult | None = result
        self._ticks = itertools.repeat(None, _UNLIMITED)
        self._stream = map(operator.itemgetter(0), zip(records, self._ticks, strict=False))
        _LIVE.append(self)

    @property
    def read(self) -> int:
        """Records read so far (safe to ask from another thread)."""
        return _UNLIMITED - operator.length_hint(self._ticks)

    def __iter__(self) -> Iterator[Any]:
        return self._stream

    def __next__(self) -> Any:
        return next(self._stream)

    def close(self) -> None:
        if self._result is not None:
            self._result.records_in += self.read
            self._result = None  # counted once
        close = getattr(self._records, "close", None)
        if close is not None:
            close()


def _key_ranges(
    task: ShardTask, runs: list[RunFile], result: ShardResult, budget: int
) -> Iterator[tuple[int, tuple[int, int] | None]]:
    """The task's (target, key-hash range) pieces cut so that each holds about `budget` bytes at most: an
    aggregate folds a range in memory, one row per key, so a piece with more keys than fit is read once
    per range."""
    result.bytes_in = 0
    for piece in task.pieces or (ReducePiece(task.shard),):
        size = _piece_bytes(runs, piece)
        result.bytes_in += size
        k = max(1, -(-size // max(1, budget)))
        for i in range(k):
            lo = piece.lo + (piece.hi - piece.lo) * i // k
            hi = piece.lo + (piece.hi - piece.lo) * (i + 1) // k
            yield piece.target, (None if (lo, hi) == (0, 1 << 64) else (lo, hi))


def _piece_bytes(runs: list[RunFile], piece: ReducePiece) -> int:
    """A piece's share of its target's bytes in the runs' sidecars (key hashes are uniform)."""
    size = sum(run.segments[piece.target][3] for run in runs if piece.target in run.segments)
    return size * (piece.hi - piece.lo) >> 64


def _counted_batches(batches: Iterable[Any], result: ShardResult) -> Iterator[Any]:
    for batch in batches:
        result.records_in += len(batch)
        yield batch


def _records_digest(records: tuple[Any, ...] | None) -> str | None:
    if records is None:
        return None
    try:
        return xxhash.xxh3_64_hexdigest(pickle.dumps(records, protocol=5))
    except Exception:  # noqa: BLE001 - unpicklable records: fall back to their repr
        return xxhash.xxh3_64_hexdigest(repr(records).encode())
