"""The lazy, immutable `Dataset`: every method returns a new Dataset with one more logical op.

Nothing runs until a terminal call (`collect`, `count`, `write_*`, `execute`), which plans the ops into
stages and runs them on the backend of the current `execution(...)` config.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from zephyr.engine import ops as O

if TYPE_CHECKING:
    from zephyr.engine.executor import RunResult

__all__ = ["Dataset"]

_FORMATS = ("jsonl", "parquet", "vortex")


@dataclass(frozen=True)
class Dataset:
    """A lazy pipeline: a source and the ops applied to it, in order.

    Example:
        >>> from zephyr import Dataset, execution
        >>> with execution(backend="local"):
        ...     Dataset.from_list(["a b", "c"]).flat_map(str.split).collect()
        ['a', 'b', 'c']

    Order: narrow ops keep the order of records within a shard and shards keep their order, so
    `collect()` after narrow ops returns records in input order. After a shuffle (`group_by`, `join`,
    `reshard`) output shards hold groups in an unspecified but deterministic order.
    """

    source: O.Source
    ops: tuple[Any, ...] = ()

    # ------------------------------------------------------------------------------- sources
    @staticmethod
    def from_list(records: Iterable[Any], *, num_shards: int | None = None) -> Dataset:
        """In-memory records split into `num_shards` contiguous shards (default: one per worker)."""
        records = tuple(records)
        if num_shards is not None and num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}")
        return Dataset(O.ListSource(records, num_shards))

    @staticmethod
    def from_iterable(shard_fn: Callable[[int], Iterable[Any]], *, num_shards: int = 1) -> Dataset:
        """`shard_fn(i)` yields shard i's records; it runs inside the worker (generate data lazily)."""
        if not callable(shard_fn):
            raise TypeError(
                "from_iterable expects a function shard_index -> iterable, so the records are produced "
                f"inside the workers; got {type(shard_fn).__name__}. For an in-memory list use from_list."
            )
        return Dataset(O.IterableSource(shard_fn, num_shards))

    @staticmethod
    def from_files(
        patterns: str | Sequence[str],
        *,
        format: str | None = None,
        columns: Sequence[str] | None = None,
        on_bad_record: str = "raise",
    ) -> Dataset:
        """One shard per file matching the glob(s): jsonl(.gz/.zst/.bz2), parquet or vortex.

        on_bad_record="skip" counts and skips invalid records and unreadable files instead of failing.
        """
        if on_bad_record not in ("raise", "skip"):
            raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {on_bad_record!r}")
        patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
        cols = tuple(columns) if columns is not None else None
        return Dataset(O.FilesSource(patterns, format, cols, None, on_bad_record))

    # ---------------------------------------------------------------------------- narrow ops
    def _then(self, op: Any) -> Dataset:
        return replace(self, ops=(*self.ops, op))

    def map(self, fn: Callable[[Any], Any]) -> Dataset:
        """Apply `fn` to every record."""
        return self._then(O.Map(fn))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> Dataset:
        """Replace every record by the records `fn` returns or yields (zero or more)."""
        return self._then(O.FlatMap(fn))

    def filter(self, predicate: Any) -> Dataset:
        """Keep records for which `predicate` is true: a callable, or an expression like
        `col("lang") == "en"` (pushed down into parquet/vortex scans when it follows the source)."""
        return self._then(O.Filter(predicate))

    def select(self, *columns: str) -> Dataset:
        """Keep only these fields of every (dict) record; pushed into columnar readers."""
        if not columns:
            raise ValueError("select() needs at least one column name")
        return self._then(O.Select(tuple(columns)))

    def map_batches(self, fn: Callable[[Any], Any], *, batch_size: int = 1024) -> Dataset:
        """Apply `fn` to pyarrow RecordBatches of up to `batch_size` records (the fast columnar path)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        return self._then(O.MapBatches(fn, batch_size))

    def map_shard(self, fn: Callable[[Iterable[Any]], Iterable[Any]]) -> Dataset:
        """`fn(records)` gets a whole shard's iterator and yields its output: for per-shard state."""
        return self._then(O.MapShard(fn))

    def take_per_shard(self, n: int) -> Dataset:
        """The first `n` records of every shard."""
        if n < 0:
            raise ValueError(f"take_per_shard needs n >= 0, got {n}")
        return self._then(O.TakePerShard(n))

    # ------------------------------------------------------------------------------ wide ops
    def reshard(self, num_shards: int) -> Dataset:
        """Redistribute records round-robin into `num_shards` shards (a shuffle)."""
        if num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}")
        return self._then(O.Reshard(num_shards))

    def group_by(
        self,
        key: Callable[[Any], Any] | str,
        reducer: Callable[[Any, Iterable[Any]], Any],
        *,
        sort_by: Callable[[Any], Any] | str | None = None,
        combiner: Callable[[Any, Iterable[Any]], Any] | None = None,
        num_shards: int | None = None,
        batch: bool = False,
    ) -> Dataset:
        """Group records by `key(record)` and call `reducer(key, items)` once per key.

        items is an iterator ordered by `sort_by(record)` (ties keep input order), streamed from disk,
        so a group may be larger than memory. A reducer returns one value, or is a generator (or returns
        an iterator) whose items all become records; returning None emits nothing. `combiner(key, items)`
        has the same contract and pre-aggregates on the map side; its outputs are what the reducer sees.
        Keys and sort keys must be None/bool/int/float/str/bytes or tuples of them to be ordered; any
        picklable key groups correctly. A field name (`"user"`, or `col("user")`) as key or sort key
        reads that field (missing -> None); over parquet/vortex input the shuffle then takes whole
        Arrow batches at once instead of one record at a time, and records stay Arrow through the
        shuffle (no pickling).

        batch=True is the Arrow reducer form: `reducer(key, batches)` gets the group's records (dicts
        before the shuffle) as an iterator of `pyarrow.RecordBatch` in sort order, one batch per stretch
        of the group in a chunk of merged rows (a large group spans several, so it still streams; use
        `pyarrow.Table.from_batches(list(batches))` for one table). Over columnar input the batches share
        the input's schema; from dict records each batch's schema is inferred from its rows (a field that
        is None throughout a batch has null type: combine with `pyarrow.concat_tables(...,
        promote_options="permissive")`). It pays off for large groups handled
        with Arrow compute; for many small groups the dict form is cheaper. Any reducer may return a
        `pyarrow.RecordBatch` or `Table`: its rows become records.
        """
        for name, value in (("key", key), ("sort_by", sort_by)):
            if isinstance(value, str) and value.startswith("-"):
                raise ValueError(
                    f"{name}={value!r}: a '-' prefix (descending order) is not supported, and no field is named "
                    f"{value!r}. Sort ascending with {name}={value[1:]!r}, or pass a function, e.g. "
                    f"{name}=lambda r: -r[{value[1:]!r}] for a numeric field."
                )
        return self._then(O.GroupBy(_field_or_fn(key), reducer, _field_or_fn(sort_by), combiner, num_shards, batch))

    def deduplicate(self, key: Callable[[Any], Any] | str, *, num_shards: int | None = None) -> Dataset:
        """Keep the first record (in input order) of every `key(record)` (or field `key`)."""
        return self.group_by(key, _first_of_group, combiner=_first_of_group, num_shards=num_shards)

    def sorted_merge_join(
        self,
        right: Dataset,
        *,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        how: str = "inner",
        combine: Callable[[Any, Any], Any] | None = None,
        num_shards: int | None = None,
    ) -> Dataset:
        """Join with `right` on equal keys: both sides are shuffled by key and merged in key order.

        `combine(left, right)` builds the output record (default `{**left, **right}`); with how="left",
        a left record without match is combined with None (default: the left record as is).
        Every pair of matching records is emitted (many-to-many joins multiply).
        """
        if how not in ("inner", "left"):
            raise ValueError(f"how must be 'inner' or 'left', got {how!r}")
        if not isinstance(right, Dataset):
            raise TypeError(f"sorted_merge_join expects a Dataset on the right, got {type(right).__name__}")
        return self._then(O.Join(right, left_key, right_key, how, combine, num_shards))

    # ----------------------------------------------------------------------------- terminals
    def execute(self) -> RunResult:
        """Run the pipeline; returns outputs (records or written paths), counters and stage stats."""
        from zephyr.engine.executor import execute

        return execute(self)

    def collect(self) -> list[Any]:
        """Run the pipeline and return all records, shard by shard."""
        return self.execute().outputs

    def count(self) -> int:
        """Run the pipeline and return the number of records."""
        return sum(self.map_shard(_count_shard).collect())

    def reduce(self, fn: Callable[[Any, Any], Any]) -> Any:
        """Fold all records with an associative `fn(a, b)`: per shard in the workers, then across shards.

        Raises ValueError on an empty dataset (as `functools.reduce` without an initial value does).
        """
        partials = [p for p in self.map_shard(_ShardFold(fn)).collect() if p is not _EMPTY]
        if not partials:
            raise ValueError("reduce() of an empty dataset")
        return functools.reduce(fn, partials)

    def write(
        self,
        pattern: str,
        *,
        format: str | None = None,
        skip_existing: bool = False,
        partition_by: str | None = None,
        schema: Any = None,
    ) -> Dataset:
        """Lazily end the pipeline in a writer: shard i goes to `pattern.format(shard=i, total=n)`.

        `format` is inferred from the pattern's suffix when None. `execute()` on the result runs it and
        returns the written paths as outputs together with counters and stage stats (`write_jsonl` and
        friends do that and return the paths). With skip_existing, shards whose file exists are not rerun.

        `partition_by="lang"` splits each shard by that field in the same pass: records go to
        `pattern.format(shard=i, total=n, lang=value)`, e.g. 'out/{lang}/part-{shard:05d}.jsonl.zst'.

        Every shard writes its file, an empty shard an empty one, so a missing file is a lost one.
        Parquet and vortex outputs have one schema across all files (polars and pyarrow.dataset read
        the folder as one table): `schema` (a `pyarrow.Schema`) if given, else the union of the
        shards' schemas, applied after the shards are written by rewriting the files that differ.
        """
        if "{shard" not in pattern:
            raise ValueError(
                f"output pattern {pattern!r} has no {{shard}} placeholder, so every shard would write the "
                "same file; use e.g. 'out/part-{shard:05d}-of-{total:05d}.jsonl.zst'"
            )
        if partition_by is not None:
            if "{" + partition_by + "}" not in pattern:
                raise ValueError(f"output pattern {pattern!r} has no {{{partition_by}}} placeholder for partition_by={partition_by!r}; use e.g. 'out/{{{partition_by}}}/part-{{shard:05d}}.jsonl.zst'")
            if skip_existing:
                raise ValueError("skip_existing cannot tell which partitions a shard wrote; rerun partitioned writes without it")
        if format is None:
            from zephyr.engine.io import infer_format

            format = infer_format(pattern)
        if format not in _FORMATS:
            raise ValueError(f"unknown output format {format!r}: choose one of {', '.join(_FORMATS)}")
        return self._then(O.Sink(pattern, format, skip_existing, partition_by, schema))

    def write_shards(self, writer: Callable[..., list[str]], *, name: str = "write_shards") -> Dataset:
        """Lazily end the pipeline in a custom writer: `writer(records, shard=i, total=n, source=s)` runs in
        the worker for every shard (`source` names the shard's input file, or None) and returns the URLs
        it wrote; `execute()` returns them all. The writer must be picklable and must write atomically
        (a retried or resumed shard calls it again). Used by `zephyr.tokenize` for token stores."""
        if not callable(writer):
            raise TypeError(f"write_shards expects a callable writer, got {type(writer).__name__}")
        return self._then(O.ShardSink(writer, name))

    def write_jsonl(self, pattern: str, *, skip_existing: bool = False) -> list[str]:
        """Write shard i to `pattern.format(shard=i, total=n)` (.jsonl, .jsonl.gz or .jsonl.zst)."""
        return self.write(pattern, format="jsonl", skip_existing=skip_existing).execute().outputs

    def write_parquet(self, pattern: str, *, skip_existing: bool = False, schema: Any = None) -> list[str]:
        """Write shard i to `pattern.format(shard=i, total=n)` as parquet (zstd); one schema for all files."""
        return self.write(pattern, format="parquet", skip_existing=skip_existing, schema=schema).execute().outputs

    def write_vortex(self, pattern: str, *, skip_existing: bool = False, schema: Any = None) -> list[str]:
        """Write shard i to `pattern.format(shard=i, total=n)` as vortex; one schema for all files."""
        return self.write(pattern, format="vortex", skip_existing=skip_existing, schema=schema).execute().outputs

    def explain(self) -> str:
        """The physical plan: stages, the ops fused into each, shard counts."""
        from zephyr.engine.context import current_config
        from zephyr.engine.plan import plan

        return plan(self, current_config()).describe()

    def __repr__(self) -> str:
        names = [type(self.source).__name__] + [O.op_name(op) for op in self.ops]
        return f"Dataset({' -> '.join(names)})"


def _field_or_fn(key: Any) -> Any:
    """A field name becomes `col(name)`, an expression that is also a record -> value function."""
    if isinstance(key, str):
        from zephyr.engine.expr import col

        return col(key)
    return key


def _first_of_group(key: Any, items: Iterable[Any]) -> Iterator[Any]:
    # yields rather than returns: a reducer returning None emits nothing, and None may be the record kept
    for item in items:
        yield item
        return


def _count_shard(records: Iterable[Any]) -> Iterable[int]:
    count = 0
    for count, _ in enumerate(records, 1):
        pass
    yield count


class _Empty:
    """Marks a shard with no records (None could be a legitimate fold result)."""

    def __reduce__(self):
        return (_empty, ())


def _empty() -> _Empty:
    return _EMPTY


_EMPTY = _Empty()


@dataclass(frozen=True)
class _ShardFold:
    fn: Callable[[Any, Any], Any]

    def __call__(self, records: Iterable[Any]) -> Iterable[Any]:
        iterator = iter(records)
        accumulator = next(iterator, _EMPTY)
        if accumulator is not _EMPTY:
            for record in iterator:
                accumulator = self.fn(accumulator, record)
        yield accumulator
