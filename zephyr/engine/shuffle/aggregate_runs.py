"""`Dataset.aggregate` through the shuffle's run files: the map side's writer (buffer, fold or ship raw, write
a run sorted by target and key-hash bucket) and the reduce side's read (a target's batches, unordered, a
key-hash range at a time) and fold. The folds themselves are `shuffle.aggregate`'s.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.engine.shuffle.aggregate import (
    Aggregation,
    array_of,
    as_rows,
    empty,
    finished,
    fold,
    key_column,
    key_hash,
    key_hashes,
    raw_rows,
    unit_partial,
    unit_partials,
)
from zephyr.engine.shuffle.runs import RUN_SCHEMA, RunFile, binary_column, segment_batches, write_run
from zephyr.engine.shuffle.scatter import records_to_batch
from zephyr.fs import join

__all__ = ["AggregateWriter", "fold_partials", "target_values"]

_ORDER_BITS = 40  # a map shard's rows are numbered below 2**40 (a trillion rows per shard)
_BUCKET_SHIFT = 56  # a run's rows are sorted by target and the key hash's top 8 bits (see _write)
_PENDING_ROWS = 4096  # records converted to one Arrow batch at a time
_PYTHON_ROW_BYTES = 1000  # a partial row held as a dict (tracemalloc: ~460 B with a key, 3 outputs, order, sort)
_SAMPLE_ROWS = 16384  # rows a map-side buffer's keys are sampled on before folding it
# an aggregate's runs are read unordered (no merge holds one batch per run), so larger batches than the
# shuffle's 256 kB are free, and they cut write_run's per-batch cost (500k rows: 0.21 -> ~0.1 s)
_RUN_BATCH_BYTES = 4 << 20


def target_values(runs: list[RunFile], target: int, khash_range: tuple[int, int] | None) -> Iterator[pa.Array]:
    """The value columns of `target`'s run batches, the rows whose key hash lies in `khash_range` (all with
    None), run after run. Read as they are: runs of raw rows, folded rows and Python rows meet here, and
    the fold takes each kind (a merge would pickle all of them as soon as two value types differ). A
    run's rows are in key-hash bucket order (`_BUCKET_SHIFT`): a range reads the batches whose buckets
    overlap it and masks their rows."""
    for run in runs:
        only = None
        if khash_range is not None:
            only = _overlapping(run.khash_starts.get(target, ()), khash_range)
        for batch in segment_batches(run, target, only=only):
            if khash_range is None:
                yield batch.column(4)
                continue
            khash = batch.column(1).to_numpy()
            keep = khash >= np.uint64(khash_range[0])
            if khash_range[1] < 1 << 64:
                keep &= khash < np.uint64(khash_range[1])
            yield batch.column(4).filter(pa.array(keep))


def _overlapping(starts: tuple[int, ...], khash_range: tuple[int, int]) -> Callable[[int], bool] | None:
    """Which batches of a segment (given each batch's first key hash) can hold a key hash in the range: batch
    i holds the buckets from its first row's to the next batch's first row's."""
    if not starts:
        return None
    lo, hi = khash_range
    buckets = [start >> _BUCKET_SHIFT for start in starts]
    last = (1 << (64 - _BUCKET_SHIFT)) - 1
    ends = [*buckets[1:], last]
    return lambda i: (ends[i] + 1) << _BUCKET_SHIFT > lo and buckets[i] << _BUCKET_SHIFT < hi


def fold_partials(values: Iterator[pa.Array], spec: Aggregation, budget: int) -> Iterator[Any]:
    """The output records of a target's partial rows, given as the value columns of its run batches (Arrow
    structs, or pickled dicts where the runs' types differed): folded whenever ~`budget` bytes wait, so
    memory holds one row per key plus one budget of rows."""
    tables: list[pa.Table] = []
    rows: list[dict] | None = None  # set once a pickled batch (or an unsupported type) turns to Python
    waiting = 0
    for column in values:
        if not len(column):
            continue
        if pa.types.is_large_binary(column.type):
            rows = as_rows(tables, rows)
            tables = []
            rows.extend(pickle.loads(value) for value in column.to_pylist())
        else:
            table = pa.Table.from_batches([pa.RecordBatch.from_struct_array(column)])
            if "#order" in table.column_names:  # raw rows (see raw_rows)
                table = unit_partials(table, spec)
            if rows is not None:
                rows.extend(table.to_pylist())
            else:
                tables.append(table)
        # a partial row as a dict holds ~10x its Arrow bytes (objects, a hash table): counted as such
        waiting += column.nbytes if rows is None else len(column) * _PYTHON_ROW_BYTES
        if waiting >= budget:
            tables, rows = fold(tables, rows, spec)
            waiting = 0
    tables, rows = fold(tables, rows, spec)
    yield from finished(rows if rows is not None else (tables[0] if tables else empty(spec)), spec)


# -------------------------------------------------------------------------------------- map side
@dataclass
class AggregateWriter:
    """The map side of an aggregate: buffers a shard's rows, folds every ~`flush_bytes` of them into one
    partial row per key (or ships them raw when their keys are mostly distinct) and writes them as a run
    (targets by `key_hash`)."""

    spec: Aggregation
    num_targets: int
    out_dir: str
    shard: int = field(kw_only=True)
    flush_bytes: int = field(kw_only=True)
    runs: list[RunFile] = field(default_factory=list, init=False)
    records: int = field(default=0, init=False)  # records added so far (the next one's order)
    _tables: list[pa.Table] = field(default_factory=list, init=False)  # raw rows of Arrow batches
    _rows: list[dict] = field(default_factory=list, init=False)  # partial rows of records Arrow cannot hold
    _pending: list[Any] = field(default_factory=list, init=False)  # records not yet converted (see add)
    _types: dict[str, pa.DataType] = field(default_factory=dict, init=False)  # field types so far (all-None runs)
    _buffered: int = field(default=0, init=False)

    def _order(self) -> int:
        return (self.shard << _ORDER_BITS) | self.records

    def add(self, record: Any) -> None:
        """Buffer one record (not an Arrow batch): records whose fields convert to Arrow exactly go
        columnar, a _PENDING_ROWS stretch at a time; others are folded in Python."""
        self._pending.append(record)
        if len(self._pending) >= _PENDING_ROWS:
            self._convert_pending()

    def _convert_pending(self) -> None:
        records, self._pending = self._pending, []
        if not records:
            return
        fields = self.spec.fields()
        batch = None
        if all(type(record) is dict for record in records):
            batch = records_to_batch([{name: record.get(name) for name in fields} for record in records], self._types)
        if batch is not None:
            self._types.update(zip(batch.schema.names, batch.schema.types, strict=True))
            self.add_batch(batch)
            return
        for record in records:
            self._rows.append(unit_partial(record, self.spec, self._order()))
            self.records += 1
        self._buffered += _PYTHON_ROW_BYTES * len(records)
        if self._buffered >= self.flush_bytes:
            self.flush()

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        raw = raw_rows(batch, self.spec, self._order())
        self.records += batch.num_rows
        self._tables.append(raw)
        self._buffered += raw.nbytes
        if self._buffered >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Fold what is buffered (unless its keys are mostly distinct) and write it as one run."""
        self._convert_pending()
        rows, self._rows = self._rows, []
        tables, self._tables = self._tables, []
        self._buffered = 0
        first = key_column(array_of(tables[0].column(self.spec.key))) if tables and not rows else None
        if first is not None and _mostly_distinct(first):
            try:  # folding would cost more than the rows it saves: they go as they are
                raw = pa.concat_tables(tables)
            except pa.ArrowInvalid:  # the batches' types differ: fold (in Python if need be)
                raw = None
            keys = None if raw is None else key_column(array_of(raw.column(self.spec.key)))
            if raw is not None and keys is not None:
                self._write_table(raw, keys)
                return
        # a Python row anywhere makes the whole buffer Python (one fold, one value type per run)
        tables, folded = fold([unit_partials(raw, self.spec) for raw in tables], rows or None, self.spec)
        if folded is not None:
            self._write_rows(folded)
        elif tables and tables[0].num_rows:
            self._write_table(tables[0], array_of(tables[0].column(self.spec.key)))  # folded: keys normalized

    def close(self) -> list[RunFile]:
        self.flush()
        return self.runs

    def _write_table(self, partials: pa.Table, keys: pa.Array) -> None:
        """Write partial or raw rows whose normalized key column (`key_column`) is `keys`."""
        hashes = key_hashes(keys)
        columns = [column.combine_chunks() for column in partials.columns]
        values = pa.StructArray.from_arrays(columns, names=partials.column_names)
        self._write(hashes, values)

    def _write_rows(self, partials: list[dict]) -> None:
        if not partials:
            return
        hashes = np.fromiter((key_hash(row[self.spec.key]) for row in partials), np.uint64, len(partials))
        self._write(hashes, binary_column([pickle.dumps(row, protocol=5) for row in partials]))

    def _write(self, hashes: np.ndarray, values: pa.Array) -> None:
        n = len(hashes)
        targets = (hashes % np.uint64(self.num_targets)).astype(np.int32)
        blank = pa.LargeBinaryArray.from_buffers(  # key, sort and hint: unused by an aggregate's runs
            pa.large_binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int64)), pa.py_buffer(b"")]
        )
        table = pa.Table.from_arrays(
            [pa.array(targets), pa.array(hashes), blank, blank, values, blank], names=RUN_SCHEMA.names
        )
        # by target, then key-hash bucket (stable: rows of a bucket stay in buffer order), so write_run's takes
        # read memory in long forward stretches (sorted by the whole key hash, they gathered at random: 0.36
        # vs 0.15 s per 2M rows) and a key-hash range still reads only its buckets' batches
        buckets = hashes >> np.uint64(_BUCKET_SHIFT)
        if self.num_targets <= 1 << (16 - (64 - _BUCKET_SHIFT)):  # one 16-bit sort key: NumPy's radix sort
            order = np.argsort(
                (targets.astype(np.uint16) << (64 - _BUCKET_SHIFT)) | buckets.astype(np.uint16), kind="stable"
            )
        else:
            order = np.lexsort((buckets, targets))
        url = join(self.out_dir, f"run-{len(self.runs):05d}.arrow")
        self.runs.append(write_run(table, order, url, batch_bytes=_RUN_BATCH_BYTES))


def _mostly_distinct(keys: pa.Array) -> bool:
    """Whether most keys among a buffer's first rows differ: then a fold shrinks it little (1M keys in
    10M records, 500k per shard: ~0.9 distinct, and the fold was a third of the map side's time)."""
    sample = keys.slice(0, _SAMPLE_ROWS)
    return len(sample) > 0 and pc.count_distinct(sample, mode="all").as_py() > 0.5 * len(sample)
