"""Declarative aggregation (`Dataset.aggregate`): per key, the size, count, sum, mean, min, max, first and last
of fields, folded column by column on both sides of the shuffle.

Why: `group_by` with a Python reducer pays, per record, a dict on the reduce side and a key encoded for
Python's order on the map side (10M records, 1M keys: ~0.27x polars, benchmarks/engine_groupby.py). The
aggregations a data team runs most (documents per domain, first and last by timestamp, sums) need none of
it: every step is a vectorized operation on Arrow columns. The map side folds each buffer of rows into one
partial row per key (a combiner for free: a key with many rows in a shard ships one row), and the reduce
side folds its targets' partial rows the same way and keeps the outputs.

A partial row holds the key field, then for each output `name` its state:
    size, count: name (int64)             sum, min, max: name (null while no non-null value was seen)
    mean: name (the float64 sum) and `name#n` (the values summed)
    first, last: name (the chosen row's value)
and for each of first and last that some output uses, the chosen row's `#first.order` (where it came in the
input: map shard << 40 | row within the shard) and, with sort_by, `#first.sort` (its sort value): every
output of a pick takes the same row, so they share it (and the fold finds it once).
A record is a partial row of its own (`unit_partials`), and folding partial rows is associative and
commutative, so one fold serves both sides: `fold_columnar` on Arrow tables (keys of int, str or bytes
columns; sort keys and values numeric, str or bytes where compared) and `fold_python` on dicts for
everything else, with Python's semantics (1, 1.0 and True are one key; None sorts first, NaN last).

Targets: `key_hashes` (fmix64 of an int key, xxh3 of a str or bytes key) routes a key the same way from
either fold, so one key always lands in one target. The runs are the shuffle's own (RUN_SCHEMA, sorted by
target and the key hash's top byte), so reduce planning, splitting and resume work unchanged; the reduce
side reads them unordered (no merge) and folds in memory, a key-hash range at a time when a piece is larger
than its budget (`shuffle.aggregate_runs`: the writer and the read). Measured (engine_groupby.py, 10M
records, 1M keys, 2 workers of 512 MB): 3.4 s beside polars' 3.0 s (0.88x; group_by with a Python reducer
12.1 s), peak worker RSS 558 MB; in a fresh clone's build on a quiet machine 0.90-0.92x.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from zephyr.engine.shuffle.runs import SHUFFLE_POOL
from zephyr.engine.shuffle.scatter import field_array
from zephyr.engine.sortkey import encode
from zephyr.fmix64 import fmix64

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "array_of",
    "as_rows",
    "empty",
    "finished",
    "fold",
    "fold_columnar",
    "fold_python",
    "key_column",
    "key_hash",
    "key_hashes",
    "raw_rows",
    "unit_partial",
    "unit_partials",
]

AGGREGATIONS = ("size", "count", "sum", "mean", "min", "max", "first", "last")
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Aggregation:
    """What `Dataset.aggregate` computes: per `key` field, `outputs` (name, how, field) in order."""

    key: str
    outputs: tuple[tuple[str, str, str], ...]
    sort_by: str | None = None

    @classmethod
    def declared(cls, key: str, sort_by: str | None, outputs: dict[str, Any]) -> Aggregation:
        """`Dataset.aggregate`'s arguments checked (a TypeError or ValueError naming the output and a form
        that works) and turned into an Aggregation."""
        if not isinstance(key, str) or (sort_by is not None and not isinstance(sort_by, str)):
            raise TypeError(f"aggregate takes field names as key and sort_by, got key={key!r}, sort_by={sort_by!r}")
        if not outputs:
            raise ValueError(f'aggregate needs at least one output, e.g. n=("{key}", "size")')
        specs = []
        for name, spec in outputs.items():
            if not (isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(s, str) for s in spec)):
                raise TypeError(f'aggregate output {name}= takes (field, how), e.g. ("ts", "max"); got {spec!r}')
            source, how = spec
            if how not in AGGREGATIONS:
                raise ValueError(f"aggregate output {name}=: how must be one of {', '.join(AGGREGATIONS)}; got {how!r}")
            if name == key or "#" in name:
                raise ValueError(f"aggregate output name {name!r} is the key field or holds '#' (kept for its state)")
            specs.append((name, how, source))
        return cls(key, tuple(specs), sort_by)

    def fields(self) -> list[str]:
        """The fields the aggregation reads, each once: the key, the sort key, the outputs' fields."""
        needed = [self.key, self.sort_by, *(source for _, how, source in self.outputs if how != "size")]
        return list(dict.fromkeys(name for name in needed if name is not None))

    def value_columns(self) -> set[str]:
        """The fields read by value (`absent_fields.fields_read`): a shard where no record has one is noted, and
        a stage where none has it fails, as a typo (`aggregate("usr", ...)` would make one key of None)."""
        return set(self.fields())

    def picks(self) -> tuple[str, ...]:
        """Which of "first" and "last" some output uses: each keeps one chosen row's order (and sort value)."""
        return tuple(how for how in ("first", "last") if any(h == how for _, h, _ in self.outputs))

    def state_names(self) -> list[str]:
        """The columns of a partial row: the key, each output's value, then per pick its row's order (and
        sort value), shared by every output of that pick (they all take the same row)."""
        names = [self.key]
        for name, how, _ in self.outputs:
            names += [name, f"{name}#n"] if how == "mean" else [name]
        for how in self.picks():
            names.append(f"#{how}.order")
            if self.sort_by is not None:
                names.append(f"#{how}.sort")
        return names


