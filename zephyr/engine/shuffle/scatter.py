"""Scatter (map side): route records or Arrow batches to targets, buffer, sort and write runs.

Part of the shuffle (see zephyr.engine.shuffle for how scatter and gather fit together)."""

from __future__ import annotations

import bisect
import itertools
import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.engine.expr import Column
from zephyr.engine.shuffle.gather import as_records
from zephyr.engine.shuffle.runs import (
    KEY_HASH,
    RUN_SCHEMA,
    SHUFFLE_POOL,
    RunFile,
    ShuffleSpec,
    binary_column,
    key_hash,
    records_of,
    write_run,
)
from zephyr.engine.sortkey import binary_array, decode_key, encode, encode_keys, hint
from zephyr.fs import join

__all__ = ["ScatterWriter", "column_keyed", "records_to_batch", "scatters_batches"]
_ROW_OVERHEAD = 200  # Python object headers and list slots per buffered row, beyond the payload
_COLUMNAR_ROW_OVERHEAD = 16  # a columnar row's share of the sort indices and the sorted copy's offsets
_FIRST_PENDING_ROWS = 64  # dict records held before the first conversion to Arrow (which measures their size)
_MAX_PENDING_ROWS = 65536


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
        # dict records of a keyed shuffle are gathered into Arrow batches (records_to_batch) and scattered
        # like a columnar file's batches: no pickling. The first batch that does not convert exactly turns
        # this off for the rest of the shard (the rows already buffered keep their order: see flush)
        self._converting = scatters_batches(spec)
        self._pending: list[Any] = []
        self._pending_rows = _FIRST_PENDING_ROWS
        self._types: dict[str, pa.DataType] = {}  # each field's Arrow type so far (for all-None stretches)

    def add(self, record: Any) -> None:
        if self._converting:
            self._pending.append(record)
            if len(self._pending) >= self._pending_rows:
                self._convert_pending()
            return
        self._add_pickled(record)

    def _convert_pending(self) -> None:
        """Scatter the pending dict records as one Arrow batch, or (when they do not convert exactly)
        pickled, one by one, as every later record of this shard."""
        records, self._pending = self._pending, []
        if not records:
            return
        batch = records_to_batch(records, self._types)
        if batch is None:
            self._converting = False
            for record in records:
                self._add_pickled(record)
            return
        self._types.update(zip(batch.schema.names, batch.schema.types, strict=True))
        row_size = max(1, batch.nbytes // batch.num_rows)
        self._pending_rows = max(_FIRST_PENDING_ROWS, min(_MAX_PENDING_ROWS, self.flush_bytes // 8 // row_size))
        self._add_columnar(batch, records)

    def _add_pickled(self, record: Any) -> None:
        spec = self.spec
        value = pickle.dumps(record if spec.tag is None else (spec.tag, record), protocol=5)
        if spec.key is None:
            target, khash, key, sort, key_hint = (self.shard + self.records) % spec.num_targets, 0, b"", b"", b""
        else:
            key_value = spec.key(record)
            key, key_hint = encode(key_value), hint(key_value)
            khash = key_hash(key)
            sort = self._tag if spec.sort_by is None else self._tag + encode(spec.sort_by(record))
            target = khash % spec.num_targets if spec.ranges is None else bisect.bisect_right(spec.ranges, sort)
        self._append(target, khash, key, sort, value, key_hint)
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

    def _add_columnar(self, batch: pa.RecordBatch, records: list[Any] | None = None) -> None:
        """Buffer a batch's rows; `records` are the batch's rows as the dicts they came as (if they did),
        for key functions."""
        spec = self.spec
        by_fields = isinstance(spec.key, Column) and (spec.sort_by is None or isinstance(spec.sort_by, Column))
        if by_fields:
            records = None
        elif records is None:
            records = records_of(batch)
        keys, hints = _encoded(batch, spec.key, records, hints=True)
        sorts = _empty_binary(batch.num_rows) if spec.sort_by is None else _encoded(batch, spec.sort_by, records)[0]
        khashes = _hash_array(keys)
        if spec.ranges is None:
            targets = (khashes % np.uint64(spec.num_targets)).astype(np.int32)
        else:  # Dataset.sort: range partitioning on the encoded sort key, as `add` does
            ranges = spec.ranges
            targets = np.fromiter((bisect.bisect_right(ranges, s) for s in sorts.to_pylist()), np.int32, batch.num_rows)
        values = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
        part = pa.RecordBatch.from_arrays(
            [pa.array(targets), pa.array(khashes), keys, sorts, values, hints], names=RUN_SCHEMA.names
        )
        if self._columnar and part.schema != self._columnar[0].schema:
            self.flush()  # a run holds one value type
        self._columnar.append(part)
        self._buffered += part.nbytes + _COLUMNAR_ROW_OVERHEAD * part.num_rows
        self.records += part.num_rows
        if self._buffered >= self.flush_bytes:
            self.flush()

    def _append(self, target: int, khash: int, key: bytes, sort: bytes, value: bytes, key_hint: bytes) -> None:
        self._targets.append(target)
        self._khashes.append(khash)
        self._keys.append(key)
        self._sorts.append(sort)
        self._values.append(value)
        self._hints.append(key_hint)
        self._buffered += len(key) + len(sort) + len(value) + len(key_hint) + _ROW_OVERHEAD

    def _reset(self) -> None:
        self._targets: list[int] = []
        self._khashes: list[int] = []
        self._keys: list[bytes] = []
        self._sorts: list[bytes] = []
        self._values: list[bytes] = []
        self._hints: list[bytes] = []
        self._columnar: list[pa.RecordBatch] = []
        self._buffered = 0

    def flush(self) -> None:
        if self._columnar:  # buffered before any pickled row (see _convert_pending): its run comes first
            self._flush_columnar()
        if not self._targets:
            self._buffered = 0
            return
        table = self._buffered_table()
        self._reset()
        # Arrow's sort is stable: equal keys keep their input order. A reshard sorts by target only.
        names = ("target",) if self.spec.key is None else ("target", "khash", "key", "sort")
        order = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in names]).to_numpy()
        if self.spec.combiner is not None:
            table, order = self._combine(table.take(order)), None
        if table.num_rows:  # a combiner may emit nothing
            self.runs.append(write_run(table, order, join(self.out_dir, f"run-{len(self.runs):05d}.arrow")))

    def _flush_columnar(self) -> None:
        batches, self._columnar = self._columnar, []  # only these: pickled rows wait for their own run
        table = pa.Table.from_batches(batches).combine_chunks(memory_pool=SHUFFLE_POOL)
        del batches
        names = ("target", "khash", "key", "sort")
        order = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in names], memory_pool=SHUFFLE_POOL)
        self.runs.append(write_run(table, order.to_numpy(), join(self.out_dir, f"run-{len(self.runs):05d}.arrow")))

    def close(self) -> list[RunFile]:
        self._convert_pending()
        self.flush()
        return self.runs

    def _combine(self, table: pa.Table) -> pa.Table:
        spec = self.spec
        combiner = spec.combiner
        assert combiner is not None  # only a combining shuffle combines
        rows = zip(*(table.column(n).to_pylist() for n in RUN_SCHEMA.names), strict=False)
        for (target, khash, key), group in itertools.groupby(rows, key=lambda r: r[:3]):
            first = next(group)
            key_hint = first[5]  # the group's key as its first record had it (1, 1.0 and True are one key)
            combined = []
            values = (pickle.loads(r[4]) for r in itertools.chain([first], group))
            for record in as_records(combiner(decode_key(key, key_hint), values)):
                sort = self._tag if spec.sort_by is None else self._tag + encode(spec.sort_by(record))
                combined.append((sort, pickle.dumps(record, protocol=5)))
            combined.sort(key=lambda r: r[0])
            for sort, value in combined:
                self._append(target, khash, key, sort, value, key_hint)
        out = self._buffered_table()
        self._reset()
        return out

    def _buffered_table(self) -> pa.Table:
        """The rows buffered by `_append` as one table of RUN_SCHEMA."""
        return pa.table(
            [
                pa.array(np.fromiter(self._targets, np.int32, len(self._targets))),
                pa.array(np.fromiter(self._khashes, np.uint64, len(self._khashes))),
                binary_column(self._keys),
                binary_column(self._sorts),
                binary_column(self._values),
                binary_column(self._hints),
            ],
            schema=RUN_SCHEMA,
        )


