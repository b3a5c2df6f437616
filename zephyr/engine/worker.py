"""What a worker does for one shard of one stage: read, run the fused ops, write; on any backend.

Narrow ops run as one chain of generators. Each user call is wrapped so an exception is re-raised as a
`UserCodeError` naming the op, stage, shard (its file), the record's position and a preview of it.
"""

from __future__ import annotations

import itertools
import pickle
import resource
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import cloudpickle
import pyarrow as pa

from zephyr.engine import counters
from zephyr.engine import ops as O
from zephyr.engine.errors import BadInputError, UserCodeError, ZephyrError
from zephyr.engine.fs import atomic_write, join, open_url, url_to_fs
from zephyr.engine.plan import SourceShard, Stage, is_expression
from zephyr.engine.shuffle import (
    RunFile, ScatterWriter, ShuffleSpec, _as_records, column_keyed, iter_groups, iter_values, merged_blocks,
)

__all__ = ["ShardTask", "ShardResult", "run_task", "load_stage"]


@dataclass(frozen=True)
class ShardTask:
    stage_url: str  # the pickled Stage, written once by the driver and cached per worker
    stage_index: int
    shard: int
    attempt: int
    out_dir: str  # this attempt's private directory: fenced outputs
    upstream_runs: tuple[tuple[RunFile, ...], ...] = ()  # per upstream stage, all of its run files
    memory_per_worker: int = 1 << 30
    stage_name: str = ""  # for dashboards and logs


@dataclass
class ShardResult:
    shard: int
    attempt: int
    runs: list[RunFile] = field(default_factory=list)  # shuffle output
    paths: list[str] = field(default_factory=list)  # sink output
    result_url: str | None = None  # collected records
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    peak_rss: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    skipped_existing: bool = False


_stage_cache: dict[str, Stage] = {}


def load_stage(url: str) -> Stage:
    """The stage pickled at `url`, loaded once per worker process (large objects ship once)."""
    stage = _stage_cache.get(url)
    if stage is None:
        with open_url(url, "rb", compression=None) as handle:
            stage = cloudpickle.load(handle)
        _stage_cache.clear()  # one stage at a time: release the previous stage's objects
        _stage_cache[url] = stage
    return stage


def run_task(task: ShardTask) -> ShardResult:
    """Run one shard; user exceptions come out as UserCodeError with the shard and record named."""
    started = time.perf_counter()
    counters.reset()
    _reset_peak_rss()
    stage = load_stage(task.stage_url)
    result = ShardResult(task.shard, task.attempt)
    shard_name = _shard_name(stage, task.shard)
    where = f"stage {stage.index} ({stage.name}), shard {task.shard} ({shard_name})"
    try:
        if isinstance(stage.output, O.Sink) and stage.output.skip_existing:
            path = stage.output.pattern.format(shard=task.shard, total=stage.num_shards)
            fs, fspath = url_to_fs(path)
            if fs.exists(fspath):
                result.paths = [path]
                result.skipped_existing = True
                return _finish(result, started)
        records = _read_input(stage, task, result)
        columnar_sink = isinstance(stage.output, O.Sink) and stage.output.format in ("parquet", "vortex")
        batch_scatter = isinstance(stage.output, ShuffleSpec) and column_keyed(stage.output)
        records = _apply_ops(
            stage.ops, records, where, batched=_reads_batches(stage) if stage.shuffle_input is None else False,
            keep_batches_at_end=columnar_sink or batch_scatter,
        )
        _write_output(stage, task, records, result)
    except (UserCodeError, BadInputError):
        raise
    except ZephyrError as error:
        raise type(error)(f"{where}: {error}") from error
    except Exception as error:  # noqa: BLE001 - an error outside user calls: still name the shard
        raise UserCodeError(
            f"{where} failed: {type(error).__name__}: {error}", traceback_text=traceback.format_exc()
        ) from None
    return _finish(result, started)


