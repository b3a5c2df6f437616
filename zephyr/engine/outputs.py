"""Where a stage's records go: one tagged type per kind of output, each writing one shard.

`Scatter` routes records into a shuffle's sorted runs, `FileSink` writes one file per shard,
`PartitionedSink` (a FileSink) one file per shard and value of a field, `ShardWriterSink` hands each shard
to a function (a token store's writer), `Collect` pickles the records for the driver.

Every output answers the same questions (the `Output` protocol, with defaults for outputs that write no
files of their own), so neither the worker nor the executor asks which kind it is: `write(stream, task,
result)` consumes the stream the stage's pipeline produced and records what it wrote in `result`;
`existing(task)` names a shard's output already there (skip_existing); `takes_batches` says whether it
takes Arrow batches as they come (fixed at plan time into `batches`); `stale(urls)` which of the files a
checkpointed shard wrote no longer hold its output (a resume reruns it); `folder` is the folder it writes
into (locked for the run), `locations` the URLs it writes; after the last shard, `outputs(results)` is
what the run returns and `finish(outputs, counters)` settles the folder.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa

from zephyr import counters
from zephyr.engine import absent_fields
from zephyr.engine.shuffle import ScatterWriter, ShuffleSpec, scatters_batches
from zephyr.engine.shuffle.aggregate_runs import AggregateWriter
from zephyr.engine.task import ShardResult, ShardTask
from zephyr.fs import atomic_write, join, missing_files, open_url, remove_dead_temps, url_to_fs
from zephyr.fs.core import is_hidden
from zephyr.progress import log

__all__ = [
    "Output",
    "Scatter",
    "FileSink",
    "PartitionedSink",
    "ShardWriterSink",
    "Collect",
    "check_output_pattern",
    "StageOutput",
    "pattern_folder",
    "read_results",
    "remove_stale_outputs",
]


class Output(Protocol):
    """What the worker, the planner and the executor ask of a stage output. The defaults suit an output that
    writes no files of its own (a scatter, a collect); each output subclasses this and overrides the rest."""

    batches: bool  # the stream holds Arrow batches (fixed at plan time from `takes_batches`)
    collects: ClassVar[bool] = False  # the run returns records rather than written paths

    @property
    def name(self) -> str: ...

    def describe(self) -> str: ...

    def write(self, stream: Iterator[Any], task: ShardTask, result: ShardResult) -> None: ...

    @property
    def takes_batches(self) -> bool:
        """Takes Arrow batches as they come (a columnar file, a keyed scatter), so the pipeline hands them over."""
        return False

    @property
    def folder(self) -> str | None:
        """The folder it writes into, locked for the run (None: only the run's scratch)."""
        return None

    @property
    def locations(self) -> tuple[str, ...]:
        """The URLs (patterns) it writes, as given."""
        return ()

    def existing(self, task: ShardTask) -> list[str]:
        """The shard's output when it is already there and the shard need not run (skip_existing)."""
        return []

    def stale(self, urls: list[str]) -> list[str]:
        """Those of the files a checkpointed shard wrote that no longer hold its output: here, the gone ones."""
        return missing_files(urls)

    def outputs(self, results: list[ShardResult]) -> list[Any]:
        """What a run ending in this output returns: the written paths, shard after shard."""
        return [path for result in results for path in result.paths]

    def finish(self, outputs: list[Any], counters: dict[str, int]) -> None:
        """After every shard of the run is committed (as the last stage's output)."""
        return None


@dataclass(frozen=True)
class Scatter(Output):
    """Hash-partition (or, without key, deal round-robin) the records into `spec.num_targets` targets."""

    spec: ShuffleSpec
    batches: bool = False  # the stream holds Arrow batches (a scatter on fields of a columnar source)

    @property
    def name(self) -> str:
        return "scatter"

    @property
    def takes_batches(self) -> bool:
        """A keyed scatter without combiner or join tag, and an aggregate's, take Arrow batches whole."""
        return self.spec.aggregation is not None or scatters_batches(self.spec)

    def describe(self) -> str:
        return f"scatter to {self.spec.num_targets} shard(s)"

    def write(self, stream: Iterator[Any], task: ShardTask, result: ShardResult) -> None:
        spec, out_dir, flush_bytes = self.spec, join(task.out_dir, "runs"), task.memory_per_worker // 4
        writer: ScatterWriter | AggregateWriter
        if spec.aggregation is None:
            writer = ScatterWriter(spec, out_dir, shard=task.shard, flush_bytes=flush_bytes)
        else:
            writer = AggregateWriter(
                spec.aggregation, spec.num_targets, out_dir, shard=task.shard, flush_bytes=flush_bytes
            )
        # col("ts") as a key or sort key, an aggregate's fields
        if fields := absent_fields.fields_read(self.spec.key, self.spec.sort_by, spec.aggregation):
            stream = absent_fields.noting_fields(stream, fields, f"shard {task.shard}")
        if self.batches:  # a stream of batches may hold records too (AggregateInput's Python fold)
            for item in stream:
                (writer.add_batch if isinstance(item, pa.RecordBatch | pa.Table) else writer.add)(item)
        else:
            for item in stream:
                writer.add(item)
        result.runs = writer.close()
        result.records_out = writer.records
        result.bytes_out = sum(run.bytes for run in result.runs)


@dataclass(frozen=True)
class FileSink(Output):
    """Shard i goes to `pattern.format(shard=i, total=n)`, written atomically (in any written format)."""

    pattern: str
    format: str
    total: int  # the stage's number of shards, for {total} (a reduce plan's task count overrides it)
    skip_existing: bool = False
    batches: bool = False
    schema: Any = None  # pyarrow.Schema of every file; None: the driver unifies the files' schemas afterwards

    @property
    def name(self) -> str:
        return f"write_{self.format}({self.pattern})"

    def describe(self) -> str:
        return f"write {self.format} {self.pattern}"

    @property
    def takes_batches(self) -> bool:
        from zephyr.engine.io import format_named

        return format_named(self.format).columnar

    @property
    def folder(self) -> str:
        return pattern_folder(self.pattern)

    @property
    def locations(self) -> tuple[str, ...]:
        return (self.pattern,)

    def finish(self, outputs: list[Any], counters: dict[str, int]) -> None:
        """The files an earlier run wrote with the pattern that this run did not are removed, and (without a
        `schema` given) the folder's files get one schema."""
        if stale := remove_stale_outputs(self.pattern, outputs):
            counters["sink/stale_files_removed"] = len(stale)
            log(
                f"removed {len(stale)} file(s) an earlier run wrote with {self.pattern} that this run did not "
                f"(e.g. {stale[0]})"
            )
        if self.schema is None:
            from zephyr.engine.io.folder_schema import unify_folder_schema

            # one schema per written folder: files whose shards lacked a field get it (null)
            if rewritten := unify_folder_schema(outputs, self.format):
                counters["sink/files_rewritten_to_the_folder_schema"] = rewritten

    def existing(self, task: ShardTask) -> list[str]:
        """With skip_existing, the shard's file when it is already there (the shard need not run)."""
        if not self.skip_existing:
            return []
        path = self.pattern.format(shard=task.shard, total=task.num_tasks or self.total)
        fs, fspath = url_to_fs(path)
        return [path] if fs.exists(fspath) else []

    def write(self, stream: Iterator[Any], task: ShardTask, result: ShardResult) -> None:
        from zephyr.engine.io import write_empty, write_records

        path = self.pattern.format(shard=task.shard, total=task.num_tasks or self.total)
        if remove_dead_temps(path):  # of an attempt killed while writing this shard (kill -9, a lost machine)
            counters.increment("sink/dead_temp_files_removed")
        stats = write_records(_counted_out(stream, result, self.batches), path, format=self.format, schema=self.schema)
        if not stats.records:  # an empty shard still gets its file: a reader can tell it from a lost one
            stats = write_empty(path, format=self.format, schema=self.schema)
        result.paths = [path]
        result.bytes_out = stats.bytes


@dataclass(frozen=True)
class PartitionedSink(FileSink):
    """A FileSink split by a field: shard i and value v of `partition_by` go to
    `pattern.format(shard=i, total=n, <field>=v)`, each shard's files listed in a manifest written after them."""

    partition_by: str = dataclasses.field(kw_only=True)

    def describe(self) -> str:
        return f"write {self.format} {self.pattern} partitioned by {self.partition_by}"

    def write(self, stream: Iterator[Any], task: ShardTask, result: ShardResult) -> None:
        from zephyr.engine.io import write_partitioned
        from zephyr.engine.io.partitioned import remove_dead_partition_temps, write_partition_manifest

        field, values = self.partition_by, {}
        total = task.num_tasks or self.total  # a split or packed plan: the tasks, not the planned targets

        def path_of(value: Any) -> str:
            path = values[value] = self.pattern.format(shard=task.shard, total=total, **{field: value})
            return path

        written = write_partitioned(_counted_out(stream, result, self.batches), field, path_of, format=self.format)
        result.paths = [stats.path for stats in written]
        # its own temporary files are renamed by now: any left in any partition is a dead attempt's
        if removed := remove_dead_partition_temps(self.pattern, field, task.shard, total):
            counters.increment("sink/dead_temp_files_removed", removed)
        value_of = {path: value for value, path in values.items()}
        # after the files: a shard with a manifest finished, and it names every file (none: an empty shard)
        write_partition_manifest(self.pattern, field, task.shard, total, [(value_of[s.path], s) for s in written])
        result.bytes_out = sum(stats.bytes for stats in written)


@dataclass(frozen=True)
class ShardWriterSink(Output):
    """`writer(records, shard=i, total=n, source=file)` writes shard i wherever it likes (a token store's
    shard directory) and returns the URLs it wrote; `sources` are the stage's input files, by shard."""

    writer: Any
    label: str
    total: int
    sources: tuple[str, ...] = ()
    batches: bool = False
    check: Callable[[list[str]], list[str]] | None = None  # see Dataset.write_shards

    @property
    def name(self) -> str:
        return self.label

    def describe(self) -> str:
        return self.label

    def stale(self, urls: list[str]) -> list[str]:
        """The URLs that are gone, and (with `check`) those there that no longer hold what the writer wrote."""
        missing = missing_files(urls)
        if self.check is None:
            return missing
        gone = set(missing)
        return missing + self.check([url for url in urls if url not in gone])

    def write(self, stream: Iterator[Any], task: ShardTask, result: ShardResult) -> None:
        source = self.sources[task.shard] if task.shard < len(self.sources) else None
        total = task.num_tasks or self.total
        result.paths = list(
            self.writer(_counted_out(stream, result, False), shard=task.shard, total=total, source=source)
        )


@dataclass(frozen=True)
class Collect(Output):
    """Pickle the records, in chunks, into the attempt's directory; the driver reads them back."""

    batches: bool = False  # always records: a collect takes no batches
    collects: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "collect"

    def describe(self) -> str:
        return "collect"

    def outputs(self, results: list[ShardResult]) -> list[Any]:
        """The records every shard collected, shard after shard."""
        return [record for result in results if result.result_url for record in read_results(result.result_url)]

    def write(self, stream: Iterator[Any], task: ShardTask, result: ShardResult) -> None:
        url = join(task.out_dir, "result.pkl")
        count = 0
        with atomic_write(url, "wb", compression=None) as handle:
            chunk: list[Any] = []
            for record in stream:
                chunk.append(record)
                if len(chunk) >= 4096:
                    pickle.dump(chunk, handle, protocol=5)
                    count += len(chunk)
                    chunk = []
            if chunk:
                pickle.dump(chunk, handle, protocol=5)
                count += len(chunk)
            result.bytes_out = handle.tell() if hasattr(handle, "tell") else 0
        result.records_out = count
        result.result_url = url


StageOutput = Scatter | FileSink | PartitionedSink | ShardWriterSink | Collect


def pattern_folder(pattern: str) -> str:
    """The folder an output pattern writes into: its fixed part, up to the last '/' ("." for none)."""
    head = pattern.split("{", 1)[0]
    return head.rsplit("/", 1)[0] or "/" if "/" in head else "."


def _counted_out(items: Iterable[Any], result: ShardResult, batches: bool) -> Iterator[Any]:
    for item in items:  # a stream of batches may hold records too (AggregateInput's Python fold)
        result.records_out += item.num_rows if batches and isinstance(item, pa.RecordBatch) else 1
        yield item


def read_results(url: str) -> Iterator[Any]:
    """The records a collect stage pickled for one shard."""
    with open_url(url, "rb", compression=None) as handle:
        while True:
            try:
                chunk = pickle.load(handle)
            except EOFError:
                return
            yield from chunk


def remove_stale_outputs(pattern: str, written: list[str]) -> list[str]:
    """Remove the files an earlier run wrote with `pattern` that this run did not (`written`); returns them.

    A rerun with fewer shards (fewer input files, another --workers) used to leave the earlier run's
    `part-00003` beside the new `part-00000..1`, and whoever read the folder got both runs' records. A sink
    writes its pattern's files, so once every shard of the new run is committed, a file matching the pattern
    (its fields as any shard, total or partition value) that the run did not write is the earlier run's.
    Other files in the folder are left alone, and so are hidden ones (temporary files, manifests)."""
    fs, path_pattern = url_to_fs(pattern)
    regex, glob = "", ""
    for literal, field, _, _ in string.Formatter().parse(path_pattern):
        regex, glob = regex + re.escape(literal), glob + literal
        if field is not None:
            regex += r"\d+" if field in ("shard", "total") else r"[^/]+"
            glob += "*"
    if glob == path_pattern:
        return []  # no fields: one file, replaced in place
    fixed = glob.split("*", 1)[0].rsplit("/", 1)[0]
    keep = {url_to_fs(path)[1] for path in written}
    stale = [
        path
        for path in fs.glob(glob)
        if path not in keep and re.fullmatch(regex, path) and not is_hidden(path, fixed) and fs.isfile(path)
    ]
    for path in stale:
        fs.rm_file(path)
    return stale


def check_output_pattern(pattern: str, partition_by: str | None = None) -> None:
    """Refuse, before anything runs, an output pattern whose real format fields (as `str.format` reads
    them: `string.Formatter().parse`) are not `{shard}` (required: else every shard writes one file and
    all but the last are lost), `{total}` and, with `partition_by`, that field (required, and written
    plainly as `{field}`: partition files are found by it). `part-{{shard:05d}}` has no field at all:
    doubled braces are literal text, a slip of nested f-strings. Format specs are tried once, so a
    `{shard:05q}` fails here and not in every worker."""
    allowed = {"shard", "total", *([partition_by] if partition_by else [])}
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(pattern)]
    except ValueError as error:
        raise ValueError(
            f"output pattern {pattern!r} is not a valid format string ({error}); write placeholders as "
            "{shard}, {total} (e.g. 'out/part-{shard:05d}-of-{total:05d}.jsonl.zst') and a literal brace as {{ or }}"
        ) from None
    names = {
        re.split(r"[.\[]", name, maxsplit=1)[0]: (name, spec, conversion)
        for name, spec, conversion in fields
        if name is not None
    }
    example = "'out/part-{shard:05d}-of-{total:05d}.jsonl.zst'"
    if "shard" not in names:
        escaped = (
            " It has '{{shard': doubled braces are literal text in str.format (a nested f-string makes them);"
            if "{{shard" in pattern
            else ""
        )
        raise ValueError(
            f"output pattern {pattern!r} has no {{shard}} placeholder, so every shard would write the same file and "
            f"all but one would be lost.{escaped} use single braces, e.g. {example}"
        )
    unknown = sorted(set(names) - allowed)
    if unknown:
        raise ValueError(
            f"output pattern {pattern!r} has placeholder(s) {', '.join('{' + u + '}' for u in unknown)} that no shard "
            f"fills: a pattern may use {', '.join('{' + a + '}' for a in sorted(allowed))}"
            + ("" if partition_by else " (and a field named by partition_by=)")
        )
    if partition_by is not None:
        if partition_by not in names:
            raise ValueError(
                f"output pattern {pattern!r} has no {{{partition_by}}} placeholder for partition_by={partition_by!r}; "
                f"use e.g. 'out/{{{partition_by}}}/part-{{shard:05d}}.jsonl.zst'"
            )
        if names[partition_by] != (partition_by, "", None):
            raise ValueError(
                f"output pattern {pattern!r}: write the partition field plainly as {{{partition_by}}} (no format "
                "spec or conversion): the files of each partition are found by it"
            )
    try:
        pattern.format(shard=0, total=1, **({partition_by: "value"} if partition_by else {}))
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as error:
        raise ValueError(
            f"output pattern {pattern!r} does not format: {type(error).__name__}: {error}; shard and total are ints "
            f"(e.g. {{shard:05d}})"
        ) from None
