"""The ops a differential example chains, each twice: as the engine runs it (picklable callables, so the
processes backend ships them) and as plain Python computes it (the reference).

Records are dicts with fields `i` (an id), `k` (a key), `s` (a sort key), `x` (an int) and `v` (a nested
payload); any but `i` may be missing (a field read as None, as `col` reads it). The reference follows
the documented rules, written from values, not from the engine's byte encoding:

- keys are equal as Python's `==` says (1, 1.0 and True one key), and all NaNs are one key;
- sort keys order by value: None first, numbers (NaN after inf), str, bytes, tuples element by
  element; two non-None sort keys of kinds Python cannot compare, meeting in that order, are an error;
- narrow ops keep record order; after a shuffle the order is unknown, so results are compared as
  multisets, and an op whose result depends on order (deduplicate's first record, take) is checked
  exactly only while the order is known.

Reducers report what does not depend on the order of ties (a count, a sum, the smallest id, the sort
keys in group order written type-blind by `norm`), so equal numbers of different types may tie in any
order without changing a result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from zephyr import Dataset

# ----------------------------------------------------------------------------------- values


def norm(value: Any) -> str:
    """A type-blind text of a value: equal numbers (1, 1.0, True) give the same text; NaN one text."""
    if value is None:
        return "None"
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "n:nan" if value != value else ("n:inf" if value > 0 else "n:-inf")
        return f"n:{Fraction(value)}"
    if isinstance(value, str):
        return "s:" + value.encode("utf-8", "surrogatepass").hex()
    if isinstance(value, bytes):
        return "b:" + value.hex()
    if isinstance(value, tuple | list):
        return "(" + ",".join(map(norm, value)) + ")"
    return repr(value)


def canon(value: Any) -> str:
    """An exact text of a record (types kept: 1, 1.0 and True differ; -0.0 is not 0.0), for multisets."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{canon(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        inner = ",".join(map(canon, value))
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, float):
        return f"f:{value!r}"
    return f"{type(value).__name__}:{value!r}"


class _NaN:
    def __repr__(self) -> str:
        return "NaN"


NAN_KEY = _NaN()


def ref_key(value: Any) -> Any:
    """A group key as the reference's dict sees it: Python's equality, with every NaN one key."""
    if isinstance(value, float) and value != value:
        return NAN_KEY
    if isinstance(value, tuple | list):
        return tuple(map(ref_key, value))
    return value


_KIND_RANK = {"none": 0, "number": 1, "str": 2, "bytes": 3, "tuple": 4}


def kind(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool | int | float):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, tuple | list):
        return "tuple"
    return "other"


def ref_order(value: Any) -> tuple:
    """A sort key for Python's `sorted` giving the documented order (kinds ranked, NaN after inf)."""
    k = kind(value)
    if k == "number":
        return (1, 1) if value != value else (1, 0, value)
    if k == "tuple":
        return (4, tuple(map(ref_order, value)))
    if k in ("str", "bytes"):
        return (_KIND_RANK[k], value)
    return (_KIND_RANK.get(k, 9),)


def comparable(a: Any, b: Any) -> bool:
    """Whether Python can order a against b under the documented rule (None orders with anything;
    tuples are compared at their first differing element)."""
    if a is None or b is None:
        return True
    ka, kb = kind(a), kind(b)
    if ka != kb or ka == "other":
        return False
    if ka != "tuple":
        return True
    for x, y in zip(a, b, strict=False):
        if ref_key(x) != ref_key(y) or kind(x) != kind(y):
            return comparable(x, y)
    return True


class Unorderable(Exception):
    """The reference's verdict: the engine must refuse these sort keys (UnorderableKeysError)."""


class FieldAbsent(Exception):
    """The reference's verdict: a key or sort key named by field reads a field no record has, which the
    engine refuses as a likely typo (BadInputError; zephyr.engine.absent_fields)."""


def require_fields(records: list[dict], *names: str) -> None:
    for name in names:
        if records and not any(name in r for r in records):
            raise FieldAbsent(name)


def ref_sorted(values: list[Any]) -> list[Any]:
    """`values` in the documented order; Unorderable when two neighbours cannot be compared."""
    ordered = sorted(values, key=ref_order)
    for a, b in zip(ordered, ordered[1:], strict=False):
        if not comparable(a, b):
            raise Unorderable(f"{a!r} and {b!r}")
    return ordered


# --------------------------------------------------------------------- engine-side callables


@dataclass(frozen=True)
class Field:
    """`record.get(name)`: a key function (the engine also gets field names as strings)."""

    name: str

    def __call__(self, record: dict) -> Any:
        return record.get(self.name)


def _x(record: dict) -> int:
    x = record.get("x")
    return x if type(x) is int else 0


