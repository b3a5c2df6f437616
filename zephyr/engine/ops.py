"""Logical operations: the small frozen dataclasses a lazy `Dataset` is made of.

Sources produce shards; narrow ops transform one shard's stream and fuse into one generator; wide ops
(`GroupBy`, `Join`, `Reshard`) are shuffle boundaries; sinks end a pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
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
    "Aggregate",
    "Join",
    "Reshard",
    "Union",
    "Sink",
    "ShardSink",
    "op_name",
    "callable_name",
    "display_name",
    "preview",
]


# ----------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class ListSource:
    """In-memory records, split into `num_shards` contiguous chunks (None: one per worker)."""

    records: tuple[Any, ...]
    num_shards: int | None = None

    @property
    def name(self) -> str:
        return f"from_list({len(self.records)})"

    def __fingerprint__(self) -> Any:
        # the records themselves are fingerprinted per shard by the plan (as digests), not here
        return ["ListSource", self.num_shards, len(self.records)]


@dataclass(frozen=True)
class IterableSource:
    """`shard_fn(shard_index)` yields the records of that shard, inside the worker."""

    shard_fn: Callable[[int], Iterable[Any]]
    num_shards: int

    @property
    def name(self) -> str:
        return f"from_iterable({callable_name(self.shard_fn)})"


@dataclass(frozen=True)
class FilesSource:
    """One shard per file. `filter`/`columns` are pushed into the reader where the format allows."""

    patterns: tuple[str, ...]
    format: str | None = None
    columns: tuple[str, ...] | None = None
    filter: Any = None  # zephyr.engine.expr.Expr
    on_bad_record: str | None = None  # None: the execution config's

    @property
    def name(self) -> str:
        return f"read({', '.join(self.patterns)})"


Source = ListSource | IterableSource | FilesSource


# ------------------------------------------------------------------------------------- narrow ops
@dataclass(frozen=True)
class Map:
    """`Dataset.map`: every record replaced by `fn(record)`."""

    fn: Callable[[Any], Any]
    resources: Any = None  # zephyr.engine.resources.Resources: what a worker running it needs

    @property
    def name(self) -> str:
        return f"map({callable_name(self.fn)})"


@dataclass(frozen=True)
class FlatMap:
    """`Dataset.flat_map`: every record replaced by the zero or more records `fn(record)` returns or yields."""

    fn: Callable[[Any], Iterable[Any]]
    resources: Any = None  # zephyr.engine.resources.Resources: what a worker running it needs

    @property
    def name(self) -> str:
        return f"flat_map({callable_name(self.fn)})"


@dataclass(frozen=True)
class Filter:
    """`Dataset.filter`: records for which the predicate (a callable, or an `Expr` the reader can push down) is
    true."""

    predicate: Any  # a callable record -> bool, or an Expr

    @property
    def name(self) -> str:
        return f"filter({callable_name(self.predicate)})"


@dataclass(frozen=True)
class Select:
    """`Dataset.select`: only these fields of every dict record (pushed into columnar readers)."""

    columns: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"select({', '.join(self.columns)})"


@dataclass(frozen=True)
class MapBatches:
    """`Dataset.map_batches`: `fn` over Arrow record batches of up to `batch_size` rows (the columnar fast path)."""

    fn: Callable[[Any], Any]  # pyarrow.RecordBatch -> pyarrow.RecordBatch | pyarrow.Table
    batch_size: int = 1024
    resources: Any = None  # zephyr.engine.resources.Resources: what a worker running it needs

    @property
    def name(self) -> str:
        return f"map_batches({callable_name(self.fn)})"


@dataclass(frozen=True)
class MapShard:
    """`Dataset.map_shard`: `fn` over a whole shard's stream, for per-shard state (a model loaded once)."""

    fn: Callable[..., Iterable[Any]]
    resources: Any = None  # zephyr.engine.resources.Resources: what a worker running it needs
    with_context: bool = False  # fn(records, ShardContext) instead of fn(records)

    @property
    def name(self) -> str:
        return f"map_shard({callable_name(self.fn)})"


@dataclass(frozen=True)
class TakePerShard:
    """`Dataset.take_per_shard`: the first `n` records of every shard; a shard stops reading after them."""

    n: int

    @property
    def name(self) -> str:
        return f"take_per_shard({self.n})"


NarrowOp = Map | FlatMap | Filter | Select | MapBatches | MapShard | TakePerShard


