"""Logical operations: the small frozen dataclasses a lazy `Dataset` is made of.

Sources produce shards; narrow ops transform one shard's stream and fuse into one generator; wide ops
(`GroupBy`, `Join`, `Reshard`) are shuffle boundaries; sinks end a pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Source",
    "ListSource",
    "IterableSource",
    "FilesSource",
    "Map",
    "FlatMap",
    "Filter",
    "Select",
    "MapBatches",
    "MapShard",
    "TakePerShard",
    "NarrowOp",
    "GroupBy",
    "Join",
    "Reshard",
    "Sink",
    "op_name",
]


# ----------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class ListSource:
    """In-memory records, split into `num_shards` contiguous chunks (None: one per worker)."""

    records: tuple[Any, ...]
    num_shards: int | None = None


@dataclass(frozen=True)
class IterableSource:
    """`shard_fn(shard_index)` yields the records of that shard, inside the worker."""

    shard_fn: Callable[[int], Iterable[Any]]
    num_shards: int


@dataclass(frozen=True)
class FilesSource:
    """One shard per file. `filter`/`columns` are pushed into the reader where the format allows."""

    patterns: tuple[str, ...]
    format: str | None = None
    columns: tuple[str, ...] | None = None
    filter: Any = None  # zephyr.engine.expr.Expr
    on_bad_record: str = "raise"


Source = ListSource | IterableSource | FilesSource


# ------------------------------------------------------------------------------------- narrow ops
@dataclass(frozen=True)
class Map:
    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class FlatMap:
    fn: Callable[[Any], Iterable[Any]]


@dataclass(frozen=True)
class Filter:
    predicate: Any  # a callable record -> bool, or an Expr


@dataclass(frozen=True)
class Select:
    columns: tuple[str, ...]


@dataclass(frozen=True)
class MapBatches:
    fn: Callable[[Any], Any]  # pyarrow.RecordBatch -> pyarrow.RecordBatch | pyarrow.Table
    batch_size: int = 1024


@dataclass(frozen=True)
class MapShard:
    fn: Callable[[Iterable[Any]], Iterable[Any]]


@dataclass(frozen=True)
class TakePerShard:
    n: int


NarrowOp = Map | FlatMap | Filter | Select | MapBatches | MapShard | TakePerShard


# --------------------------------------------------------------------------------------- wide ops
@dataclass(frozen=True)
class GroupBy:
    key: Callable[[Any], Any]
    reducer: Callable[[Any, Iterable[Any]], Any]
    sort_by: Callable[[Any], Any] | None = None
    combiner: Callable[[Any, Iterable[Any]], Any] | None = None
    num_shards: int | None = None


@dataclass(frozen=True)
class Join:
    right: Any  # the right-hand Dataset
    left_key: Callable[[Any], Any]
    right_key: Callable[[Any], Any]
    how: str = "inner"
    combine: Callable[[Any, Any], Any] | None = None
    num_shards: int | None = None


@dataclass(frozen=True)
class Reshard:
    num_shards: int


# ------------------------------------------------------------------------------------------ sinks
@dataclass(frozen=True)
class Sink:
    """Write each shard to `pattern.format(shard=i, total=n)` atomically; with `partition_by`, one
    file per shard and value of that field, named by `pattern.format(shard=i, total=n, <field>=value)`."""

    pattern: str
    format: str
    skip_existing: bool = False
    partition_by: str | None = None


def op_name(op: Any) -> str:
    """A short human name for plans and progress: `map(clean_text)`, `group_by(key=doc_hash)`."""
    fn = getattr(op, "fn", None) or getattr(op, "predicate", None) or getattr(op, "key", None)
    label = type(op).__name__
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in label).lstrip("_")
    if isinstance(op, Select):
        return f"select({', '.join(op.columns)})"
    if isinstance(op, TakePerShard):
        return f"take_per_shard({op.n})"
    if isinstance(op, Reshard):
        return f"reshard({op.num_shards})"
    if isinstance(op, Sink):
        return f"write_{op.format}({op.pattern})"
    if isinstance(op, Join):
        return f"join({op.how})"
    if fn is None:
        return snake
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    if callable(fn) and name in ("<lambda>",):
        name = "lambda"
    elif not callable(fn):
        name = repr(fn)
    return f"{snake}({name})"


def describe_columns(columns: Sequence[str] | None) -> str:
    return "*" if columns is None else ", ".join(columns)
