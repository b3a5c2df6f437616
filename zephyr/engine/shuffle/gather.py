"""Gather (reduce side): k-way merge of a target's runs (spilling when they do not fit), then the
group walk that hands keys and values to reducers.

Part of the shuffle (see zephyr.engine.shuffle for how scatter and gather fit together)."""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import pickle
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.engine import sortkey
from zephyr.engine.shuffle.runs import (
    BATCH_BYTES,
    BATCH_TYPES,
    IPC_OPTIONS,
    RUN_SCHEMA,
    SHUFFLE_POOL,
    RunFile,
    batch_edges,
    records_of,
    row_bytes,
    segment_batches,
    value_type,
)
from zephyr.engine.sortkey import UnorderableKeysError, decode, decode_key
from zephyr.fs import join, naming_the_file, url_to_fs

__all__ = ["as_records", "order_checked", "iter_group_batches", "iter_groups", "iter_values", "merged_blocks"]
_CHUNK_ROWS = 1024  # a gather walks groups over at least this many merged rows at once
_CHUNK_BYTES = 4 * BATCH_BYTES  # ... and at most about this many bytes


def merged_blocks(
    runs: list[RunFile],
    target: int,
    *,
    memory_budget: int,
    spill_dir: str,
    ordered: bool = True,
    khash_range: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """All rows of `target` across `runs` as record batches (columns of RUN_SCHEMA), in the order of
    (key hash, key, sort key); ties keep run order, then each run's own order. A group may span batches.

    With ordered=False (reshard) the runs are concatenated. Merges at most `fan_in` runs at once, where
    fan_in is what fits in `memory_budget`; more runs are first merged into intermediate runs on disk.
    `khash_range` (lo, hi) keeps only the rows whose key hash is in [lo, hi): a piece of a split target.
    """
    runs = [r for r in runs if target in r.segments]
    pa.default_memory_pool().release_unused()  # see SHUFFLE_POOL
    # columnar runs stay columnar when all share one value type (the common case: one input schema);
    # otherwise every value is pickled on load, so the merged blocks share one schema
    pickled = len({run.value_type for run in runs}) > 1
    if not ordered:
        for run in runs:
            yield from segment_batches(run, target, pickled, khash_range)
        return
    fan_in = max(2, memory_budget // (4 * BATCH_BYTES))
    level = 0
    while len(runs) > fan_in:
        merged_level: list[RunFile] = []
        for i in range(0, len(runs), fan_in):
            group = runs[i : i + fan_in]
            if len(group) == 1:
                merged_level.append(group[0])
                continue
            url = join(spill_dir, f"merge-{target}-{level}-{i // fan_in}-{uuid.uuid4().hex[:8]}.arrow")
            merged_level.append(_spill(_merge(group, target, pickled, khash_range), target, url))
        runs = merged_level
        level += 1
        khash_range = None  # the intermediate runs hold only rows of the range already
    yield from _merge(runs, target, pickled, khash_range)


_SORT_KEYS = [("khash", "ascending"), ("key", "ascending"), ("sort", "ascending")]


class _Cursor:
    """One run's rows of a target during a merge: its current batch and the first row not yet merged."""

    def __init__(
        self, run: RunFile, target: int, index: int, pickled: bool, khash_range: tuple[int, int] | None = None
    ) -> None:
        self.index = index
        self._batches = segment_batches(run, target, pickled, khash_range)
        self.batch: Any = None  # the current pa.RecordBatch; None once the run is exhausted
        self.pos = 0
        self.khash: list[int] = []  # the batch's key hashes (a list: bisect on it beats numpy per call)
        self.last: tuple[int, bytes, bytes] = (0, b"", b"")  # the batch's last (key hash, key, sort key)
        self.next_batch()

    def next_batch(self) -> bool:
        """Load the run's next batch; False when the run is exhausted."""
        for batch in self._batches:
            if batch.num_rows:
                n = batch.num_rows - 1
                self.batch, self.pos = batch, 0
                self.khash = batch.column(1).to_pylist()
                self.last = (self.khash[n], batch.column(2)[n].as_py(), batch.column(3)[n].as_py())
                return True
        self.batch = None
        return False

    def take_through(self, bound: tuple[int, bytes, bytes], inclusive: bool) -> pa.RecordBatch | None:
        """Consume the batch's rows below `bound` (and equal to it when `inclusive`); they are a prefix."""
        if self.khash[self.pos] > bound[0]:
            return None
        lo = bisect.bisect_left(self.khash, bound[0], self.pos)
        hi = bisect.bisect_right(self.khash, bound[0], lo)
        end = lo
        if hi > lo:  # rows with the bound's key hash: compare (key, sort key) themselves
            keys, sorts = self.batch.column(2), self.batch.column(3)
            search = bisect.bisect_right if inclusive else bisect.bisect_left
            end = lo + search(range(lo, hi), bound[1:], key=lambda i: (keys[i].as_py(), sorts[i].as_py()))
        if end <= self.pos:
            return None
        rows = self.batch.slice(self.pos, end - self.pos)
        self.pos = end
        return rows


def _merge(
    runs: list[RunFile], target: int, pickled: bool = False, khash_range: tuple[int, int] | None = None
) -> Iterator[pa.RecordBatch]:
    """k-way merge of sorted runs, a block of rows at a time, with one batch per run in memory.

    Rows order by (key hash, key, sort key, run index, row). Each round takes the smallest last row among
    the runs' current batches, (row, run) = B: every row not yet loaded is above B, so all loaded rows
    up to B can be emitted, sorted together in Arrow (a stable sort of the runs' prefixes concatenated in
    run order keeps the tie order). The run that holds B empties its batch, so each round makes progress.
    """
    cursors = [
        c for c in (_Cursor(run, target, i, pickled, khash_range) for i, run in enumerate(runs)) if c.batch is not None
    ]
    while len(cursors) > 1:
        lowest = min(cursors, key=lambda c: (c.last, c.index))
        taken = (c.take_through(lowest.last, inclusive=c.index <= lowest.index) for c in cursors)
        parts = [part for part in taken if part is not None]
        if len(parts) == 1:
            yield parts[0]
        else:
            block = pa.concat_batches(parts, memory_pool=SHUFFLE_POOL)
            yield pc.take(
                block, pc.sort_indices(block, sort_keys=_SORT_KEYS, memory_pool=SHUFFLE_POOL), memory_pool=SHUFFLE_POOL
            )
        cursors = [c for c in cursors if c.pos < c.batch.num_rows or c.next_batch()]
    for cursor in cursors:  # one run left: its rows are already in order
        yield cursor.batch.slice(cursor.pos)
        while cursor.next_batch():
            yield cursor.batch


def _spill(blocks: Iterator[pa.RecordBatch], target: int, url: str) -> RunFile:
    fs, path = url_to_fs(url)
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    batches = 0
    count = 0
    total = 0
    blocks = iter(blocks)
    first = next(blocks, None)
    schema = RUN_SCHEMA if first is None else first.schema  # a merge's blocks share one schema
    with (
        naming_the_file(url),
        fs.open(path, "wb") as sink,
        pa.ipc.new_file(sink, schema, options=IPC_OPTIONS) as writer,
    ):
        for block in itertools.chain([] if first is None else [first], blocks):
            sizes = row_bytes(block)
            edges = batch_edges(sizes)
            for lo, hi in zip(edges[:-1], edges[1:], strict=False):
                writer.write_batch(block.slice(lo, hi - lo))
                batches += 1
            count += block.num_rows
            total += int(sizes.sum())
    return RunFile(url, {target: (0, batches, count, total)}, value_type(schema))


class _Tally:
    """Records and bytes of the group being walked; a group over `giant_bytes` is reported in the task's
    counters when it ends (`shuffle/giant_keys`, and per key `shuffle/giant_key/<key>/records|bytes`):
    such a key cannot be split across reducers, so the run summary names it. Its rows still stream:
    only one chunk of merged rows is in memory at a time, whatever the group's size."""

    def __init__(self, giant_bytes: int | None) -> None:
        self.giant_bytes = giant_bytes
        self.key: bytes | None = None
        self.records = 0
        self.bytes = 0

    def add(self, key: bytes, records: int, size: int) -> None:
        if key != self.key:
            self.close()
            self.key, self.records, self.bytes = key, 0, 0
        self.records += records
        self.bytes += size

    def close(self) -> None:
        if self.key is not None and self.giant_bytes is not None and self.bytes > self.giant_bytes:
            from zephyr import counters

            name = repr(decode(self.key))
            name = name if len(name) <= 80 else name[:77] + "..."
            counters.increment("shuffle/giant_keys")
            counters.increment(f"shuffle/giant_key/{name}/records", self.records)
            counters.increment(f"shuffle/giant_key/{name}/bytes", self.bytes)
        self.key = None


def _tallied(rows: pa.RecordBatch, starts: np.ndarray, heads: list[bytes], tally: _Tally | None) -> None:
    if tally is None or tally.giant_bytes is None:
        return
    sizes = np.add.reduceat(row_bytes(rows), starts).tolist()
    counts = np.diff(np.append(starts, rows.num_rows)).tolist()
    for key, count, size in zip(heads, counts, sizes, strict=False):
        tally.add(key, count, size)


def _stretches(
    blocks: Iterable[pa.RecordBatch], tally: _Tally | None, check_order: bool
) -> Iterator[tuple[pa.Array, Iterator[tuple[bytes, bytes, int, int]]]]:
    """For each chunk of merged rows: its value column and (key, key hint, start, end) for each stretch
    of one group's rows in it; a group spanning chunks gives consecutive stretches with the same key.
    Sort keys are checked for an order Python has (`_OrderCheck`) unless `check_order` is False
    (`order_checked`: the runs hold one kind of scalar sort key)."""
    order = _OrderCheck() if check_order else None
    for rows in _chunks(blocks):
        keys = rows.column(2)
        starts = _group_starts(keys)
        if order is not None:
            order.check(rows, starts)
        heads = pc.take(keys, starts, memory_pool=SHUFFLE_POOL).to_pylist()
        hints = _head_hints(rows, starts)
        _tallied(rows, starts, heads, tally)
        bounds = starts.tolist()
        bounds.append(rows.num_rows)
        yield rows.column(4), zip(heads, hints, bounds, bounds[1:], strict=False)


def _pieces(
    blocks: Iterable[pa.RecordBatch], tally: _Tally | None = None, check_order: bool = True
) -> Iterator[tuple[bytes, bytes, list[Any], bool, bool]]:
    """(key, key hint, values, pickled, whole) for each stretch of one group's rows (`_stretches`). Values
    are pickled bytes (unpickled lazily by the caller) or, from columnar runs, the records themselves (one
    Arrow conversion a chunk). `whole`: the stretch is its group's last (any but a chunk's last stretch is:
    the next row of the chunk has another key), so the group is these values and nothing more."""
    for column, stretches in _stretches(blocks, tally, check_order):
        pickled = pa.types.is_large_binary(column.type)
        values = column.to_pylist() if pickled else records_of(column)
        last = len(column)
        for key, key_hint, start, end in stretches:
            yield key, key_hint, values[start:end], pickled, end < last


def _batch_pieces(
    blocks: Iterable[pa.RecordBatch], tally: _Tally | None = None, check_order: bool = True
) -> Iterator[tuple[bytes, bytes, pa.RecordBatch]]:
    """(key, key hint, records as one RecordBatch) for each stretch of one group's rows (`_stretches`)."""
    for column, stretches in _stretches(blocks, tally, check_order):
        for key, key_hint, start, end in stretches:
            yield key, key_hint, _records_batch(column.slice(start, end - start))


def _head_hints(rows: pa.RecordBatch, starts: np.ndarray) -> list[bytes]:
    """The key hints of the groups' first rows; no Arrow call when the chunk has none (ints, strs)."""
    column = rows.column(5)
    if _span(column) == 0:
        return [b""] * len(starts)
    return pc.take(column, starts, memory_pool=SHUFFLE_POOL).to_pylist()


def order_checked(runs: Iterable[RunFile]) -> bool:
    """Whether a gather over `runs` must check its sort keys for an order: not when every run recorded
    the kinds of its sort keys and together they are one kind of scalar (and None), as for a sort_by on
    a number or str field, or a join's side tags. Then the check costs nothing per merged chunk."""
    kinds: set[int] = set()
    for run in runs:
        if not run.sort_kinds:
            return True  # not recorded (an intermediate merge, an older checkpoint)
        kinds.update(run.sort_kinds)
    kinds.discard(sortkey.NONE)
    return len(kinds) > 1 or bool(kinds & {sortkey.TUPLE, sortkey.OTHER})


def _single_kind(kinds: np.ndarray) -> int | None:
    """The one kind of scalar among `kinds` besides None (NONE when all are None), or None when there are
    several kinds, tuples (compared element by element) or values of no order."""
    highest = int(kinds.max())
    if highest in (sortkey.TUPLE, sortkey.OTHER):
        return None
    if int(kinds.min()) == highest or not ((kinds != sortkey.NONE) & (kinds != highest)).any():
        return highest
    return None


class _OrderCheck:
    """Sort keys within a group (and all keys of a `Dataset.sort` target, one group) must be ones Python
    can order against each other, as `sorted` would require: where two neighbours in the merged order
    are of kinds it cannot compare (a number and a str; None meets anything), or one is of a type with
    no order at all, raise UnorderableKeysError naming both values and the record. Neighbours suffice:
    the encoding orders kinds apart, so mixed kinds in a group always meet somewhere.

    Cost: one vectorized pass over the sort keys' first bytes per chunk of merged rows, nothing when the
    shuffle has no sort keys; a Python comparison only for neighbouring tuples and kinds that differ."""

    def __init__(self) -> None:
        self.last: tuple[bytes, bytes, int] | None = None  # the previous chunk's last (key, sort key, kind)

    def check(self, rows: pa.RecordBatch, starts: np.ndarray) -> None:
        sorts = rows.column(3)
        if _span(sorts) == 0:  # no sort keys (a group_by without sort_by): nothing to order
            self.last = None
            return
        keys = rows.column(2)
        kinds = sortkey.kinds(sorts)
        n = len(kinds) - 1
        single = _single_kind(kinds)
        continues = (
            self.last is not None and self.last[2] not in (sortkey.NONE, single) and keys[0].as_py() == self.last[0]
        )
        if single is not None and not continues:  # one kind of scalar (and None): nothing to compare
            self.last = (keys[n].as_py(), sorts[n].as_py(), int(kinds[n]))
            return
        other = np.flatnonzero(kinds == sortkey.OTHER)
        if len(other):
            i = int(other[0])
            value = decode(sorts[i].as_py())
            raise UnorderableKeysError(
                f"a sort key of type {type(value).__name__} has no order (it was compared by its pickle): "
                f"{sortkey.describe_kind(value)}, {self._where(rows, i)}. Sort keys must be None, numbers, "
                "str, bytes, dates/datetimes/times/timedeltas or tuples of them: return one of those "
                "(e.g. str(value), or a number)"
            )
        same = np.ones(len(kinds), bool)
        same[starts] = False
        previous = np.empty_like(kinds)
        previous[1:] = kinds[:-1]
        if self.last is not None and keys[0].as_py() == self.last[0]:
            same[0], previous[0] = True, self.last[2]
        mixed = same & (kinds != previous) & (kinds != sortkey.NONE) & (previous != sortkey.NONE)
        tuples = same & (kinds == sortkey.TUPLE) & (previous == sortkey.TUPLE)
        for i in np.flatnonzero(mixed | tuples).tolist():
            before = sorts[i - 1].as_py() if i else self.last[1]  # type: ignore[index]
            pair = sortkey.unorderable(before, sorts[i].as_py())
            if pair is not None:
                a, b = pair
                raise UnorderableKeysError(
                    f"sort keys Python cannot order against each other: {sortkey.describe_kind(a)} and "
                    f"{sortkey.describe_kind(b)} ('<' between {type(a).__name__} and {type(b).__name__} raises "
                    f"TypeError), {self._where(rows, i)}. Make the sort key one kind for every record, e.g. "
                    "str(value) or float(value), or None for a missing value (None sorts first)"
                )
        self.last = (keys[n].as_py(), sorts[n].as_py(), int(kinds[n]))

    @staticmethod
    def _where(rows: pa.RecordBatch, i: int) -> str:
        from zephyr.engine.ops import preview

        value = rows.column(4)[i].as_py()
        record = pickle.loads(value) if isinstance(value, bytes) else value
        return f"in the group of key {preview(decode(rows.column(2)[i].as_py()))}, at record {preview(record)}"


def _records_batch(values: pa.Array) -> pa.RecordBatch:
    if pa.types.is_struct(values.type):
        return pa.RecordBatch.from_struct_array(values)
    records = [pickle.loads(v) for v in values.to_pylist()]
    if not all(isinstance(r, dict) for r in records):
        bad = next(r for r in records if not isinstance(r, dict))
        raise TypeError(
            f"group_by(..., batch=True) hands the reducer Arrow batches, which needs dict records; got a "
            f"{type(bad).__name__}: {bad!r:.200}. Map records to dicts before the group_by, or drop batch=True"
        )
    return pa.RecordBatch.from_pylist(records)


def _chunks(blocks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The blocks again, small ones joined up to _CHUNK_ROWS rows and large ones cut to ~_CHUNK_BYTES: a
    group walk costs a few Arrow calls per chunk, and its values become Python bytes a chunk at a time."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for block in blocks:
        values = block.column(4)
        block_size = _span(block.column(2)) + (
            _span(values) if pa.types.is_large_binary(values.type) else values.nbytes
        )
        if pending and (size + block_size > _CHUNK_BYTES or rows >= _CHUNK_ROWS):
            yield _joined(pending)
            pending, rows, size = [], 0, 0
        if block_size > _CHUNK_BYTES:
            edges = batch_edges(row_bytes(block), _CHUNK_BYTES)
            yield from (block.slice(lo, hi - lo) for lo, hi in zip(edges[:-1], edges[1:], strict=False))
            continue
        pending.append(block)
        rows += block.num_rows
        size += block_size
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches, memory_pool=SHUFFLE_POOL)


def _span(column: pa.Array) -> int:
    """Bytes of data a large_binary array covers, from its first and last offsets."""
    if len(column) == 0:
        return 0
    offsets = np.frombuffer(column.buffers()[1], np.int64)
    return int(offsets[column.offset + len(column)] - offsets[column.offset])


def _group_starts(keys: pa.Array) -> np.ndarray:
    """Indices of the rows of a sorted block whose key differs from the row before; row 0 always does.
    Rows are sorted by (key hash, key), so equal keys are adjacent."""
    new = np.ones(len(keys), bool)
    if len(keys) > 1:
        differs = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1), memory_pool=SHUFFLE_POOL)
        new[1:] = differs.to_numpy(zero_copy_only=False)
    return np.flatnonzero(new)


