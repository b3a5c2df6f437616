"""Streaming shuffle with bounded memory: scatter writes sorted run files, gather merges them.

Scatter (map side) buffers rows `(target, key hash, key, sort key, value)`, with key and sort key in
an order-preserving byte encoding (`sortkey.encode`) and the value pickled, and flushes the buffer when it
reaches its byte budget: the rows are sorted by (target, key hash, key, sort key) in Arrow (stable, so ties
keep input order), the optional combiner pre-aggregates each key, and the result is written as one Arrow
IPC run file whose record batches each hold a single target. The per-target batch ranges and byte counts
(the run's sidecar) travel back to the driver with the task result.

Gather (reduce side) for target t opens the batches of t in every run, one batch per run in memory, and
k-way merges them a block at a time in Arrow: each round emits every loaded row up to the smallest last row
of the runs' current batches, sorted together by a stable sort, so ties keep run order and then each run's
own order. Groups are found a chunk of merged rows at a time (one Arrow comparison of adjacent keys) and
their values unpickled lazily. When more runs exist than fit in its memory budget, it first merges groups
of runs into longer runs on disk (an external merge), so memory never depends on the input size.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from zephyr.engine.expr import Column
from zephyr.engine.sortkey import binary_array, decode, encode, encode_array
from zephyr.fs import join, url_to_fs

__all__ = [
    "ReducePiece",
    "RunFile",
    "ScatterWriter",
    "ShuffleSpec",
    "column_keyed",
    "iter_group_batches",
    "iter_groups",
    "iter_values",
    "merged_blocks",
    "plan_pieces",
    "scatters_batches",
    "target_bytes",
]

_SCHEMA = pa.schema(
    [
        ("target", pa.int32()),
        ("khash", pa.uint64()),
        ("key", pa.large_binary()),
        ("sort", pa.large_binary()),
        ("value", pa.large_binary()),
    ]
)
_ROW_OVERHEAD = 200  # Python object headers and list slots per buffered row, beyond the payload
_COLUMNAR_ROW_OVERHEAD = 16  # a columnar row's share of the sort indices and the sorted copy's offsets
_BATCH_BYTES = 256 << 10  # target payload per record batch in a run file
_CHUNK_ROWS = 1024  # a gather walks groups over at least this many merged rows at once
_CHUNK_BYTES = 4 * _BATCH_BYTES  # ... and at most about this many bytes
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)  # a run batch is small: threads cost more than they save
# Arrow memory of the gather comes from the system allocator: mimalloc (Arrow's default) keeps freed pages
# committed for a while, and the merge frees a block every round; in test_shuffle's memory test that
# raised a gather's peak RSS by ~50 MB. The system allocator hands them back, at no measured speed cost.
# What earlier tasks (a scatter) left in mimalloc's cache is released when a gather starts: the gather no
# longer reuses those pages, and keeping them occasionally added 20-30 MB to its peak.
_POOL = pa.system_memory_pool()
_BATCH_TYPES = (pa.RecordBatch, pa.Table)


@dataclass(frozen=True)
class ShuffleSpec:
    """How a stage routes its output into a shuffle.

    key None means round-robin (reshard): no sorting, gather concatenates in input order.
    """

    num_targets: int
    key: Callable[[Any], Any] | None = None
    sort_by: Callable[[Any], Any] | None = None
    combiner: Callable[[Any, Iterable[Any]], Any] | None = None
    tag: int | None = None  # join side: 0 left, 1 right; used as the sort key
    ranges: tuple[bytes, ...] | None = None  # range partitioning on the encoded sort key (Dataset.sort)


@dataclass(frozen=True)
class RunFile:
    """One sorted run: `segments[target] = (first_batch, end_batch, rows, bytes)`."""

    url: str
    segments: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    # "" when the value column holds pickled records; else the Arrow struct type (as text) of a columnar
    # run, whose value column holds the records' own fields (one run has one type)
    value_type: str = ""
    # per target, the key hash of the first row of each of its batches: a reducer given a key-hash range
    # of the target (a split of a large target) reads only the batches that overlap it
    khash_starts: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(seg[3] for seg in self.segments.values())


def _key_hash(key_bytes: bytes) -> int:
    return xxhash.xxh3_64_intdigest(key_bytes)


class ScatterWriter:
    """Routes records of one shard to `spec.num_targets` targets, writing sorted runs under `out_dir`."""

    def __init__(self, spec: ShuffleSpec, out_dir: str, *, shard: int, flush_bytes: int) -> None:
        self.spec = spec
        self.out_dir = out_dir
        self.shard = shard
        self.flush_bytes = flush_bytes
        self.runs: list[RunFile] = []
        self.records = 0
        self._reset()
        self._tag = b"" if spec.tag is None else encode(spec.tag)

    def add(self, record: Any) -> None:
        spec = self.spec
        value = pickle.dumps(record if spec.tag is None else (spec.tag, record), protocol=5)
        if spec.key is None:
            target, khash, key, sort = (self.shard + self.records) % spec.num_targets, 0, b"", b""
        else:
            key = encode(spec.key(record))
            khash = _key_hash(key)
            sort = self._tag if spec.sort_by is None else self._tag + encode(spec.sort_by(record))
            target = khash % spec.num_targets if spec.ranges is None else bisect.bisect_right(spec.ranges, sort)
        self._append(target, khash, key, sort, value)
        self.records += 1
        if self._buffered >= self.flush_bytes:
            self.flush()

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add an Arrow batch of records: the same rows `add` would write for `batch.to_pylist()`.

        For a keyed shuffle without combiner or join tag (`scatters_batches`) the records stay Arrow: the
        run's value column is the batch itself (a struct column), so nothing is pickled and the reducer's
        dicts come from one Arrow conversion per chunk. With field keys (`column_keyed`) the keys and sort
        keys are encoded and hashed column-wise too: no Python object per row on the map side at all.
        """
        if isinstance(batch, pa.Table):
            for part in batch.to_batches():
                self.add_batch(part)
            return
        if not scatters_batches(self.spec) or batch.num_columns == 0:
            for record in batch.to_pylist():
                self.add(record)
            return
        # slices of about 1/8 of the flush budget: a flush never overshoots it by much
        rows = max(1024, int(batch.num_rows * (self.flush_bytes / 8) / max(1, batch.nbytes)))
        for start in range(0, batch.num_rows, rows):
            self._add_columnar(batch.slice(start, rows))

    def _add_columnar(self, batch: pa.RecordBatch) -> None:
        spec = self.spec
        by_fields = isinstance(spec.key, Column) and (spec.sort_by is None or isinstance(spec.sort_by, Column))
        records = None if by_fields else batch.to_pylist()
        keys = _encoded(batch, spec.key, records)
        sorts = _empty_binary(batch.num_rows) if spec.sort_by is None else _encoded(batch, spec.sort_by, records)
        khashes = _hash_array(keys)
        targets = (khashes % np.uint64(spec.num_targets)).astype(np.int32)
        values = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
        part = pa.RecordBatch.from_arrays([pa.array(targets), pa.array(khashes), keys, sorts, values], names=_SCHEMA.names)
        if self._columnar and part.schema != self._columnar[0].schema:
            self.flush()  # a run holds one value type
        self._columnar.append(part)
        self._buffered += part.nbytes + _COLUMNAR_ROW_OVERHEAD * part.num_rows
        self.records += part.num_rows
        if self._buffered >= self.flush_bytes:
            self.flush()

    def _append(self, target: int, khash: int, key: bytes, sort: bytes, value: bytes) -> None:
        self._targets.append(target)
        self._khashes.append(khash)
        self._keys.append(key)
        self._sorts.append(sort)
        self._values.append(value)
        self._buffered += len(key) + len(sort) + len(value) + _ROW_OVERHEAD

    def _reset(self) -> None:
        self._targets: list[int] = []
        self._khashes: list[int] = []
        self._keys: list[bytes] = []
        self._sorts: list[bytes] = []
        self._values: list[bytes] = []
        self._columnar: list[pa.RecordBatch] = []
        self._buffered = 0

    def flush(self) -> None:
        if self._columnar:
            self._flush_columnar()
        if not self._targets:
            return
        table = pa.table(
            [
                pa.array(np.fromiter(self._targets, np.int32, len(self._targets))),
                pa.array(np.fromiter(self._khashes, np.uint64, len(self._khashes))),
                _binary_column(self._keys),
                _binary_column(self._sorts),
                _binary_column(self._values),
            ],
            schema=_SCHEMA,
        )
        self._reset()
        # Arrow's sort is stable: equal keys keep their input order. A reshard sorts by target only.
        names = ("target",) if self.spec.key is None else ("target", "khash", "key", "sort")
        order = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in names]).to_numpy()
        if self.spec.combiner is not None:
            table, order = self._combine(table.take(order)), None
        if table.num_rows:  # a combiner may emit nothing
            self.runs.append(_write_run(table, order, join(self.out_dir, f"run-{len(self.runs):05d}.arrow")))

    def _flush_columnar(self) -> None:
        table = pa.Table.from_batches(self._columnar).combine_chunks()
        self._reset()
        order = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in ("target", "khash", "key", "sort")])
        self.runs.append(_write_run(table, order.to_numpy(), join(self.out_dir, f"run-{len(self.runs):05d}.arrow")))

    def close(self) -> list[RunFile]:
        self.flush()
        return self.runs

    def _combine(self, table: pa.Table) -> pa.Table:
        spec = self.spec
        combiner = spec.combiner
        assert combiner is not None  # only a combining shuffle combines
        rows = zip(*(table.column(n).to_pylist() for n in ("target", "khash", "key", "sort", "value")))
        for (target, khash, key), group in itertools.groupby(rows, key=lambda r: r[:3]):
            combined = []
            for record in as_records(combiner(decode(key), (pickle.loads(r[4]) for r in group))):
                sort = self._tag if spec.sort_by is None else self._tag + encode(spec.sort_by(record))
                combined.append((sort, pickle.dumps(record, protocol=5)))
            combined.sort(key=lambda r: r[0])
            for sort, value in combined:
                self._append(target, khash, key, sort, value)
        out = pa.table(
            [
                pa.array(self._targets, pa.int32()),
                pa.array(self._khashes, pa.uint64()),
                _binary_column(self._keys),
                _binary_column(self._sorts),
                _binary_column(self._values),
            ],
            schema=_SCHEMA,
        )
        self._reset()
        return out