# --------------------------------------------------------------------------------------- wide ops
@dataclass(frozen=True)
class GroupBy:
    """`Dataset.group_by` (also `deduplicate` and `sort`): a shuffle by key, the reducer called once per key on its
    records in `sort_by` order."""

    key: Callable[[Any], Any]
    reducer: Callable[[Any, Iterable[Any]], Any]
    sort_by: Callable[[Any], Any] | None = None
    combiner: Callable[[Any, Iterable[Any]], Any] | None = None
    num_shards: int | None = None
    batch: bool = False  # the reducer takes (key, iterator of pyarrow.RecordBatch)
    # range partitioning (Dataset.sort): target i gets the records whose encoded sort key falls in
    # [ranges[i-1], ranges[i]); None: targets by key hash
    ranges: tuple[bytes, ...] | None = None

    @property
    def name(self) -> str:
        return f"group_by({callable_name(self.key)})"


@dataclass(frozen=True)
class Aggregate:
    """`Dataset.aggregate`: per key field, named aggregations of fields, folded column-wise on both sides
    of a shuffle (`shuffle.aggregate`)."""

    aggregation: Any  # shuffle.aggregate.Aggregation
    num_shards: int | None = None

    @property
    def name(self) -> str:
        return f"aggregate({self.aggregation.key})"


@dataclass(frozen=True)
class Union:
    """Concatenate other datasets' records to this one's (a shuffle: every input is scattered round-robin)."""

    others: tuple[Any, ...]  # Datasets
    num_shards: int | None = None

    @property
    def name(self) -> str:
        return f"union({len(self.others) + 1} inputs)"


@dataclass(frozen=True)
class Join:
    """`Dataset.sorted_merge_join`: both sides shuffled by key, matching pairs combined (inner or left)."""

    right: Any  # the right-hand Dataset
    left_key: Callable[[Any], Any]
    right_key: Callable[[Any], Any]
    how: str = "inner"
    combine: Callable[[Any, Any], Any] | None = None
    num_shards: int | None = None

    @property
    def name(self) -> str:
        return f"join({self.how})"


@dataclass(frozen=True)
class Reshard:
    """`Dataset.reshard`: records dealt round-robin into `num_shards` shards (a shuffle)."""

    num_shards: int

    @property
    def name(self) -> str:
        return f"reshard({self.num_shards})"


# ------------------------------------------------------------------------------------------ sinks
@dataclass(frozen=True)
class Sink:
    """Write each shard to `pattern.format(shard=i, total=n)` atomically; with `partition_by`, one
    file per shard and value of that field, named by `pattern.format(shard=i, total=n, <field>=value)`."""

    pattern: str
    format: str
    skip_existing: bool = False
    partition_by: str | None = None
    schema: Any = None  # pyarrow.Schema of every parquet/vortex file; None: unified across the files written

    @property
    def name(self) -> str:
        return f"write_{self.format}({self.pattern})"


@dataclass(frozen=True)
class ShardSink:
    """Hand each shard's records to `writer(records, shard=i, total=n, source=name)`, which writes them
    where it likes and returns the URLs it wrote. For outputs that are not one file per shard (a token
    store); the engine's checkpoints, retries and fencing apply to it as to any sink. `name` says what
    it writes in plans (e.g. `write_token_store(stores/web)`). `check(urls)`, when given, names the URLs
    among those a checkpointed shard wrote that no longer hold its output (rewritten since by another run)."""

    writer: Callable[..., list[str]]
    name: str
    check: Callable[[list[str]], list[str]] | None = None


def op_name(op: Any) -> str:
    """A short human name for plans and progress: `map(clean_text)`, `group_by(doc_hash)`."""
    return str(op.name)


def callable_name(fn: Any) -> str:
    """The name a user recognises: `clean_text`, `Normalize`, `lambda`, never `<locals>` noise.

    An expression or other non-callable object by its repr. A callable may name itself with a
    `display_name` attribute (e.g. a library's internal task class).
    """
    if not callable(fn) or hasattr(fn, "to_arrow"):  # not callable, or a col()/lit() expression
        return repr(fn)
    own = getattr(fn, "display_name", None)
    if isinstance(own, str) and own:
        return own
    if isinstance(fn, functools.partial):
        return callable_name(fn.func)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:  # a callable object: its class
        name = type(fn).__qualname__
    name = str(name).rsplit("<locals>.", 1)[-1]
    if name.endswith("<lambda>"):
        return "lambda"  # no line number: names are part of stage fingerprints, moving code must not rerun
    return name.lstrip("_") or name


display_name = callable_name  # the name progress views and run records use


def preview(record: Any, limit: int = 300) -> str:
    """A record's repr for error messages, cut at `limit` characters."""
    text = repr(record)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