@dataclass(frozen=True)
class AddM:
    factor: int

    def __call__(self, record: dict) -> dict:
        return {**record, "m": _x(record) * self.factor}


@dataclass(frozen=True)
class KeepX:
    residue: int

    def __call__(self, record: dict) -> bool:
        return _x(record) % 3 != self.residue


@dataclass(frozen=True)
class Copies:
    modulus: int

    def __call__(self, record: dict) -> list[dict]:
        return [{**record, "c": j} for j in range(_x(record) % self.modulus)]


@dataclass(frozen=True)
class Summarize:
    """Reducer: count, sum of x, smallest id, and (with a sort field) the sort keys in group order."""

    sort_field: str | None

    def __call__(self, key: Any, items: Iterable[dict]) -> dict:
        items = list(items)
        sorts = [norm(r.get(self.sort_field)) for r in items] if self.sort_field else None
        return {"i": min(r["i"] for r in items), "k": norm(key), "x": sum(map(_x, items)), "s": len(items), "v": sorts}


def partial_counts(key: Any, items: Iterable[dict]) -> Iterator[dict]:
    """Combiner: one partial (smallest id, sum of x, count) per key and flush. Its input is records (map
    side, `i`/`x`) or earlier partials; both carry `i` and `x`, partials also `n`."""
    items = list(items)
    yield {"i": min(r["i"] for r in items), "x": sum(map(_x, items)), "n": sum(r.get("n", 1) for r in items)}


def total_counts(key: Any, items: Iterable[dict]) -> dict:
    items = list(items)
    return {
        "i": min(r["i"] for r in items),
        "k": norm(key),
        "x": sum(map(_x, items)),
        "s": sum(r["n"] for r in items),
        "v": None,
    }


# --------------------------------------------------------------------------------- reference


@dataclass
class Ref:
    """The reference's dataset: its records, and whether their order is known (no shuffle since the source)."""

    records: list[dict]
    ordered: bool = True
    sorted_by: tuple[str, bool] | None = None  # (field, descending) of the last sort, while only narrow ops followed


# ---------------------------------------------------------------------------------------- ops


@dataclass(frozen=True)
class Map:
    factor: int

    def apply(self, ds: Dataset) -> Dataset:
        return ds.map(AddM(self.factor))

    def reference(self, ref: Ref) -> Ref:
        return Ref(list(map(AddM(self.factor), ref.records)), ref.ordered, ref.sorted_by)


@dataclass(frozen=True)
class Filter:
    residue: int

    def apply(self, ds: Dataset) -> Dataset:
        return ds.filter(KeepX(self.residue))

    def reference(self, ref: Ref) -> Ref:
        return Ref(list(filter(KeepX(self.residue), ref.records)), ref.ordered, ref.sorted_by)


@dataclass(frozen=True)
class FlatMap:
    modulus: int

    def apply(self, ds: Dataset) -> Dataset:
        return ds.flat_map(Copies(self.modulus))

    def reference(self, ref: Ref) -> Ref:
        return Ref([out for r in ref.records for out in Copies(self.modulus)(r)], ref.ordered, ref.sorted_by)


@dataclass(frozen=True)
class GroupBy:
    by_name: bool  # "k" (a column, Arrow-friendly) or Field("k") (a function)
    sort_field: str | None
    combiner: bool
    num_shards: int

    def apply(self, ds: Dataset) -> Dataset:
        key = "k" if self.by_name else Field("k")
        if self.combiner:
            return ds.group_by(key, total_counts, combiner=partial_counts, num_shards=self.num_shards)
        sort_by = None if self.sort_field is None else (self.sort_field if self.by_name else Field(self.sort_field))
        return ds.group_by(key, Summarize(self.sort_field), sort_by=sort_by, num_shards=self.num_shards)

    def reference(self, ref: Ref) -> Ref:
        if self.by_name:
            require_fields(ref.records, "k", *([self.sort_field] if self.sort_field else []))
        groups: dict[Any, list[dict]] = {}
        for r in ref.records:
            groups.setdefault(ref_key(r.get("k")), []).append(r)
        out = []
        for members in groups.values():
            key = members[0].get("k")
            if self.combiner:
                out.append(total_counts(key, [{**r, "n": 1} for r in members]))
                continue
            if self.sort_field is not None:
                values = ref_sorted([r.get(self.sort_field) for r in members])  # may raise Unorderable
                members = sorted(members, key=lambda r: ref_order(r.get(self.sort_field)))
                assert [norm(v) for v in values] == [norm(r.get(self.sort_field)) for r in members]
            out.append(Summarize(self.sort_field)(key, members))
        return Ref(out, ordered=False)


