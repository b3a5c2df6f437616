"""The lazy, immutable `Dataset`: every method returns a new Dataset with one more logical op.

Nothing runs until a terminal call (`collect`, `count`, `write_*`, `execute`), which plans the ops into
stages and runs them on the backend of the current `execution(...)` config.
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from zephyr.engine import ops as O
from zephyr.engine.arguments import check_function, key_function
from zephyr.engine.resources import Resources
from zephyr.engine.sorting import KeyKinds, SampleKeys, SortKey, check_sort_kinds, constant_key, emit_in_order

if TYPE_CHECKING:
    from zephyr.engine.executor import RunResult

__all__ = ["Dataset"]

_BATCH_FORMATS = ("pyarrow", "pandas", "polars")


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
        on_bad_record: str | None = None,
    ) -> Dataset:
        """One shard per file matching the glob(s): jsonl(.gz/.zst/.bz2), parquet, vortex or arrow.

        on_bad_record="skip" counts and skips invalid records and unreadable files instead of failing;
        None (the default) takes the current `execution(on_bad_record=...)` setting, itself "raise" by default.
        """
        if on_bad_record not in ("raise", "skip", None):
            raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {on_bad_record!r}")
        patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
        cols = tuple(columns) if columns is not None else None
        return Dataset(O.FilesSource(patterns, format, cols, None, on_bad_record))

    @staticmethod
    def from_hf(path: str, *, split: str | None = None, columns: Sequence[str] | None = None) -> Dataset:
        """A Hugging Face `save_to_disk` folder: one shard per `.arrow` data file, in `state.json` order.

        For a DatasetDict folder (`dataset_dict.json`, one sub-folder per split) give `split`; for a
        Dataset folder leave it None. `Dataset.from_files(path)` reads a Dataset folder the same way.
        """
        from zephyr.engine.io.hf import hf_split_folder

        path = hf_split_folder(path, split)
        return Dataset.from_files(path, format="arrow", columns=columns)

    # ---------------------------------------------------------------------------- narrow ops
    def _then(self, op: Any) -> Dataset:
        return replace(self, ops=(*self.ops, op))

    def map(self, fn: Callable[[Any], Any], *, resources: Any = None) -> Dataset:
        """Apply `fn` to every record. `resources` (e.g. {"gpus": 1, "memory": "8GB", "my_res": 1}) is
        what a worker running this stage needs; see zephyr.engine.resources."""
        check_function("map", "fn", fn, 1, "ds.map(lambda record: {**record, 'n': len(record['text'])})")
        return self._then(O.Map(fn, Resources.of(resources)))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, resources: Any = None) -> Dataset:
        """Replace every record by the records `fn` returns or yields (zero or more)."""
        check_function("flat_map", "fn", fn, 1, "ds.flat_map(lambda record: record['text'].split())")
        return self._then(O.FlatMap(fn, Resources.of(resources)))

    def filter(self, predicate: Any) -> Dataset:
        """Keep records for which `predicate` is true: a callable, or an expression like
        `col("lang") == "en"` (pushed down into parquet/vortex scans when it follows the source)."""
        from zephyr.engine.expr import Expr

        if not isinstance(predicate, Expr):
            check_function("filter", "predicate", predicate, 1, "ds.filter(col('lang') == 'en') or a function")
        return self._then(O.Filter(predicate))

    def select(self, *columns: str) -> Dataset:
        """Keep only these fields of every (dict) record; pushed into columnar readers."""
        if not columns:
            raise ValueError("select() needs at least one column name")
        return self._then(O.Select(tuple(columns)))

    def map_batches(
        self, fn: Callable[[Any], Any], *, batch_size: int = 1024, batch_format: str = "pyarrow", resources: Any = None
    ) -> Dataset:
        """Apply `fn` to batches of up to `batch_size` records (the fast columnar path).

        batch_format: "pyarrow" (a RecordBatch, no conversion), "pandas" (a DataFrame) or "polars" (a
        DataFrame); `fn` returns a batch of the same kind (or a pyarrow Table/RecordBatch).
        resources: what a worker running this stage needs, e.g. {"gpus": 1} (see `map`).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if batch_format not in _BATCH_FORMATS:
            raise ValueError(f"batch_format must be one of {', '.join(_BATCH_FORMATS)}, got {batch_format!r}")
        check_function("map_batches", "fn", fn, 1, "ds.map_batches(lambda batch: batch.filter(...))")
        if batch_format != "pyarrow":
            fn = _FormattedBatches(fn, batch_format)
        return self._then(O.MapBatches(fn, batch_size, Resources.of(resources)))

    def map_shard(
        self, fn: Callable[..., Iterable[Any]], *, resources: Any = None, with_context: bool = False
    ) -> Dataset:
        """`fn(records)` gets a whole shard's iterator and yields its output: for per-shard state (a model
        loaded once per shard; `resources={"gpus": 1}` runs it on a worker holding a GPU).

        with_context=True calls `fn(records, context)` instead, `context` a `zephyr.engine.task.ShardContext`
        saying which shard it is (`context.shard`, `context.num_shards`): with a record's index within the
        shard it names the record's position, stable across two passes over the same input.
        """
        if with_context:
            example = "def fn(records, context): yield from ({**r, 'shard': context.shard} for r in records)"
            check_function("map_shard", "fn", fn, 2, example)
        else:
            check_function("map_shard", "fn", fn, 1, "def fn(records): model = load(); yield from map(model, records)")
        return self._then(O.MapShard(fn, Resources.of(resources), with_context))

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

        Keys group as Python's `==` says and sort keys order as Python's `sorted` does, by value
        (zephyr.engine.sortkey): bool, int and float are one numeric order, exact for ints of any size,
        and equal numbers are one key (1, 1.0 and True: one group, handed to the reducer as the group's
        first record had it); -0.0 == 0.0; NaN is one key, after inf; None comes first; str by code
        point, bytes by byte, tuples element by element; dates, datetimes (aware ones by their instant),
        times and timedeltas by time. Keys of kinds Python cannot order against each other (a str and
        an int) may still be keys of one group_by, but sort keys of such kinds within one group raise
        UnorderableKeysError naming both values, the stage and the record; so do sort keys of a type
        with no order (a dict). Other picklable keys group by equality of their pickles.

        A field name (`"user"`, or `col("user")`) as key or sort key reads that field (missing ->
        None); over parquet/vortex input the shuffle then takes whole Arrow batches at once instead of
        one record at a time, and records stay Arrow through the shuffle (no pickling).

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
            _refuse_minus_prefix(
                name,
                value,
                f"Sort ascending with {name}={value[1:]!r}, or pass a function, e.g. "
                f"{name}=lambda r: -r[{value[1:]!r}] for a numeric field."
                if isinstance(value, str)
                else "",
            )
        key_fn = key_function("group_by", "key", key)
        sort_fn = key_function("group_by", "sort_by", sort_by, optional=True)
        example = "def reducer(key, items): return {'key': key, 'n': sum(1 for _ in items)}"
        check_function("group_by", "reducer", reducer, 2, example)
        if combiner is not None:
            check_function("group_by", "combiner", combiner, 2, "def combiner(key, items): yield ...")
        return self._then(O.GroupBy(key_fn, reducer, sort_fn, combiner, num_shards, batch))

    def aggregate(
        self, key: str, *, sort_by: str | None = None, num_shards: int | None = None, **outputs: tuple[str, str]
    ) -> Dataset:
        """Per value of the field `key`, one record: the key and each output `name=(field, how)`, where how is
        "size" (records), "count" (records whose field is not None), "sum", "mean", "min", "max" (of the values
        that are not None; None when there are none), "first" or "last" (the field of the first or last record in
        `sort_by` order, ties in input order; in input order without sort_by). pandas' named aggregation:

            ds.aggregate("user", sort_by="ts", first_ts=("ts", "first"), n=("ts", "size"))

        The same records as `group_by(key, reducer, sort_by=sort_by)` with a reducer computing these over
        Python values would give (keys equal as Python's `==` says, None sorting first and NaN last), but
        computed column by column: the map side folds its rows into one partial row per key, the reduce side
        folds those (see `zephyr.engine.shuffle.aggregate`): at 10M records and 1M keys 0.7-0.9x polars'
        records/s on 2 cores, 3.6x group_by's with a Python reducer (benchmarks/engine_groupby.py). Sums of ints are
        exact at any size (a sum that could leave 64 bits is summed in Python). Output records are in no
        particular order.
        """
        from zephyr.engine.shuffle.aggregate import Aggregation

        if num_shards is not None and num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}")
        return self._then(O.Aggregate(Aggregation.declared(key, sort_by, outputs), num_shards))

    def deduplicate(self, key: Callable[[Any], Any] | str, *, num_shards: int | None = None) -> Dataset:
        """Keep the first record (in input order) of every `key(record)` (or field `key`); keys are
        equal as Python's `==` says (1, 1.0 and True are one key; see `group_by`)."""
        return self.group_by(key, _first_of_group, combiner=_first_of_group, num_shards=num_shards)

    def union(self, *others: Dataset, num_shards: int | None = None) -> Dataset:
        """All records of this dataset and of `others` (duplicates kept), in `num_shards` shards.

        A shuffle: each input is spread round-robin over the output shards (default: as many as the
        largest input has), so record order across inputs is not kept.
        """
        for other in others:
            if not isinstance(other, Dataset):
                raise TypeError(f"union expects Datasets, got {type(other).__name__}")
        if not others:
            return self
        if num_shards is not None and num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}")
        return self._then(O.Union(tuple(others), num_shards))

    def sort(
        self,
        key: Callable[[Any], Any] | str,
        *,
        descending: bool = False,
        num_shards: int | None = None,
        samples_per_shard: int = 256,
    ) -> Dataset:
        """Order all records by `key(record)` (or field `key`): output shard i holds keys <= shard i+1's.

        A distributed sort: a sampling pass (which runs the pipeline so far, now) picks range boundaries
        from `samples_per_shard` keys per input shard, then one shuffle sends every record to its range
        and each output shard streams its range in order from disk (external merge; larger than memory is
        fine). `collect()` after it returns records in global order; ties keep no particular order.

        The order is Python's, by value, as for `group_by`'s sort_by: ints and floats in one numeric
        order (3 between 2.5 and 10), None first, NaN after inf, str by code point, tuples element by
        element, datetimes by time; `descending=True` is its exact reverse (None last). Keys of kinds
        Python cannot order against each other (a str and an int) raise UnorderableKeysError before
        anything is shuffled, naming both and a record of each.
        """
        if samples_per_shard < 1:
            raise ValueError(f"samples_per_shard must be at least 1, got {samples_per_shard}")
        if isinstance(key, str):
            _refuse_minus_prefix("key", key, f"Sort descending with sort({key[1:]!r}, descending=True).")
        sort_key = SortKey(key_function("sort", "key", key), descending)
        collected = self.map_shard(SampleKeys(sort_key, samples_per_shard)).collect()
        check_sort_kinds([c for c in collected if isinstance(c, KeyKinds)], sort_key.key)
        sampled = sorted(c for c in collected if not isinstance(c, KeyKinds))
        if num_shards is None:
            from zephyr.engine.context import current_config

            num_shards = max(1, min(current_config().num_workers, len(sampled) or 1))
        if num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {num_shards}")
        # the shuffle compares encoded sort keys; the samples are encoded the same way
        # no samples (an empty dataset): no boundaries, every record (none) goes to the first shard
        ranges = tuple(
            sorted({sampled[len(sampled) * i // num_shards] for i in range(1, num_shards)} if sampled else ())
        )
        return self._then(O.GroupBy(constant_key, emit_in_order, sort_key, None, num_shards, ranges=ranges))

    def sorted_merge_join(
        self,
        right: Dataset,
        *,
        left_key: Callable[[Any], Any] | str,
        right_key: Callable[[Any], Any] | str,
        how: str = "inner",
        combine: Callable[[Any, Any], Any] | None = None,
        num_shards: int | None = None,
    ) -> Dataset:
        """Join with `right` on equal keys: both sides are shuffled by key and merged in key order.

        `left_key`/`right_key` are field names (`"id"`, as in `group_by`) or functions of a record.
        `combine(left, right)` builds the output record (default `{**left, **right}`); with how="left",
        a left record without match is combined with None (default: the left record as is).
        Every pair of matching records is emitted (many-to-many joins multiply). Keys match as Python's
        `==` says: a left 1 matches a right 1.0 (see `group_by`).

        Example:
            >>> from zephyr import Dataset, execution
            >>> docs = Dataset.from_list([{"id": 1, "text": "a"}, {"id": 2, "text": "b"}])
            >>> langs = Dataset.from_list([{"doc": 1, "lang": "en"}])
            >>> with execution(backend="local"):
            ...     docs.sorted_merge_join(langs, left_key="id", right_key="doc").collect()
            [{'id': 1, 'text': 'a', 'doc': 1, 'lang': 'en'}]
        """
        if how not in ("inner", "left"):
            raise ValueError(f"sorted_merge_join: how must be 'inner' or 'left', got {how!r}")
        if not isinstance(right, Dataset):
            raise TypeError(
                f"sorted_merge_join expects a Dataset on the right, got {type(right).__name__}; "
                "e.g. Dataset.from_files('other/*.parquet')"
            )
        for name, value in (("left_key", left_key), ("right_key", right_key)):
            _refuse_minus_prefix(name, value, f"Join on the field itself: {name}={str(value)[1:]!r}.")
        left = key_function("sorted_merge_join", "left_key", left_key)
        right_fn = key_function("sorted_merge_join", "right_key", right_key)
        if combine is not None:
            check_function(
                "sorted_merge_join", "combine", combine, 2, "combine=lambda left, right: {**left, **(right or {})}"
            )
        return self._then(O.Join(right, left, right_fn, how, combine, num_shards))

    # ----------------------------------------------------------------------------- terminals
    def execute(self) -> RunResult:
        """Run the pipeline; returns outputs (records or written paths), counters and stage stats."""
        from zephyr.engine.executor import execute

        return execute(self)

    def collect(self) -> list[Any]:
        """Run the pipeline and return all records, shard by shard."""
        return self.execute().outputs

    def take(self, n: int) -> list[Any]:
        """The first `n` records (in shard order); each shard stops reading after `n` records."""
        if n < 0:
            raise ValueError(f"take needs n >= 0, got {n}")
        if n == 0:
            return []
        return self.take_per_shard(n).collect()[:n]

    def show(self, n: int = 10) -> None:
        """Print the first `n` records, one per line (dict records as JSON)."""
        import json

        for record in self.take(n):
            try:
                line = json.dumps(record, ensure_ascii=False, default=str)
            except (TypeError, ValueError):
                line = repr(record)
            print(line if len(line) <= 400 else line[:397] + "...")

    def schema(self, *, sample: int = 1000) -> Any:
        """The pyarrow schema of the records: every field seen, each with a type that holds all its values.

        For parquet, vortex or arrow files read as they are, the files' own schemas (footers only, no
        rows), unified across the files: a column that is int64 in some files and double in others is double.
        Otherwise it is inferred from a sample of about `sample` records taken from every shard (the
        first records of each, so a later file whose values are floats is seen), and a field's types
        are unified across the sample the same way. The schema's metadata says what it was read from
        (`schema.metadata[b"zephyr.schema_from"]`); fields or types that occur only outside the sample
        are not seen.
        """
        from zephyr.engine.sample_schema import dataset_schema

        return dataset_schema(self, sample)

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
        from zephyr.engine.outputs import check_output_pattern

        check_output_pattern(pattern, partition_by)  # its real format fields, before anything runs
        if partition_by is not None and skip_existing:
            raise ValueError(
                "skip_existing cannot tell which partitions a shard wrote; rerun partitioned writes without it"
            )
        if partition_by is not None and schema is not None:
            raise ValueError(
                "schema= is not applied to partitioned writes (each partition file takes its records' schema); "
                "cast the records in a map_batches before the write, or drop partition_by"
            )
        from zephyr.engine.io import infer_format, written_formats

        if format is None:
            format = infer_format(pattern)
        if format not in written_formats():
            raise ValueError(f"unknown output format {format!r}: choose one of {', '.join(written_formats())}")
        return self._then(O.Sink(pattern, format, skip_existing, partition_by, schema))

    def write_shards(
        self,
        writer: Callable[..., list[str]],
        *,
        name: str = "write_shards",
        check: Callable[[list[str]], list[str]] | None = None,
    ) -> Dataset:
        """Lazily end the pipeline in a custom writer: `writer(records, shard=i, total=n, source=s)` runs in
        the worker for every shard (`source` names the shard's input file, or None) and returns the URLs
        it wrote; `execute()` returns them all. The writer must be picklable and must write atomically
        (a retried or resumed shard calls it again). Used by `zephyr.tokenize` for token stores.

        A resumed run trusts a checkpointed shard while the URLs it returned exist; `check(urls)` (run in
        the driver) may also name those that exist but no longer hold what the shard wrote (another run
        rewrote them): their shards run again, in the same run."""
        if not callable(writer):
            raise TypeError(f"write_shards expects a callable writer, got {type(writer).__name__}")
        return self._then(O.ShardSink(writer, name, check))

    def write_jsonl(self, pattern: str, *, skip_existing: bool = False, partition_by: str | None = None) -> list[str]:
        """Write shard i to `pattern.format(shard=i, total=n)` (.jsonl, .jsonl.gz or .jsonl.zst); with
        `partition_by`, one file per shard and value of that field (see `write`)."""
        return (
            self.write(pattern, format="jsonl", skip_existing=skip_existing, partition_by=partition_by)
            .execute()
            .outputs
        )

    def write_parquet(
        self, pattern: str, *, skip_existing: bool = False, schema: Any = None, partition_by: str | None = None
    ) -> list[str]:
        """Write shard i to `pattern.format(shard=i, total=n)` as parquet (zstd); one schema for all files;
        with `partition_by`, one file per shard and value of that field (see `write`)."""
        return (
            self.write(pattern, format="parquet", skip_existing=skip_existing, schema=schema, partition_by=partition_by)
            .execute()
            .outputs
        )

    def write_vortex(
        self, pattern: str, *, skip_existing: bool = False, schema: Any = None, partition_by: str | None = None
    ) -> list[str]:
        """Write shard i to `pattern.format(shard=i, total=n)` as vortex; one schema for all files; with
        `partition_by`, one file per shard and value of that field (see `write`)."""
        return (
            self.write(pattern, format="vortex", skip_existing=skip_existing, schema=schema, partition_by=partition_by)
            .execute()
            .outputs
        )

    def write_hf(self, folder: str, *, split: str | None = None) -> list[str]:
        """Write a folder Hugging Face's `datasets.load_from_disk(folder)` reads: shard i as the Arrow IPC
        stream `folder/data-{i:05d}-of-{n:05d}.arrow` (one schema across the files), then
        `dataset_info.json` and `state.json`. With `split`, the records go to `folder/<split>/` and
        `folder/dataset_dict.json` lists the split, so `folder` loads as a DatasetDict (write each split
        in turn). Returns the data files' paths."""
        from zephyr.engine.io.hf import arrow_schema, write_hf_metadata
        from zephyr.fs import join

        target = join(folder, split) if split else folder
        paths = self.write(join(target, "data-{shard:05d}-of-{total:05d}.arrow"), format="arrow").execute().outputs
        if paths:  # none in a dry run, which writes nothing
            write_hf_metadata(target, paths, arrow_schema(paths[0]), split=split)
        return paths

    def explain(self) -> str:
        """The physical plan: stages, the ops fused into each, shard counts."""
        from zephyr.engine.context import current_config
        from zephyr.engine.plan import plan

        return plan(self, current_config()).describe()

    def __repr__(self) -> str:
        names = [type(self.source).__name__] + [O.op_name(op) for op in self.ops]
        return f"Dataset({' -> '.join(names)})"


def _refuse_minus_prefix(name: str, value: Any, fix: str) -> None:
    """`"-ts"` is no field name but a request for descending order (SQL, Django, pandas idioms): it read
    as an absent field, None for every record, and sorted nothing."""
    if isinstance(value, str) and value.startswith("-"):
        raise ValueError(
            f"{name}={value!r}: a '-' prefix (descending order) is not supported, and no field is named {value!r}. "
            + fix
        )


def _first_of_group(key: Any, items: Iterable[Any]) -> Iterator[Any]:
    # yields rather than returns: a reducer returning None emits nothing, and None may be the record kept
    for item in items:
        yield item
        return


def _count_shard(records: Iterable[Any]) -> Iterable[int]:
    counter = itertools.count()
    collections.deque(zip(records, counter, strict=False), maxlen=0)  # consumed in C: the counter moves per record
    yield next(counter)


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


@dataclass(frozen=True)
class _FormattedBatches:
    """map_batches with pandas or polars frames: converts each Arrow batch in, and the result back."""

    fn: Callable[[Any], Any]
    batch_format: str

    @property
    def display_name(self) -> str:
        return O.display_name(self.fn)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        if self.batch_format == "pandas":
            frame = batch.to_pandas()
        else:
            import polars as pl

            frame = pl.from_arrow(batch)
        out = self.fn(frame)
        if out is None or isinstance(out, pa.RecordBatch | pa.Table):
            return out
        if self.batch_format == "pandas":
            return pa.Table.from_pandas(out, preserve_index=False)
        if hasattr(out, "to_arrow"):
            return out.to_arrow()
        raise TypeError(
            f"map_batches(batch_format={self.batch_format!r}): {O.display_name(self.fn)} returned "
            f"{type(out).__name__}; return a {self.batch_format} DataFrame (or a pyarrow Table)"
        )