# ------------------------------------------------------------------------------------- key hashes
def key_hash(key: Any) -> int:
    """The target hash of one key as `key_hashes` computes it for a column: ints (and bools, and floats
    equal to an int) by value, str and bytes by their bytes, None 0, anything else by its canonical bytes."""
    if key is None:
        return 0
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    if isinstance(key, int) and -(1 << 63) <= key <= _INT64_MAX:
        return int(fmix64(np.array([key], np.int64).view(np.uint64))[0])
    if isinstance(key, str):
        return xxhash.xxh3_64_intdigest(key.encode("utf-8", "surrogatepass"))
    if isinstance(key, bytes):
        return xxhash.xxh3_64_intdigest(key)
    return xxhash.xxh3_64_intdigest(encode(key))


def key_hashes(keys: pa.Array) -> np.ndarray:
    """Per key of a normalized key column (`key_column`): its target hash, as `key_hash` gives it."""
    if pa.types.is_int64(keys.type):
        # fmix64 mixes in place, so on a copy: to_numpy is a read-only view of the Arrow buffer
        hashes = fmix64(keys.fill_null(0).to_numpy().view(np.uint64).copy())
    else:  # str and bytes by their (UTF-8) bytes
        data = keys.cast(pa.large_binary()).fill_null(b"").to_pylist()
        hashes = np.fromiter(map(xxhash.xxh3_64_intdigest, data), np.uint64, len(keys))
    if keys.null_count:
        hashes[keys.is_null().to_numpy(zero_copy_only=False)] = 0
    return hashes


# ----------------------------------------------------------------------------------- columnar fold
def key_column(column: pa.Array) -> pa.Array | None:
    """The key column in the one type each kind of key has across runs (int64, large_string,
    large_binary; all-null as large_string), or None when the kind is folded in Python (floats, bools,
    dates, nested values: their equality follows Python's, e.g. 1.0 == 1 == True)."""
    kind = column.type
    if pa.types.is_integer(kind):
        if pa.types.is_uint64(kind) and (pc.max(column).as_py() or 0) > _INT64_MAX:
            return None
        return column.cast(pa.int64())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column.cast(pa.large_string())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return column.cast(pa.large_binary())
    if pa.types.is_null(kind):
        return column.cast(pa.large_string())
    return None