_ARROW_TYPES: dict[type, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
    bool: pa.bool_(),
}


def records_to_batch(records: list[Any], types: dict[str, pa.DataType] | None = None) -> pa.RecordBatch | None:
    """The records as one Arrow batch, when its `to_pylist()` gives them back exactly: plain dicts with the
    same str keys in the same order, each field holding values of one type among int (64-bit), float,
    str, bytes and bool, or None. Anything else (nested values, a field missing from some records, ints
    mixed with floats, a big int, a lone surrogate) gives None: such records are pickled instead.
    `types`: a field's type seen before, used for a field that is None throughout these records."""
    first = records[0]
    if type(first) is not dict or not first:
        return None
    names = tuple(first)
    if not all(type(name) is str for name in names):
        return None
    if set(map(type, records)) != {dict} or not all(map(names.__eq__, map(tuple, records))):
        return None
    arrays = []
    for name in names:
        values = [record[name] for record in records]
        kinds = set(map(type, values))
        kinds.discard(type(None))
        if len(kinds) > 1:
            return None
        kind = _ARROW_TYPES.get(kinds.pop()) if kinds else (types or {}).get(name, pa.null())
        if kind is None:
            return None
        try:
            arrays.append(pa.array(values, kind, memory_pool=SHUFFLE_POOL))
        except (pa.ArrowException, OverflowError, UnicodeError, TypeError):
            return None  # an int beyond 64 bits, a lone surrogate in a str
    return pa.RecordBatch.from_arrays(arrays, names=list(names))