def iter_groups(
    blocks: Iterable[pa.RecordBatch], *, giant_bytes: int | None = None, check_order: bool = True
) -> Iterator[tuple[Any, Iterator[Any]]]:
    """(key, values iterator) per distinct key of merged blocks; pickled values are unpickled lazily.
    A group of more than `giant_bytes` is reported in the counters (see _Tally). Sort keys that cannot
    be ordered raise UnorderableKeysError (`check_order=False`: the runs are known to hold none)."""
    tally = _Tally(giant_bytes)
    for _, pieces in itertools.groupby(_pieces(blocks, tally, check_order), key=operator.itemgetter(0)):
        key, key_hint, values, pickled, whole = next(pieces)
        if whole:  # nearly every group: its values as they are, no generator frame per record
            items: Iterator[Any] = map(pickle.loads, values) if pickled else iter(values)
        else:
            items = _unpickled(values, pickled, pieces)  # noqa: B031 - streamed once
        yield decode_key(key, key_hint), items
    tally.close()


def _unpickled(
    values: list[Any], pickled: bool, more: Iterator[tuple[bytes, bytes, list[Any], bool, bool]]
) -> Iterator[Any]:
    """A group that spans chunks: its values piece by piece, streamed (a giant group is never whole in
    memory)."""
    yield from map(pickle.loads, values) if pickled else values
    for _, _, piece, piece_pickled, _ in more:
        yield from map(pickle.loads, piece) if piece_pickled else piece


