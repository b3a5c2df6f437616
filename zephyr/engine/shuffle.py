"""Streaming shuffle with bounded memory: scatter writes sorted run files, gather merges them.

Scatter (map side) buffers rows `(target, key hash, key, sort key, value)`, with key and sort key in
an order-preserving byte encoding (`sortkey.encode`) and the value pickled, and flushes the buffer when it
reaches its byte budget: the rows are sorted by (target, key hash, key, sort key) in Arrow (stable, so ties
keep input order), the optional combiner pre-aggregates each key, and the result is written as one Arrow
IPC run file whose record batches each hold a single target. The per-target batch ranges and byte counts
(the run's sidecar) travel back to the driver with the task result.

Gather (reduce side) for target t opens the batches of t in every run, one batch per run in memory, and
k-way merges them; when more runs exist than fit in its memory budget, it first merges groups of runs into
longer runs on disk (an external merge), so memory never depends on the input size.
"""

from __future__ import annotations

import heapq
import itertools
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

from zephyr.engine.fs import join, url_to_fs
from zephyr.engine.expr import Column
from zephyr.engine.sortkey import decode, encode, encode_column

__all__ = ["ShuffleSpec", "RunFile", "ScatterWriter", "merged_rows", "iter_groups", "iter_values"]

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
_BATCH_BYTES = 256 << 10  # target payload per record batch in a run file
_ADD_BATCH_ROWS = 4096  # rows of an Arrow batch scattered at once
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


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