def scatters_batches(spec: ShuffleSpec) -> bool:
    """A keyed shuffle without combiner or join tag: Arrow batches are scattered whole, records stay Arrow
    (key functions still see each record as a dict, once, on the map side)."""
    return spec.key is not None and spec.combiner is None and spec.tag is None


def column_keyed(spec: ShuffleSpec) -> bool:
    """A group_by on fields (`col(...)` key and sort key, no combiner): batches can be scattered whole."""
    return (
        isinstance(spec.key, Column)
        and (spec.sort_by is None or isinstance(spec.sort_by, Column))
        and spec.combiner is None
        and spec.tag is None
        and spec.ranges is None
    )


def field_array(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    """A batch's field as one array; a field the batch lacks reads as nulls (None, as col() says)."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows)  # missing field -> None, as col() says
    column = batch.column(index)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _encoded(
    batch: pa.RecordBatch, key: Any, records: list[Any] | None, *, hints: bool = False
) -> tuple[pa.Array, pa.Array | None]:
    """The encoded keys of a batch's rows, and with `hints` their hints (`sortkey.hint`): column-wise for
    a field, else `key(record)` per record."""
    if isinstance(key, Column):
        return encode_keys(field_array(batch, key.name), hints=hints)
    assert records is not None  # key functions get the batch's records
    return _encode_values([key(record) for record in records], hints)


def _encode_values(values: list[Any], hints: bool) -> tuple[pa.Array, pa.Array | None]:
    """`encode` (and `hint`) of each value; all-int, all-float or all-str values (the usual keys) are
    encoded column-wise."""
    kinds = set(map(type, values))
    if len(kinds) == 1 and (kinds <= {int, str, float}):
        arrow_type = {int: pa.int64(), float: pa.float64(), str: pa.large_string()}[kinds.pop()]
        try:
            array = pa.array(values, arrow_type)
        except (pa.ArrowException, OverflowError, UnicodeError):
            pass  # an int beyond 64 bits, a lone surrogate: the generic encoding below
        else:
            return encode_keys(array, hints=hints)
    return binary_array(list(map(encode, values))), binary_array(list(map(hint, values))) if hints else None


def _empty_binary(n: int) -> pa.Array:
    return pa.Array.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int64)), pa.py_buffer(b"")]
    )


def _hash_array(keys: pa.Array) -> np.ndarray:
    """`key_hash` of each encoded key, computed once per distinct key of the array. The hash function
    itself is mapped, not `key_hash`: its Python frame cost more than the hash (~70 vs ~30 ns a key)."""
    encoded = pc.dictionary_encode(keys, memory_pool=SHUFFLE_POOL)
    distinct = encoded.dictionary.to_pylist()
    hashes = np.fromiter(map(KEY_HASH, distinct), np.uint64, len(distinct))
    return hashes[encoded.indices.to_numpy(zero_copy_only=False)]