def scatters_batches(spec: ShuffleSpec) -> bool:
    """A keyed shuffle without combiner or join tag: Arrow batches are scattered whole, records stay Arrow
    (key functions still see each record as a dict, once, on the map side)."""
    return spec.key is not None and spec.combiner is None and spec.tag is None


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


def column_keyed(spec: ShuffleSpec) -> bool:
    """A group_by on fields (`col(...)` key and sort key, no combiner): batches can be scattered whole."""
    return (
        isinstance(spec.key, Column)
        and (spec.sort_by is None or isinstance(spec.sort_by, Column))
        and spec.combiner is None
        and spec.tag is None
        and spec.ranges is None
    )


def _field(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows)  # missing field -> None, as col() says
    column = batch.column(index)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


_binary_column = binary_array


def _encoded(batch: pa.RecordBatch, key: Any, records: list[Any] | None) -> pa.Array:
    """The encoded keys of a batch's rows: column-wise for a field, else `key(record)` per record."""
    if isinstance(key, Column):
        return encode_array(_field(batch, key.name))
    assert records is not None  # key functions get the batch's records
    return _encode_values([key(record) for record in records])


def _encode_values(values: list[Any]) -> pa.Array:
    """`encode` of each value; all-int or all-str values (the usual keys) are encoded column-wise."""
    kinds = set(map(type, values))
    if len(kinds) == 1 and (kinds <= {int, str}):
        try:
            return encode_array(pa.array(values, pa.int64() if int in kinds else pa.large_string()))
        except (pa.ArrowException, OverflowError, UnicodeError):
            pass  # an int beyond 64 bits, a lone surrogate: the generic encoding below
    return binary_array(list(map(encode, values)))