def iter_group_batches(
    blocks: Iterable[pa.RecordBatch], *, giant_bytes: int | None = None, check_order: bool = True
) -> Iterator[tuple[Any, Iterator[pa.RecordBatch]]]:
    """(key, record batches) per distinct key of merged blocks: the reducer form of
    `group_by(..., batch=True)`. A group's rows come in sort order as one or more RecordBatches (a group
    larger than a chunk of merged rows spans several), so a giant group still streams."""
    tally = _Tally(giant_bytes)
    for _, pieces in itertools.groupby(_batch_pieces(blocks, tally, check_order), key=operator.itemgetter(0)):
        key, key_hint, batch = next(pieces)
        yield decode_key(key, key_hint), itertools.chain([batch], (batch for _, _, batch in pieces))  # noqa: B031
    tally.close()


def iter_values(blocks: Iterable[pa.RecordBatch]) -> Iterator[Any]:
    """Every record of merged shuffle blocks, in block order, with no grouping: what a reshard or union reads
    (pickled values unpickled, columnar ones turned back into dicts)."""
    for rows in _chunks(blocks):
        column = rows.column(4)
        if pa.types.is_large_binary(column.type):
            yield from map(pickle.loads, column.to_pylist())
        else:
            yield from records_of(column)


def as_records(result: Any) -> Iterable[Any]:
    """A reducer's result as records: generators and iterators yield many, None none, else one."""
    if result is None:
        return ()
    if isinstance(result, BATCH_TYPES):  # a batch reducer's rows
        return records_of(result) if isinstance(result, pa.RecordBatch) else result.to_pylist()
    if hasattr(result, "__next__"):
        return result
    return (result,)