@dataclass(frozen=True)
class Deduplicate:
    by_name: bool
    num_shards: int

    def apply(self, ds: Dataset) -> Dataset:
        return ds.deduplicate("k" if self.by_name else Field("k"), num_shards=self.num_shards)

    def reference(self, ref: Ref) -> Ref:
        assert ref.ordered, "deduplicate keeps the first record in input order: only generated while it is known"
        if self.by_name:
            require_fields(ref.records, "k")
        first: dict[Any, dict] = {}
        for r in ref.records:
            first.setdefault(ref_key(r.get("k")), r)
        return Ref(list(first.values()), ordered=False)


@dataclass(frozen=True)
class Join:
    how: str
    right: tuple[dict, ...]
    right_shards: int
    num_shards: int

    def apply(self, ds: Dataset) -> Dataset:
        right = Dataset.from_list(list(self.right), num_shards=self.right_shards)
        return ds.sorted_merge_join(
            right, left_key=Field("k"), right_key=Field("k"), how=self.how, num_shards=self.num_shards
        )

    def reference(self, ref: Ref) -> Ref:
        out = []
        for left in ref.records:
            matches = [r for r in self.right if ref_key(r.get("k")) == ref_key(left.get("k"))]
            out += [{**left, **r} for r in matches]
            if not matches and self.how == "left":
                out.append(left)
        return Ref(out, ordered=False)


@dataclass(frozen=True)
class Sort:
    field: str
    by_name: bool
    descending: bool
    num_shards: int | None

    def apply(self, ds: Dataset) -> Dataset:
        key = self.field if self.by_name else Field(self.field)
        return ds.sort(key, descending=self.descending, num_shards=self.num_shards, samples_per_shard=4)

    def reference(self, ref: Ref) -> Ref:
        if self.by_name:
            require_fields(ref.records, self.field)
        ref_sorted([r.get(self.field) for r in ref.records])  # may raise Unorderable
        ordered = sorted(ref.records, key=lambda r: ref_order(r.get(self.field)), reverse=self.descending)
        return Ref(ordered, ordered=False, sorted_by=(self.field, self.descending))


@dataclass(frozen=True)
class Union:
    other: tuple[dict, ...]
    other_shards: int
    num_shards: int | None

    def apply(self, ds: Dataset) -> Dataset:
        return ds.union(Dataset.from_list(list(self.other), num_shards=self.other_shards), num_shards=self.num_shards)

    def reference(self, ref: Ref) -> Ref:
        return Ref(ref.records + list(self.other), ordered=False)


@dataclass(frozen=True)
class Reshard:
    num_shards: int

    def apply(self, ds: Dataset) -> Dataset:
        return ds.reshard(self.num_shards)

    def reference(self, ref: Ref) -> Ref:
        return Ref(ref.records, ordered=False)


NARROW = (Map, Filter, FlatMap)


@dataclass(frozen=True)
class Example:
    """One differential case: the source, the chain, how it runs, and how it ends (collect or take(n))."""

    records: tuple[dict, ...]
    shards: int
    chain: tuple[Any, ...]
    backend: str = "local"
    memory: str = "16MB"
    tiny_buffers: bool = False  # local only: flushes, run batches and merge fan-in cut small (spills)
    take: int | None = None
    source: str = "list"  # or "parquet": one file per shard, read column-wise (Arrow batches, typed columns)

    def source_records(self, folder: str) -> tuple[list[dict], Dataset]:
        """The source records as the engine reads them, and the dataset reading them: `from_list`, or
        parquet files (one per shard's chunk) when every chunk converts to an Arrow table (then each
        file types its own columns: ints in one, floats in the next). The reference gets the records as
        parquet gives them back (a field some records of a file lack reads as None there)."""
        records = list(self.records)
        if self.source == "parquet" and records:
            import pyarrow as pa
            import pyarrow.parquet as pq

            n = len(records)
            chunks = [records[n * i // self.shards : n * (i + 1) // self.shards] for i in range(self.shards)]
            paths = [f"{folder}/part-{i:03d}.parquet" for i, chunk in enumerate(chunks) if chunk]
            try:
                for chunk, path in zip([c for c in chunks if c], paths, strict=True):
                    pq.write_table(pa.Table.from_pylist(chunk), path)
            except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeError):
                pass  # a field of mixed types, an int beyond 64 bits, a lone surrogate, an empty struct
            else:
                read = [record for path in paths for record in pq.read_table(path).to_pylist()]
                return read, Dataset.from_files(f"{folder}/*.parquet")
        return records, Dataset.from_list(records, num_shards=self.shards)

    def build(self, source: Dataset) -> Dataset:
        for op in self.chain:
            source = op.apply(source)
        return source

    def reference(self, records: list[dict]) -> Ref:
        ref = Ref(records)
        for op in self.chain:
            ref = op.reference(ref)
        return ref