def _reset_peak_rss() -> None:
    """Restart the kernel's peak-RSS count (VmHWM), so a warm worker reports each task's own peak."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass  # not Linux, or not allowed: the process-lifetime peak is reported instead


def _peak_rss() -> int:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _finish(result: ShardResult, started: float) -> ShardResult:
    result.seconds = time.perf_counter() - started
    result.peak_rss = _peak_rss()
    result.counters = counters.reset()
    return result


def _shard_name(stage: Stage, shard: int) -> str:
    if stage.shards:
        return stage.shards[shard].name
    return f"shuffle target {shard}"


# ------------------------------------------------------------------------------------------ input
def _read_input(stage: Stage, task: ShardTask, result: ShardResult) -> Iterator[Any]:
    if stage.shuffle_input is None:
        shard = stage.shards[task.shard]
        result.bytes_in = shard.size
        if _reads_batches(stage):
            from zephyr.engine.io import read_batches

            source = stage.source
            batches = read_batches(
                shard.path, format=source.format, columns=source.columns, filter=source.filter,
                batch_size=stage.ops[0].batch_size if stage.ops else _SCATTER_BATCH_ROWS, on_bad_record=source.on_bad_record,
            )
            return _counted_batches(batches, result)
        return _counted(_read_source(stage.source, shard), result)
    shuffle = stage.shuffle_input
    budget = task.memory_per_worker // 2
    spill = join(task.out_dir, "spill")
    upstream_runs = [run for runs in task.upstream_runs for run in runs]
    result.bytes_in = sum(run.segments[task.shard][3] for run in upstream_runs if task.shard in run.segments)
    blocks = merged_blocks(
        upstream_runs, task.shard, memory_budget=budget, spill_dir=spill, ordered=shuffle.kind != "reshard"
    )
    blocks = _counted_batches(blocks, result)
    if shuffle.kind == "reshard":
        return iter_values(blocks)
    if shuffle.kind == "group":
        return _reduce_groups(iter_groups(blocks), shuffle.reducer, stage, task.shard)
    return _join_groups(iter_groups(blocks), shuffle.join)


_SCATTER_BATCH_ROWS = 65536  # Arrow batch size read for a group_by on fields straight from columnar files


def _reads_batches(stage: Stage) -> bool:
    """A columnar file source followed by map_batches, or feeding a group_by on fields directly:
    hand the reader's Arrow batches straight over."""
    from zephyr.engine.io import infer_format

    if not isinstance(stage.source, O.FilesSource):
        return False
    if stage.ops:
        if not isinstance(stage.ops[0], O.MapBatches):
            return False
    elif not (isinstance(stage.output, ShuffleSpec) and column_keyed(stage.output)):
        return False
    shard = stage.shards[0] if stage.shards else None
    fmt = stage.source.format or (infer_format(shard.path) if shard else None)
    return fmt in ("parquet", "vortex")


_END = object()  # end of a stream: records may be None, so None cannot mark it
_BATCH_TYPES = (pa.RecordBatch, pa.Table)  # a tuple: `A | B` would build a union at every call


def _rows(item: Any) -> int:
    return item.num_rows if isinstance(item, _BATCH_TYPES) else 1


def _counted(records: Iterable[Any], result: ShardResult) -> Iterator[Any]:
    # records only: the per-record type test of `_rows` cost ~5% of a group_by's worker time
    for record in records:
        result.records_in += 1
        yield record


def _counted_batches(batches: Iterable[Any], result: ShardResult) -> Iterator[Any]:
    for batch in batches:
        result.records_in += batch.num_rows
        yield batch


def _read_source(source: O.Source, shard: SourceShard) -> Iterator[Any]:
    if isinstance(source, O.ListSource):
        return iter(shard.records)
    if isinstance(source, O.IterableSource):
        return iter(source.shard_fn(shard.index))
    from zephyr.engine.io import read_records

    return read_records(
        shard.path,
        format=source.format,
        columns=source.columns,
        filter=source.filter,
        on_bad_record=source.on_bad_record,
    )


def _reduce_groups(groups: Iterator[tuple[Any, Iterator[Any]]], reducer: Any, stage: Stage, shard: int) -> Iterator[Any]:
    for key, items in groups:
        try:
            yield from _as_records(reducer(key, items))
        except Exception as error:  # noqa: BLE001
            raise UserCodeError(
                f"reducer {getattr(reducer, '__qualname__', reducer)!s} failed in stage {stage.index}, shard "
                f"{shard}, for key {_preview(key)}: {type(error).__name__}: {error}",
                traceback_text=traceback.format_exc(),
            ) from None