def _filled(column: pa.Array) -> np.ndarray:
    """A numeric column as NumPy with nulls as 0 (to_numpy would turn an int column with nulls to floats)."""
    return column.fill_null(pa.scalar(0, column.type)).to_numpy(zero_copy_only=False)


def _numeric(column: pa.Array) -> bool:
    return pa.types.is_integer(column.type) or pa.types.is_floating(column.type)


def _comparable(column: pa.Array) -> bool:
    """A column `fold_columnar` compares (min, max, sort keys): numbers, str and bytes."""
    kind = column.type
    textual = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return _numeric(column) or any(check(kind) for check in textual)


def _group_extreme(groups: np.ndarray, count: int, column: pa.Array, how: str) -> pa.Array:
    """Per group, the min or max of the column's non-null values (null for a group with none), in
    Python's order: NaN above every number (a max is NaN when the group holds one, a min only when all are)."""
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    if _numeric(column):
        values = _filled(column)
        floating = values.dtype.kind == "f"
        if floating:  # fmin skips NaN; maximum keeps it
            values = values.astype(np.float64, copy=False)
            out = np.full(count, np.inf if how == "min" else -np.inf)
            with np.errstate(invalid="ignore"):  # NaN is a value here, not an accident
                (np.fmin if how == "min" else np.maximum).at(out, groups[valid], values[valid])
            if how == "min":
                numbers = valid & ~np.isnan(values)
                out[(np.bincount(groups[numbers], minlength=count) == 0)] = np.nan
        else:  # in the column's own int type (a uint64 above 2**63 stays itself)
            limits = np.iinfo(values.dtype)
            out = np.full(count, limits.max if how == "min" else limits.min, values.dtype)
            (np.minimum if how == "min" else np.maximum).at(out, groups[valid], values[valid])
        seen = np.bincount(groups[valid], minlength=count) > 0
        return pa.array(out, mask=~seen).cast(column.type)
    table = pa.table({"g": pa.array(groups[valid]), "v": column.filter(pa.array(valid))})
    folded = table.group_by("g", use_threads=False).aggregate([("v", how)])  # str, bytes: Arrow's hash min/max
    position = np.full(count, -1, np.int64)
    position[folded["g"].to_numpy()] = np.arange(folded.num_rows)
    return array_of(folded[f"v_{how}"]).take(pa.array(position, mask=position < 0))