@dataclass(frozen=True)
class RunFile:
    """One sorted run: `segments[target] = (first_batch, end_batch, rows, bytes)`."""

    url: str
    segments: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)

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
            target = khash % spec.num_targets
            sort = self._tag if spec.sort_by is None else self._tag + encode(spec.sort_by(record))
        self._append(target, khash, key, sort, value)
        self.records += 1
        if self._buffered >= self.flush_bytes:
            self.flush()

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add an Arrow batch of records: the same rows `add` would write for `batch.to_pylist()`.

        With field keys (`column_keyed`) keys and sort keys are encoded column-wise, which is what
        makes a group_by over parquet several times cheaper per record than key functions.
        """
        if not column_keyed(self.spec):
            for record in batch.to_pylist():
                self.add(record)
            return
        for start in range(0, batch.num_rows, _ADD_BATCH_ROWS):  # flush between slices: memory stays bounded
            self._add_slice(batch.slice(start, _ADD_BATCH_ROWS))

    def _add_slice(self, batch: pa.RecordBatch) -> None:
        spec = self.spec
        keys = encode_column(_field(batch, spec.key.name))
        sorts = [b""] * len(keys) if spec.sort_by is None else encode_column(_field(batch, spec.sort_by.name))
        khashes = list(map(_key_hash, keys))
        values = [pickle.dumps(record, protocol=5) for record in batch.to_pylist()]
        self._targets.extend((np.array(khashes, np.uint64) % np.uint64(spec.num_targets)).tolist())
        self._khashes.extend(khashes)
        self._keys.extend(keys)
        self._sorts.extend(sorts)
        self._values.extend(values)
        self._buffered += sum(map(len, keys)) + sum(map(len, sorts)) + sum(map(len, values)) + _ROW_OVERHEAD * len(keys)
        self.records += len(keys)
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
        self._buffered = 0

    def flush(self) -> None:
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
        self.runs.append(_write_run(table, order, join(self.out_dir, f"run-{len(self.runs):05d}.arrow")))

    def close(self) -> list[RunFile]:
        self.flush()
        return self.runs

    def _combine(self, table: pa.Table) -> pa.Table:
        spec = self.spec
        rows = zip(*(table.column(n).to_pylist() for n in ("target", "khash", "key", "sort", "value")))
        for (target, khash, key), group in itertools.groupby(rows, key=lambda r: r[:3]):
            combined = []
            for record in _as_records(spec.combiner(decode(key), (pickle.loads(r[4]) for r in group))):
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


def column_keyed(spec: ShuffleSpec) -> bool:
    """A group_by on fields (`col(...)` key and sort key, no combiner): batches can be scattered whole."""
    return (
        isinstance(spec.key, Column)
        and (spec.sort_by is None or isinstance(spec.sort_by, Column))
        and spec.combiner is None
        and spec.tag is None
    )


def _field(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows)  # missing field -> None, as col() says
    column = batch.column(index)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _binary_column(items: list[bytes]) -> pa.Array:
    """A large_binary array built at its exact size (the generic builder over-allocates by doubling)."""
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, len(items)), out=offsets[1:])
    data = b"".join(items)
    return pa.Array.from_buffers(pa.large_binary(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _write_run(table: pa.Table, order: np.ndarray | None, url: str) -> RunFile:
    """Write `table` in `order` (sorted by target) as batches that each hold one target and ~_BATCH_BYTES.

    Rows are taken batch by batch, so the sorted copy never exists whole in memory.
    """
    fs, path = url_to_fs(url)
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    if order is None:
        order = np.arange(table.num_rows)
    segments: dict[int, tuple[int, int, int, int]] = {}
    targets = table.column("target").to_numpy()[order]
    sizes = pc.add(pc.binary_length(table.column("value")), pc.binary_length(table.column("key"))).to_numpy()[order]
    bounds = np.flatnonzero(np.diff(targets)) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(targets)]]).astype(np.int64)
    with fs.open(path, "wb") as sink, pa.ipc.new_file(sink, _SCHEMA, options=_IPC_OPTIONS) as writer:
        batch_index = 0
        for start, end in zip(starts.tolist(), ends.tolist()):
            cumulative = np.cumsum(sizes[start:end])
            total = int(cumulative[-1])
            # cut the segment where its running byte count crosses each multiple of _BATCH_BYTES
            cuts = np.searchsorted(cumulative, np.arange(_BATCH_BYTES, total, _BATCH_BYTES), side="left") + 1
            edges = sorted({0, *cuts.tolist(), end - start})
            first = batch_index
            for lo, hi in zip(edges[:-1], edges[1:]):
                if hi > lo:
                    batch = table.take(pa.array(order[start + lo : start + hi])).combine_chunks()
                    writer.write_batch(batch.to_batches()[0])
                    batch_index += 1
            segments[int(targets[start])] = (first, batch_index, end - start, total)
    return RunFile(url, segments)


def _read_segment(run: RunFile, target: int) -> Iterator[tuple[int, bytes, bytes, bytes]]:
    """Rows (khash, key, sort, value) of `target` in `run`, one record batch in memory at a time."""
    segment = run.segments.get(target)
    if segment is None:
        return
    first, end, _, _ = segment
    fs, path = url_to_fs(run.url)
    with fs.open(path, "rb") as handle:
        reader = pa.ipc.open_file(handle)
        for i in range(first, end):
            batch = reader.get_batch(i)
            yield from zip(
                batch.column(1).to_pylist(),
                batch.column(2).to_pylist(),
                batch.column(3).to_pylist(),
                batch.column(4).to_pylist(),
            )
            del batch


def merged_rows(
    runs: list[RunFile], target: int, *, memory_budget: int, spill_dir: str, ordered: bool = True
) -> Iterator[tuple[int, bytes, bytes, bytes]]:
    """All rows of `target` across `runs`, sorted by (key hash, key, sort key); ties keep run order.

    With ordered=False (reshard) the runs are concatenated. Merges at most `fan_in` runs at once, where
    fan_in is what fits in `memory_budget`; more runs are first merged into intermediate runs on disk.
    """
    runs = [r for r in runs if target in r.segments]
    if not ordered:
        for run in runs:
            yield from _read_segment(run, target)
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
            merged_level.append(_spill(_merge(group, target), target, url))
        runs = merged_level
        level += 1
    yield from _merge(runs, target)


def _merge(runs: list[RunFile], target: int) -> Iterator[tuple[int, bytes, bytes, bytes]]:
    if len(runs) == 1:
        yield from _read_segment(runs[0], target)
        return
    # (khash, key, sort, run index, value): equal (khash, key, sort) rows come out in run order, and
    # heapq.merge keeps each run's own order.
    streams = [
        ((khash, key, sort, index, value) for khash, key, sort, value in _read_segment(run, target))
        for index, run in enumerate(runs)
    ]
    for khash, key, sort, _, value in heapq.merge(*streams):
        yield khash, key, sort, value


def _spill(rows: Iterator[tuple[int, bytes, bytes, bytes]], target: int, url: str) -> RunFile:
    fs, path = url_to_fs(url)
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    batches = 0
    count = 0
    total = 0
    with fs.open(path, "wb") as sink, pa.ipc.new_file(sink, _SCHEMA, options=_IPC_OPTIONS) as writer:
        while True:
            chunk = []
            acc = 0
            for row in rows:
                chunk.append(row)
                acc += len(row[1]) + len(row[3])
                if acc >= _BATCH_BYTES:
                    break
            if not chunk:
                break
            khash, key, sort, value = zip(*chunk)
            arrays = [
                pa.array([target] * len(chunk), pa.int32()),
                pa.array(khash, pa.uint64()),
                _binary_column(list(key)),
                _binary_column(list(sort)),
                _binary_column(list(value)),
            ]
            writer.write_batch(pa.record_batch(arrays, schema=_SCHEMA))
            batches += 1
            count += len(chunk)
            total += acc
    return RunFile(url, {target: (0, batches, count, total)})


def iter_groups(rows: Iterable[tuple[int, bytes, bytes, bytes]]) -> Iterator[tuple[Any, Iterator[Any]]]:
    """(key, values iterator) per distinct key of sorted rows; values are unpickled lazily."""
    for (_, key), group in itertools.groupby(rows, key=lambda r: (r[0], r[1])):
        yield decode(key), (pickle.loads(r[3]) for r in group)


def iter_values(rows: Iterable[tuple[int, bytes, bytes, bytes]]) -> Iterator[Any]:
    for row in rows:
        yield pickle.loads(row[3])


def _as_records(result: Any) -> Iterable[Any]:
    """A reducer's result as records: generators and iterators yield many, None none, else one."""
    if result is None:
        return ()
    if hasattr(result, "__next__"):
        return result
    return (result,)