def _join_groups(groups: Iterator[tuple[Any, Iterator[Any]]], join_op: O.Join) -> Iterator[Any]:
    combine = join_op.combine or _merge_records
    for _, items in groups:
        lefts: list[Any] = []
        matched = False
        for side, record in items:
            if side == 0:
                lefts.append(record)
                continue
            matched = True
            for left in lefts:
                yield combine(left, record)
        if not matched and join_op.how == "left":
            for left in lefts:
                yield combine(left, None) if join_op.combine else left


def _merge_records(left: Any, right: Any) -> Any:
    if right is None:
        return left
    return {**left, **right}


# -------------------------------------------------------------------------------------------- ops
def _apply_ops(
    ops: tuple[Any, ...], stream: Iterator[Any], where: str, *, batched: bool, keep_batches_at_end: bool
) -> Iterator[Any]:
    """Chain the ops; Arrow batches flow between consecutive map_batches (and into a columnar sink)
    and are turned into records only where an op needs records."""
    for position, op in enumerate(ops):
        if isinstance(op, O.MapBatches):
            last = position == len(ops) - 1
            emit_batches = (not last and isinstance(ops[position + 1], O.MapBatches)) or (last and keep_batches_at_end)
            stream = _map_batches(op, stream, where, batched=batched, emit_batches=emit_batches)
            batched = emit_batches
            continue
        if batched:
            stream = _to_records(stream)
            batched = False
        stream = _apply(op, stream, where)
    if batched and not keep_batches_at_end:
        stream = _to_records(stream)
    return stream


def _to_records(batches: Iterator[Any]) -> Iterator[Any]:
    for batch in batches:
        yield from batch.to_pylist()


def _apply(op: Any, records: Iterator[Any], where: str) -> Iterator[Any]:
    if isinstance(op, O.Map):
        return _guarded_map(op, records, where)
    if isinstance(op, O.FlatMap):
        return _guarded_flat_map(op, records, where)
    if isinstance(op, O.Filter):
        predicate = op.predicate.evaluate if is_expression(op.predicate) else op.predicate
        return _guarded_filter(op, predicate, records, where)
    if isinstance(op, O.Select):
        columns = op.columns
        return ({c: r.get(c) for c in columns} for r in records)
    if isinstance(op, O.TakePerShard):
        return islice(records, op.n)
    if isinstance(op, O.MapBatches):
        return _map_batches(op, records, where)
    if isinstance(op, O.MapShard):
        return _guarded_shard(op, records, where)
    raise ZephyrError(f"unknown op {type(op).__name__}")


def _preview(record: Any, limit: int = 300) -> str:
    text = repr(record)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _user_error(op: Any, where: str, index: int, record: Any, error: Exception) -> UserCodeError:
    return UserCodeError(
        f"{O.op_name(op)} failed in {where}, on record #{index}: {type(error).__name__}: {error}\n"
        f"  record: {_preview(record)}",
        traceback_text=traceback.format_exc(),
    )


def _guarded_map(op: O.Map, records: Iterator[Any], where: str) -> Iterator[Any]:
    fn = op.fn
    for index, record in enumerate(records):
        try:
            out = fn(record)
        except Exception as error:  # noqa: BLE001
            raise _user_error(op, where, index, record, error) from None
        yield out


def _guarded_filter(op: O.Filter, predicate: Any, records: Iterator[Any], where: str) -> Iterator[Any]:
    for index, record in enumerate(records):
        try:
            keep = predicate(record)
        except Exception as error:  # noqa: BLE001
            raise _user_error(op, where, index, record, error) from None
        if keep:
            yield record


def _guarded_flat_map(op: O.FlatMap, records: Iterator[Any], where: str) -> Iterator[Any]:
    fn = op.fn
    for index, record in enumerate(records):
        try:
            outputs = iter(fn(record))
            while True:  # step by hand so an error inside a generator is still tied to its record
                try:
                    out = next(outputs)
                except StopIteration:
                    break
                yield out
        except Exception as error:  # noqa: BLE001
            raise _user_error(op, where, index, record, error) from None


def _guarded_shard(op: O.MapShard, records: Iterator[Any], where: str) -> Iterator[Any]:
    try:
        yield from op.fn(records)
    except (UserCodeError, BadInputError):
        raise
    except Exception as error:  # noqa: BLE001
        raise UserCodeError(
            f"{O.op_name(op)} failed in {where}: {type(error).__name__}: {error}",
            traceback_text=traceback.format_exc(),
        ) from None


