"""The shuffle's files: run files (sorted Arrow IPC, one target per batch), their sidecar, and reading
a target's batches back.

Part of the shuffle (see zephyr.engine.shuffle for how scatter and gather fit together)."""

from __future__ import annotations

import bisect
import functools
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from zephyr.engine import sortkey
from zephyr.engine.sortkey import binary_array
from zephyr.fs import naming_the_file, url_to_fs

__all__ = [
    "BATCH_BYTES",
    "BATCH_TYPES",
    "SHUFFLE_POOL",
    "IPC_OPTIONS",
    "KEY_HASH",
    "RUN_SCHEMA",
    "RunFile",
    "ShuffleSpec",
    "batch_edges",
    "binary_column",
    "key_hash",
    "row_bytes",
    "records_of",
    "segment_batches",
    "value_type",
    "write_run",
]

RUN_SCHEMA = pa.schema(
    [
        ("target", pa.int32()),
        ("khash", pa.uint64()),
        ("key", pa.large_binary()),
        ("sort", pa.large_binary()),
        ("value", pa.large_binary()),
        # what restores the key's own type from its canonical bytes (`sortkey.hint`): b"" nearly always
        ("hint", pa.large_binary()),
    ]
)
BATCH_BYTES = 256 << 10  # target payload per record batch in a run file
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)  # a run batch is small: threads cost more than they save
# Arrow memory of the shuffle comes from the system allocator: mimalloc (Arrow's default) keeps freed pages
# committed for a while, and the merge frees a block every round; in test_shuffle's memory test that
# raised a gather's peak RSS by ~50 MB. The system allocator hands them back, at no measured speed cost.
# The scatter's conversions, sorts and takes use it too (with mimalloc, dict records scattered as Arrow
# batches peaked ~55 MB higher in that test). What earlier tasks left in mimalloc's cache is released when
# a gather starts: the gather no longer reuses those pages, and keeping them occasionally added 20-30 MB.
SHUFFLE_POOL = pa.system_memory_pool()
BATCH_TYPES = (pa.RecordBatch, pa.Table)


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
    aggregation: Any = None  # Dataset.aggregate: the map side writes folded partial rows (shuffle.aggregate)


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
    # the kinds of sort keys the run holds (`sortkey.kinds`: NONE, NUMBER, STR, ...); () when not known.
    # A gather whose runs all hold one kind of scalar (and None) has no sort keys to check for an order
    sort_kinds: tuple[int, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(seg[3] for seg in self.segments.values())


KEY_HASH = xxhash.xxh3_64_intdigest  # what key_hash computes, for mapping over many keys at C speed


def key_hash(key_bytes: bytes) -> int:
    """The 64-bit hash of an encoded key (xxh3): its shuffle target is `key_hash % targets`. It hashes the key's
    canonical bytes (`sortkey.encode`), so equal keys (1, 1.0 and True) land in one target, and is stable
    across processes and machines (Python's `hash` of a str is salted per process)."""
    return KEY_HASH(key_bytes)


binary_column = binary_array


def write_run(table: pa.Table, order: np.ndarray | None, url: str, batch_bytes: int = BATCH_BYTES) -> RunFile:
    """Write `table` in `order` (sorted by target) as batches that each hold one target and ~`batch_bytes`.

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
    sizes = row_bytes(table)[order]
    bounds = np.flatnonzero(np.diff(targets)) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(targets)]]).astype(np.int64)
    with (
        naming_the_file(url),
        fs.open(path, "wb") as sink,
        pa.ipc.new_file(sink, table.schema, options=IPC_OPTIONS) as writer,
    ):
        batch_index = 0
        for start, end in zip(starts.tolist(), ends.tolist(), strict=False):
            edges = batch_edges(sizes[start:end], batch_bytes)
            first = batch_index
            starts_of[int(targets[start])] = tuple(khashes[start + np.array(edges[:-1], np.int64)].tolist())
            for lo, hi in zip(edges[:-1], edges[1:], strict=False):
                rows = pc.take(table, pa.array(order[start + lo : start + hi]), memory_pool=SHUFFLE_POOL)
                batch = rows.combine_chunks(memory_pool=SHUFFLE_POOL)
                writer.write_batch(batch.to_batches()[0])
                batch_index += 1
            segments[int(targets[start])] = (first, batch_index, end - start, int(sizes[start:end].sum()))
    kinds = tuple(int(k) for k in np.unique(sortkey.kinds(table.column("sort").combine_chunks())))
    return RunFile(url, segments, value_type(table.schema), starts_of, kinds)


def value_type(schema: pa.Schema) -> str:
    """What a run's value column holds, as `RunFile.value_type` records it: "" for pickled records, else the
    Arrow struct type (as text) of a columnar run; a merge over runs of both kinds pickles the columnar
    ones' values (`segment_batches`)."""
    kind = schema.field("value").type
    return "" if pa.types.is_large_binary(kind) else str(kind)


def row_bytes(rows: pa.Table | pa.RecordBatch) -> np.ndarray:
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
        return np.diff(np.frombuffer(array.buffers()[1], np.int32)[array.offset : array.offset + n + 1]).astype(
            np.int64
        )
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


def batch_edges(sizes: np.ndarray, limit: int | None = None) -> list[int]:
    """Row offsets `[0, ..., len(sizes)]` that cut rows of these byte sizes into pieces of ~`limit` bytes
    (BATCH_BYTES): a cut falls after the row where the running byte count crosses each multiple of it."""
    limit = limit or BATCH_BYTES
    cumulative = np.cumsum(sizes)
    if len(sizes) == 0 or cumulative[-1] <= limit:
        return [0, len(sizes)] if len(sizes) else [0]
    cuts = np.searchsorted(cumulative, np.arange(limit, int(cumulative[-1]), limit), side="left") + 1
    return sorted({0, *cuts.tolist(), len(sizes)})


def segment_batches(
    run: RunFile,
    target: int,
    pickled: bool = False,
    khash_range: tuple[int, int] | None = None,
    only: Callable[[int], bool] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of `target` in `run` (sorted within the run), one in memory at a time; with
    `pickled`, a columnar run's values are pickled (runs of different value types meet in one merge).
    With `khash_range` (lo, hi): only the rows whose key hash is in [lo, hi), reading only the batches
    that can hold some (the run's khash_starts). With `only`: only the batches i (counted within the
    target's segment) for which only(i) holds."""
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
        reader = pa.ipc.open_file(handle, options=_IPC_READ, memory_pool=SHUFFLE_POOL)
        for i in range(first, end):
            if only is not None and not only(i - segment[0]):
                continue
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
    return pa.RecordBatch.from_arrays([*batch.columns[:4], values, batch.column(5)], schema=RUN_SCHEMA)


def records_of(rows: pa.RecordBatch | pa.StructArray) -> list[Any]:
    """`rows.to_pylist()`: the records of a batch, or of a struct column (a columnar run's values), as
    dicts. Each field becomes a Python list, and one dict display per row builds the dicts: ~2.5x faster
    than Arrow's own to_pylist, which is the reduce side's biggest per-record cost."""
    if isinstance(rows, pa.StructArray):
        if rows.null_count:  # a null record: to_pylist gives None for it
            return rows.to_pylist()
        names = [field.name for field in rows.type]
        columns = rows.flatten()
    else:
        names, columns = rows.schema.names, rows.columns
    if not names or len(set(names)) != len(names):
        return rows.to_pylist()
    return _dict_builder(len(names))(tuple(names), [column.to_pylist() for column in columns])


@functools.lru_cache(maxsize=64)
def _dict_builder(n: int) -> Callable[[tuple[str, ...], list[list[Any]]], list[dict[str, Any]]]:
    """`build(names, columns)`: `[{names[0]: v0, ...} for v0, ... in zip(*columns)]` for n fields. Only
    variable names enter the source (k0.., v0..); the field names are values, bound at call time."""
    keys = ", ".join(f"k{i}" for i in range(n))
    values = ", ".join(f"v{i}" for i in range(n))
    items = ", ".join(f"k{i}: v{i}" for i in range(n))
    source = (
        f"def build(names, columns):\n    {keys}, = names\n    return [{{{items}}} for {values}, in zip(*columns)]\n"
    )
    scope: dict[str, Any] = {}
    exec(compile(source, f"<zephyr dict builder {n}>", "exec"), scope)  # noqa: S102 - source built from ints only
    return scope["build"]