def _empty_binary(n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int64)), pa.py_buffer(b"")])


def _hash_array(keys: pa.Array) -> np.ndarray:
    """`_key_hash` of each encoded key, computed once per distinct key of the array."""
    encoded = pc.dictionary_encode(keys)
    distinct = encoded.dictionary.to_pylist()
    hashes = np.fromiter(map(_key_hash, distinct), np.uint64, len(distinct))
    return hashes[encoded.indices.to_numpy(zero_copy_only=False)]


def _write_run(table: pa.Table, order: np.ndarray | None, url: str) -> RunFile:
    """Write `table` in `order` (sorted by target) as batches that each hold one target and ~_BATCH_BYTES.

    Rows are taken batch by batch, so the sorted copy never exists whole in memory.
    """
    fs, path = url_to_fs(url)
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    if order is None:
        order = np.arange(table.num_rows)
    segments: dict[int, tuple[int, int, int, int]] = {}
    starts_of: dict[int, tuple[int, ...]] = {}
    khashes = table.column("khash").to_numpy()[order]
    targets = table.column("target").to_numpy()[order]
    sizes = _row_bytes(table)[order]
    bounds = np.flatnonzero(np.diff(targets)) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(targets)]]).astype(np.int64)
    with fs.open(path, "wb") as sink, pa.ipc.new_file(sink, table.schema, options=_IPC_OPTIONS) as writer:
        batch_index = 0
        for start, end in zip(starts.tolist(), ends.tolist()):
            edges = _batch_edges(sizes[start:end])
            first = batch_index
            starts_of[int(targets[start])] = tuple(khashes[start + np.array(edges[:-1], np.int64)].tolist())
            for lo, hi in zip(edges[:-1], edges[1:]):
                batch = table.take(pa.array(order[start + lo : start + hi])).combine_chunks()
                writer.write_batch(batch.to_batches()[0])
                batch_index += 1
            segments[int(targets[start])] = (first, batch_index, end - start, int(sizes[start:end].sum()))
    return RunFile(url, segments, _value_type(table.schema), starts_of)