def _map_batches(
    op: O.MapBatches, stream: Iterator[Any], where: str, *, batched: bool, emit_batches: bool
) -> Iterator[Any]:
    index = 0
    batches = stream if batched else _batches_of(stream, op.batch_size, where)
    for batch in batches:
        try:
            out = op.fn(batch)
        except Exception as error:  # noqa: BLE001
            first = batch.slice(0, 1).to_pylist()[0] if batch.num_rows else None
            raise UserCodeError(
                f"{O.op_name(op)} failed in {where}, on the batch of records #{index}..#{index + batch.num_rows - 1}: "
                f"{type(error).__name__}: {error}\n  first record: {_preview(first)}",
                traceback_text=traceback.format_exc(),
            ) from None
        index += batch.num_rows
        if out is None:
            continue
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()
            if emit_batches:
                yield from out
            else:
                for part in out:
                    yield from part.to_pylist()
        elif isinstance(out, pa.RecordBatch):
            if emit_batches:
                yield out
            else:
                yield from out.to_pylist()
        else:
            raise UserCodeError(
                f"{O.op_name(op)} in {where} returned {type(out).__name__}; map_batches functions must return "
                "a pyarrow.RecordBatch or pyarrow.Table (build one with pyarrow.RecordBatch.from_pydict)"
            )


def _batches_of(records: Iterator[Any], size: int, where: str) -> Iterator[pa.RecordBatch]:
    from zephyr.engine.io import batch_from_dicts  # unions the fields of all rows

    start = 0
    while True:
        chunk = list(islice(records, size))
        if not chunk:
            return
        yield batch_from_dicts(chunk, where=f"{where}, records #{start}..#{start + len(chunk) - 1}", error=UserCodeError)
        start += len(chunk)


# ----------------------------------------------------------------------------------------- output
def _write_output(stage: Stage, task: ShardTask, records: Iterator[Any], result: ShardResult) -> None:
    output = stage.output
    if isinstance(output, ShuffleSpec):
        writer = ScatterWriter(
            output, join(task.out_dir, "runs"), shard=task.shard, flush_bytes=task.memory_per_worker // 4
        )
        first = next(records, _END)
        if first is not _END:  # a None record is a record, not the end of the stream
            add = writer.add_batch if isinstance(first, _BATCH_TYPES) else writer.add  # a stream is all one kind
            for item in itertools.chain([first], records):
                add(item)
        result.runs = writer.close()
        result.records_out = writer.records
        result.bytes_out = sum(run.bytes for run in result.runs)
        return
    if isinstance(output, O.Sink):
        from zephyr.engine.io import write_partitioned, write_records

        if output.partition_by is not None:
            written = write_partitioned(
                _count_out(records, result), output.partition_by,
                lambda value: output.pattern.format(shard=task.shard, total=stage.num_shards, **{output.partition_by: value}),
                format=output.format,
            )
            result.paths = [stats.path for stats in written]
            result.bytes_out = sum(stats.bytes for stats in written)
            return
        path = output.pattern.format(shard=task.shard, total=stage.num_shards)
        stats = write_records(_count_out(records, result), path, format=output.format)
        if stats.records:
            result.paths = [path]
            result.bytes_out = stats.bytes
        return
    # collect: pickle the records in chunks into this attempt's directory
    url = join(task.out_dir, "result.pkl")
    with atomic_write(url, "wb", compression=None) as handle:
        chunk: list[Any] = []
        for record in records:
            chunk.append(record)
            result.records_out += 1
            if len(chunk) >= 4096:
                pickle.dump(chunk, handle, protocol=5)
                chunk = []
        if chunk:
            pickle.dump(chunk, handle, protocol=5)
        result.bytes_out = handle.tell() if hasattr(handle, "tell") else 0
    result.result_url = url


def _count_out(records: Iterator[Any], result: ShardResult) -> Iterator[Any]:
    for record in records:
        result.records_out += _rows(record)
        yield record


def read_results(url: str) -> Iterator[Any]:
    """The records a collect stage pickled for one shard."""
    with open_url(url, "rb", compression=None) as handle:
        while True:
            try:
                chunk = pickle.load(handle)
            except EOFError:
                return
            yield from chunk