def _chosen_rows(
    groups: np.ndarray, count: int, order: np.ndarray, sort: pa.Array | None, how: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the row `first` (or `last`) picks: the lowest (highest) sort value in Python's order
    (None lowest, NaN highest), ties going to the lowest (highest) input order. Returns (row, order)."""
    lowest = how == "first"
    candidate = None
    if sort is not None:
        null = sort.is_null().to_numpy(zero_copy_only=False) if sort.null_count else None
        nan = None
        if pa.types.is_floating(sort.type):
            nan = pc.fill_null(pc.is_nan(sort), False).to_numpy(zero_copy_only=False)
            nan = nan if nan.any() else None
        if null is None and nan is None and _numeric(sort):  # the common case: plain numbers, in NumPy
            values = sort.to_numpy(zero_copy_only=False)
            extreme = np.full(count, values.max() if lowest else values.min(), values.dtype)
            (np.minimum if lowest else np.maximum).at(extreme, groups, values)
            candidate = values == extreme[groups]
        else:
            absent = np.zeros(len(groups), bool)
            null = absent if null is None else null
            nan = absent if nan is None else nan
            extreme_near = null if lowest else nan  # None sorts below everything, NaN above
            extreme_far = nan if lowest else null
            has_near = np.bincount(groups[extreme_near], minlength=count) > 0
            plain = ~(null | nan)
            has_plain = np.bincount(groups[plain], minlength=count) > 0
            ordinary = pc.if_else(pa.array(plain), sort, pa.nulls(len(sort), sort.type))
            extreme_value = _group_extreme(groups, count, ordinary, "min" if lowest else "max")
            equal = pc.equal(ordinary, extreme_value.take(pa.array(groups)))
            matches = pc.fill_null(equal, False).to_numpy(zero_copy_only=False)
            candidate = np.where(has_near[groups], extreme_near, np.where(has_plain[groups], matches, extreme_far))
    chosen_order = np.full(count, np.iinfo(np.int64).max if lowest else -1, np.int64)
    if candidate is None:
        rows = np.arange(len(groups))
        (np.minimum if lowest else np.maximum).at(chosen_order, groups, order)
    else:
        rows = np.flatnonzero(candidate)
        (np.minimum if lowest else np.maximum).at(chosen_order, groups[rows], order[rows])
    rows = rows[order[rows] == chosen_order[groups[rows]]]
    chosen = np.empty(count, np.int64)
    chosen[groups[rows]] = rows
    return chosen, chosen_order


def array_of(column: pa.ChunkedArray) -> pa.Array:
    """A table column as one array (its only chunk as it is; several combined)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def fold_columnar(partials: pa.Table, spec: Aggregation) -> pa.Table | None:
    """Partial rows folded to one per key (in order of first appearance), or None when a column's type is
    one `fold_python` handles (see `key_column`, `_comparable`). `fold` hands it combined columns, so
    `array_of` copies nothing here; a first/last value is taken at its chosen rows only."""
    keys = key_column(array_of(partials.column(spec.key)))
    if keys is None:
        return None
    if not partials.num_rows:
        return partials.select(spec.state_names())
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    groups = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    count = len(encoded.dictionary)
    columns: dict[str, Any] = {spec.key: encoded.dictionary}
    chosen: dict[str, np.ndarray] = {}
    for how in spec.picks():
        sort = array_of(partials.column(f"#{how}.sort")) if spec.sort_by is not None else None
        if sort is not None and not _comparable(sort):
            return None
        order = array_of(partials.column(f"#{how}.order")).to_numpy()
        rows, chosen_order = _chosen_rows(groups, count, order, sort, how)
        chosen[how] = rows
        columns[f"#{how}.order"] = pa.array(chosen_order)
        if sort is not None:
            columns[f"#{how}.sort"] = sort.take(pa.array(rows))
    for name, how, _ in spec.outputs:
        state = partials.column(name)
        if how in ("first", "last"):
            columns[name] = array_of(state).take(pa.array(chosen[how]))
            continue
        state = array_of(state)
        if how in ("size", "count"):
            out = np.zeros(count, np.int64)
            np.add.at(out, groups, state.fill_null(0).to_numpy().astype(np.int64, copy=False))
            columns[name] = pa.array(out)
        elif how in ("sum", "mean"):
            summed = _group_sum(groups, count, state) if _numeric(state) else None
            if summed is None:
                return None
            columns[name] = summed
            if how == "mean":
                values = np.zeros(count, np.int64)
                np.add.at(values, groups, array_of(partials.column(f"{name}#n")).to_numpy())
                columns[f"{name}#n"] = pa.array(values)
        else:
            if not _comparable(state):
                return None
            columns[name] = _group_extreme(groups, count, state, how)
    return pa.table({name: columns[name] for name in spec.state_names()})


def _group_sum(groups: np.ndarray, count: int, column: pa.Array) -> pa.Array | None:
    """Per group, the sum of the non-null values (null for a group with none); None when an int sum could
    leave int64 (its absolute values add up to 2**62 or more): the Python fold then sums exactly."""
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    values = _filled(column)[valid]
    seen = np.bincount(groups[valid], minlength=count) > 0
    if values.dtype.kind == "f":
        out = np.zeros(count, np.float64)
        np.add.at(out, groups[valid], values.astype(np.float64))
        return pa.array(out, mask=~seen)
    out = np.zeros(count, np.int64)
    np.add.at(out, groups[valid], values.astype(np.int64))
    magnitude = np.zeros(count, np.float64)
    np.add.at(magnitude, groups[valid], np.abs(values.astype(np.float64)))
    if (magnitude >= 2.0**62).any():  # a partial sum may have wrapped around: never trust it
        return None
    return pa.array(out, mask=~seen)


# ------------------------------------------------------------------------------------- Python fold
def _rank(value: Any) -> tuple:
    """A sort value's place in Python's order as the engine sorts: None first, NaN last."""
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (2,)
    return (1, value)


def _lower(a: Any, b: Any, name: str) -> bool:
    try:
        return _rank(a) < _rank(b)
    except TypeError:
        raise TypeError(
            f"aggregate: {name!r} compares {a!r} ({type(a).__name__}) with {b!r} ({type(b).__name__}) within "
            "one key, which Python cannot order; give the field one type (e.g. map it to str)"
        ) from None


def _added(total: Any, value: Any, name: str) -> Any:
    if not isinstance(total, int | float) or not isinstance(value, int | float):
        raise TypeError(
            f"aggregate: {name!r} sums {total!r} ({type(total).__name__}) and {value!r} ({type(value).__name__}); "
            "sum and mean take numbers (None is skipped): map the field to a number first"
        )
    return total + value


def fold_python(rows: list[dict], spec: Aggregation) -> list[dict]:
    """Partial rows folded to one per key with Python's equality (1, 1.0 and True are one key, kept as
    the first row had it), in order of first appearance: what `fold_columnar` computes, for any values."""
    folded: dict[bytes, dict] = {}
    picks = {how: [name for name, h, _ in spec.outputs if h == how] for how in spec.picks()}
    for row in rows:
        key = encode(row[spec.key])
        state = folded.get(key)
        if state is None:
            folded[key] = dict(row)
            continue
        for name, how, _ in spec.outputs:
            value = row[name]
            if how in ("size", "count"):
                state[name] += value
            elif value is None or how in ("first", "last"):
                continue
            elif how in ("sum", "mean"):
                state[name] = value if state[name] is None else _added(state[name], value, name)
                if how == "mean":
                    state[f"{name}#n"] += row[f"{name}#n"]
            else:
                old = state[name]
                if old is None or (_lower(value, old, name) if how == "min" else _lower(old, value, name)):
                    state[name] = value
        for how, names in picks.items():
            sort, order = f"#{how}.sort", f"#{how}.order"
            mine, theirs = (_rank(state.get(sort)), state[order]), (_rank(row.get(sort)), row[order])
            try:
                better = theirs < mine if how == "first" else theirs > mine
            except TypeError:  # two sort values Python cannot order: say which
                better = _lower(row.get(sort), state.get(sort), spec.sort_by or "")
            if better:
                for column in (*names, order, sort):
                    if column in row:
                        state[column] = row[column]
    return list(folded.values())


# ------------------------------------------------------------------------------------ unit partials
def raw_rows(batch: pa.RecordBatch | pa.Table, spec: Aggregation, first_order: int) -> pa.Table:
    """The fields of a batch the aggregation reads (a missing one as nulls) and each row's `#order`
    (first_order, first_order + 1, ...): what a map side whose keys are mostly distinct ships instead of
    partial rows, which repeat a field once per output using it (1M keys in 10M records: 150 -> 104 bytes
    a row). `unit_partials` turns them into partial rows on the reduce side."""
    columns = {name: field_array(batch, name) for name in spec.fields()}
    columns["#order"] = pa.array(np.arange(first_order, first_order + batch.num_rows, dtype=np.int64))
    return pa.table(columns)


def unit_partials(raw: pa.Table, spec: Aggregation) -> pa.Table:
    """Rows of `raw_rows` as partial rows of their own."""
    n = raw.num_rows
    keys = array_of(raw.column(spec.key))
    columns: dict[str, Any] = {spec.key: key_column(keys) or keys}  # the types a fold gives
    for name, how, source in spec.outputs:
        if how == "size":
            columns[name] = pa.array(np.ones(n, np.int64))
            continue
        value = raw.column(source)
        if how in ("count", "mean"):
            valid = pa.array(array_of(value).is_valid().to_numpy(zero_copy_only=False).astype(np.int64))
            if how == "count":
                value = valid
            else:  # a mean sums as float64 (as polars' and NumPy's do), and counts what it summed
                columns[f"{name}#n"] = valid
                value = value.cast(pa.float64()) if _numeric(value) else value
        elif how == "sum" and _numeric(value):
            with contextlib.suppress(pa.ArrowInvalid):  # a uint64 beyond int64 stays: the Python fold sums it
                value = value.cast(pa.float64() if pa.types.is_floating(value.type) else pa.int64())
        columns[name] = value
    for how in spec.picks():
        columns[f"#{how}.order"] = raw.column("#order")
        if spec.sort_by is not None:
            columns[f"#{how}.sort"] = raw.column(spec.sort_by)
    return pa.table({name: columns[name] for name in spec.state_names()})  # the order a fold gives


def unit_partial(record: dict, spec: Aggregation, order: int) -> dict:
    """`unit_partials` for one record (of any shape)."""
    get = record.get if isinstance(record, dict) else (lambda _name: None)
    row = {spec.key: get(spec.key)}
    for name, how, source in spec.outputs:
        value = get(source)
        row[name] = 1 if how == "size" else int(value is not None) if how == "count" else value
        if how == "mean":
            row[f"{name}#n"] = int(value is not None)
    for how in spec.picks():
        row[f"#{how}.order"] = order
        if spec.sort_by is not None:
            row[f"#{how}.sort"] = get(spec.sort_by)
    return row


def finished(partials: pa.Table | list[dict], spec: Aggregation) -> Iterator[Any]:
    """The output records of folded partial rows: the key and the outputs (a mean divided by its count),
    without their state columns."""
    names = [spec.key, *(name for name, _, _ in spec.outputs)]
    means = [name for name, how, _ in spec.outputs if how == "mean"]
    if isinstance(partials, list):
        for row in partials:
            for name in means:
                row[name] = row[name] / row[f"{name}#n"] if row[f"{name}#n"] else None
            yield {name: row[name] for name in names}
        return
    for name in means:
        total, n = partials.column(name), partials.column(f"{name}#n")
        mean = pc.if_else(pc.greater(n, 0), pc.divide(total.cast(pa.float64()), n.cast(pa.float64())), None)
        partials = partials.set_column(partials.column_names.index(name), name, mean)
    yield from partials.select(names).to_batches()


def fold(tables: list[pa.Table], rows: list[dict] | None, spec: Aggregation) -> tuple[list[pa.Table], Any]:
    """Partial rows (`tables`, or Python `rows` once any are) folded: ([one table], None) when the columnar
    fold takes them, else ([], folded dicts)."""
    if rows is None and tables:
        try:
            whole = pa.concat_tables(tables).combine_chunks(memory_pool=SHUFFLE_POOL)
        except pa.ArrowInvalid:  # the runs' struct types differ after all: fold in Python
            whole = None
        folded = None if whole is None else fold_columnar(whole, spec)
        if folded is not None:
            return [folded], None
    if rows is None and not tables:
        return [], None
    return [], fold_python(as_rows(tables, rows), spec)


def as_rows(tables: list[pa.Table], rows: list[dict] | None) -> list[dict]:
    """`rows` (a new list when None) extended by the rows of `tables` as dicts: the Python fold's input."""
    out = [] if rows is None else rows
    for table in tables:
        out.extend(table.to_pylist())
    return out


def empty(spec: Aggregation) -> pa.Table:
    """No partial rows, with the state columns."""
    return pa.table({name: pa.array([], pa.null()) for name in spec.state_names()})