def _value_type(schema: pa.Schema) -> str:
    kind = schema.field("value").type
    return "" if pa.types.is_large_binary(kind) else str(kind)


def _row_bytes(rows: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Per row, the bytes a run's sidecar counts: key plus value (pickled, or the record's Arrow fields)."""
    return _lengths(rows.column("key")) + _value_sizes(rows.column("value"))


def _value_sizes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row, the bytes of a value column: a pickled value's length, or a columnar record's fixed-width
    fields plus its strings' lengths (other nested fields: their share of the column's bytes)."""
    kind = column.type
    if pa.types.is_large_binary(kind):
        return _lengths(column)
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [_item_sizes(chunk) for chunk in chunks if len(chunk)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _item_sizes(array: pa.Array) -> np.ndarray:
    kind = array.type
    n = len(array)
    if pa.types.is_struct(kind):
        sizes = np.zeros(n, np.int64)
        for child in array.flatten():
            sizes += _item_sizes(child)
        return sizes
    if pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        return np.diff(np.frombuffer(array.buffers()[1], np.int64)[array.offset : array.offset + n + 1])
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        return np.diff(np.frombuffer(array.buffers()[1], np.int32)[array.offset : array.offset + n + 1]).astype(np.int64)
    try:
        return np.full(n, max(1, kind.bit_width // 8), np.int64)
    except ValueError:  # not fixed width
        return np.full(n, array.nbytes // max(1, n), np.int64)


def _lengths(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The byte length of each item of a large_binary column, read off its offsets (no compute call:
    a merge asks this of many small blocks)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [
        np.diff(np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset : chunk.offset + len(chunk) + 1])
        for chunk in chunks
        if len(chunk)
    ]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _batch_edges(sizes: np.ndarray, limit: int | None = None) -> list[int]:
    """Row offsets `[0, ..., len(sizes)]` that cut rows of these byte sizes into pieces of ~`limit` bytes
    (_BATCH_BYTES): a cut falls after the row where the running byte count crosses each multiple of it."""
    limit = limit or _BATCH_BYTES
    cumulative = np.cumsum(sizes)
    if len(sizes) == 0 or cumulative[-1] <= limit:
        return [0, len(sizes)] if len(sizes) else [0]
    cuts = np.searchsorted(cumulative, np.arange(limit, int(cumulative[-1]), limit), side="left") + 1
    return sorted({0, *cuts.tolist(), len(sizes)})


def _segment_batches(
    run: RunFile, target: int, pickled: bool = False, khash_range: tuple[int, int] | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of `target` in `run` (sorted within the run), one in memory at a time; with
    `pickled`, a columnar run's values are pickled (runs of different value types meet in one merge).
    With `khash_range` (lo, hi): only the rows whose key hash is in [lo, hi), reading only the batches
    that can hold some (the run's khash_starts)."""
    segment = run.segments.get(target)
    if segment is None:
        return
    first, end, _, _ = segment
    if khash_range is not None:
        lo, hi = khash_range
        starts = run.khash_starts.get(target)
        if starts is not None and len(starts) == end - first:
            # batch i holds key hashes in [starts[i], starts[i + 1]] (a key may straddle a boundary)
            begin = max(0, bisect.bisect_left(starts, lo) - 1)
            stop = bisect.bisect_left(starts, hi)
            first, end = first + begin, first + max(begin, stop)
    fs, path = url_to_fs(run.url)
    convert = pickled and run.value_type != ""
    with fs.open(path, "rb") as handle:
        reader = pa.ipc.open_file(handle, options=_IPC_READ, memory_pool=_POOL)
        for i in range(first, end):
            batch = reader.get_batch(i)
            if khash_range is not None:
                batch = _in_range(batch, khash_range)
                if not batch.num_rows:
                    continue
            yield _pickle_values(batch) if convert else batch


def _in_range(batch: pa.RecordBatch, khash_range: tuple[int, int]) -> pa.RecordBatch:
    """The rows of a batch sorted by key hash whose key hash lies in [lo, hi)."""
    khash = batch.column(1).to_numpy()
    lo, hi = khash_range
    begin = int(np.searchsorted(khash, np.uint64(lo), side="left"))
    stop = len(khash) if hi >= 1 << 64 else int(np.searchsorted(khash, np.uint64(hi), side="left"))
    return batch.slice(begin, max(0, stop - begin))


def _pickle_values(batch: pa.RecordBatch) -> pa.RecordBatch:
    values = binary_array([pickle.dumps(record, protocol=5) for record in batch.column(4).to_pylist()])
    return pa.RecordBatch.from_arrays([*batch.columns[:4], values], schema=_SCHEMA)


def merged_blocks(
    runs: list[RunFile], target: int, *, memory_budget: int, spill_dir: str, ordered: bool = True,
    khash_range: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """All rows of `target` across `runs` as record batches (columns of _SCHEMA), in the order of
    (key hash, key, sort key); ties keep run order, then each run's own order. A group may span batches.

    With ordered=False (reshard) the runs are concatenated. Merges at most `fan_in` runs at once, where
    fan_in is what fits in `memory_budget`; more runs are first merged into intermediate runs on disk.
    `khash_range` (lo, hi) keeps only the rows whose key hash is in [lo, hi): a piece of a split target.
    """
    runs = [r for r in runs if target in r.segments]
    pa.default_memory_pool().release_unused()  # see _POOL
    # columnar runs stay columnar when all share one value type (the common case: one input schema);
    # otherwise every value is pickled on load, so the merged blocks share one schema
    pickled = len({run.value_type for run in runs}) > 1
    if not ordered:
        for run in runs:
            yield from _segment_batches(run, target, pickled, khash_range)
        return
    fan_in = max(2, memory_budget // (4 * _BATCH_BYTES))
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
        self._batches = _segment_batches(run, target, pickled, khash_range)
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
            block = pa.concat_batches(parts, memory_pool=_POOL)
            yield pc.take(block, pc.sort_indices(block, sort_keys=_SORT_KEYS, memory_pool=_POOL), memory_pool=_POOL)
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
    schema = _SCHEMA if first is None else first.schema  # a merge's blocks share one schema
    with fs.open(path, "wb") as sink, pa.ipc.new_file(sink, schema, options=_IPC_OPTIONS) as writer:
        for block in itertools.chain([] if first is None else [first], blocks):
            sizes = _row_bytes(block)
            edges = _batch_edges(sizes)
            for lo, hi in zip(edges[:-1], edges[1:]):
                writer.write_batch(block.slice(lo, hi - lo))
                batches += 1
            count += block.num_rows
            total += int(sizes.sum())
    return RunFile(url, {target: (0, batches, count, total)}, _value_type(schema))


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
    sizes = np.add.reduceat(_row_bytes(rows), starts).tolist()
    counts = np.diff(np.append(starts, rows.num_rows)).tolist()
    for key, count, size in zip(heads, counts, sizes):
        tally.add(key, count, size)


def _pieces(blocks: Iterable[pa.RecordBatch], tally: _Tally | None = None) -> Iterator[tuple[bytes, list[Any], bool]]:
    """(key, values, pickled) for each stretch of one group's rows within a chunk of merged rows; a group
    spanning chunks gives consecutive pieces with the same key. Values are pickled bytes (unpickled
    lazily by the caller) or, from columnar runs, the records themselves (one Arrow conversion a chunk)."""
    for rows in _chunks(blocks):
        keys = rows.column(2)
        starts = _group_starts(keys)
        heads = pc.take(keys, starts, memory_pool=_POOL).to_pylist()
        _tallied(rows, starts, heads, tally)
        column = rows.column(4)
        pickled = pa.types.is_large_binary(column.type)
        values = column.to_pylist()
        bounds = starts.tolist()
        bounds.append(len(values))
        for key, start, end in zip(heads, bounds, bounds[1:]):
            yield key, values[start:end], pickled


def _batch_pieces(blocks: Iterable[pa.RecordBatch], tally: _Tally | None = None) -> Iterator[tuple[bytes, pa.RecordBatch]]:
    """(key, records as one RecordBatch) for each stretch of one group's rows within a chunk."""
    for rows in _chunks(blocks):
        keys = rows.column(2)
        starts = _group_starts(keys)
        heads = pc.take(keys, starts, memory_pool=_POOL).to_pylist()
        _tallied(rows, starts, heads, tally)
        column = rows.column(4)
        bounds = starts.tolist()
        bounds.append(len(column))
        for key, start, end in zip(heads, bounds, bounds[1:]):
            yield key, _records_batch(column.slice(start, end - start))


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
        block_size = _span(block.column(2)) + (_span(values) if pa.types.is_large_binary(values.type) else values.nbytes)
        if pending and (size + block_size > _CHUNK_BYTES or rows >= _CHUNK_ROWS):
            yield _joined(pending)
            pending, rows, size = [], 0, 0
        if block_size > _CHUNK_BYTES:
            edges = _batch_edges(_row_bytes(block), _CHUNK_BYTES)
            yield from (block.slice(lo, hi - lo) for lo, hi in zip(edges[:-1], edges[1:]))
            continue
        pending.append(block)
        rows += block.num_rows
        size += block_size
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches, memory_pool=_POOL)


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
        differs = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1), memory_pool=_POOL)
        new[1:] = differs.to_numpy(zero_copy_only=False)
    return np.flatnonzero(new)


def iter_groups(blocks: Iterable[pa.RecordBatch], *, giant_bytes: int | None = None) -> Iterator[tuple[Any, Iterator[Any]]]:
    """(key, values iterator) per distinct key of merged blocks; pickled values are unpickled lazily.
    A group of more than `giant_bytes` is reported in the counters (see _Tally)."""
    tally = _Tally(giant_bytes)
    for _, pieces in itertools.groupby(_pieces(blocks, tally), key=operator.itemgetter(0)):
        key, values, pickled = next(pieces)
        yield decode(key), _unpickled(values, pickled, pieces)
    tally.close()


def _unpickled(values: list[Any], pickled: bool, more: Iterator[tuple[bytes, list[Any], bool]]) -> Iterator[Any]:
    yield from map(pickle.loads, values) if pickled else values
    for _, piece, piece_pickled in more:
        yield from map(pickle.loads, piece) if piece_pickled else piece


def iter_group_batches(
    blocks: Iterable[pa.RecordBatch], *, giant_bytes: int | None = None
) -> Iterator[tuple[Any, Iterator[pa.RecordBatch]]]:
    """(key, record batches) per distinct key of merged blocks: the reducer form of
    `group_by(..., batch=True)`. A group's rows come in sort order as one or more RecordBatches (a group
    larger than a chunk of merged rows spans several), so a giant group still streams."""
    tally = _Tally(giant_bytes)
    for _, pieces in itertools.groupby(_batch_pieces(blocks, tally), key=operator.itemgetter(0)):
        key, batch = next(pieces)
        yield decode(key), itertools.chain([batch], (batch for _, batch in pieces))
    tally.close()


def iter_values(blocks: Iterable[pa.RecordBatch]) -> Iterator[Any]:
    for rows in _chunks(blocks):
        column = rows.column(4)
        values = column.to_pylist()
        yield from map(pickle.loads, values) if pa.types.is_large_binary(column.type) else values


def as_records(result: Any) -> Iterable[Any]:
    """A reducer's result as records: generators and iterators yield many, None none, else one."""
    if result is None:
        return ()
    if isinstance(result, _BATCH_TYPES):  # a batch reducer's rows
        return result.to_pylist()
    if hasattr(result, "__next__"):
        return result
    return (result,)
