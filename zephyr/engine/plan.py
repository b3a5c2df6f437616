"""Planner: lowers a Dataset's logical ops, once, into physical stages split at shuffle boundaries.

Like a compiler lowering an IR: each logical op has one lowering function (`_LOWERINGS`) that either
adds a physical step to the current stage's pipeline (narrow ops), pushes itself into the stage's file
reader (leading expression filters and selects), or ends the stage in an output and starts the next one
on a shuffle read (wide ops). A stage is then `input -> pipeline -> output`, each a tagged type with its
own behaviour (`inputs`, `pipeline`, `outputs`), so the worker just runs `output.write(ops(input.open()))`.

Every stage has a fingerprint of its input, steps, output and upstream stages: completed shards are
checkpointed under it, so a rerun of the same pipeline resumes instead of recomputing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zephyr.engine import ops as O
from zephyr.engine.context import ExecutionConfig
from zephyr.engine.expr import Expr
from zephyr.engine.inputs import (
    AggregateInput,
    FileInput,
    GroupInput,
    IterableInput,
    JoinInput,
    ListInput,
    ReshardInput,
    SourceShard,
    StageInput,
)
from zephyr.engine.outputs import Collect, FileSink, PartitionedSink, Scatter, ShardWriterSink, StageOutput
from zephyr.engine.pipeline import Pipeline, Step
from zephyr.engine.run.pending import pending_producer
from zephyr.engine.shuffle import ShuffleSpec
from zephyr.errors import PlanError
from zephyr.fs import url_to_fs
from zephyr.versioning import describe, digest, undescribable

__all__ = ["Stage", "Plan", "plan", "is_expression"]

_SCATTER_BATCH_ROWS = 65536  # Arrow batch size read for a group_by on fields straight from columnar files


@dataclass(frozen=True)
class Stage:
    """One physical stage: every shard runs `output.write(ops(input.open(shard)))`."""

    index: int
    input: StageInput
    ops: Pipeline
    output: StageOutput
    num_shards: int
    fingerprint: str
    resources: tuple[Any, ...] = ()  # what its ops ask of a worker (`resources=` of map & co), in op order
    # why its checkpoints may not be reused ("" when they may): its fingerprint could not describe what
    # its code reads (an open file, a live client: `versioning.undescribable`), or it reads a stage that reruns
    unreusable: str = ""

    @property
    def upstream(self) -> tuple[int, ...]:
        """The stages whose shuffle output this stage reads."""
        return self.input.upstream

    @property
    def name(self) -> str:
        parts = [self.input.name, *self.ops.names]
        if not self.output.collects:
            parts.append(self.output.name)
        return " -> ".join(parts)


@dataclass(frozen=True)
class Plan:
    """A pipeline lowered into stages, in the order they run (the last one's output is the run's)."""

    stages: tuple[Stage, ...]
    # --estimate's sample runs: (read, of) per sampled source, in bytes for files of known size, else shards
    sampled: tuple[tuple[int, int], ...] = ()

    @property
    def fingerprint(self) -> str:
        """The last stage's fingerprint, which covers every stage it reads: the run's identity."""
        return self.stages[-1].fingerprint

    @property
    def pending(self) -> list[str]:
        """Who would write the inputs a dry run planned before they exist (`zephyr.engine.run.pending`)."""
        return [stage.input.pending for stage in self.stages if stage.input.pending]

    def describe(self) -> str:
        """The plan as `Dataset.explain` and a dry run print it: one line per stage and what it reads."""
        lines = [f"plan {self.fingerprint[:12]}: {len(self.stages)} stage(s)"]
        for stage in self.stages:
            shards = stage.num_shards or "?"  # 0: it reads what a dry run's earlier step would write
            lines.append(f"  stage {stage.index} [{shards} shards] {stage.name}")
            lines.append(
                f"      reads {stage.input.describe()}; fused ops: {len(stage.ops.steps)}; {stage.output.describe()}"
            )
        return "\n".join(lines)


def is_expression(predicate: Any) -> bool:
    """A `col`/`lit` expression (pushed into readers, described by its readable form)."""
    return isinstance(predicate, Expr)


# ------------------------------------------------------------------------------------------- plan
def plan(dataset: Any, config: ExecutionConfig) -> Plan:
    """Turn `dataset` into stages; raises PlanError naming the op when a pipeline cannot run."""
    planner = _Planner(config)
    last = planner.open_dataset(dataset)
    planner.finish(last, last.sink or Collect())
    stages = tuple(stage for stage in planner.stages if stage is not None)
    assert len(stages) == len(planner.stages), "every reserved stage slot is filled"
    return Plan(stages)


@dataclass
class _Builder:
    """A stage being lowered: its input, the steps so far, and the sink if the pipeline ends in one."""

    index: int
    input: StageInput
    num_shards: int
    steps: list[Step] = dataclasses.field(default_factory=list)
    sink: StageOutput | None = None
    resources: list[Any] = dataclasses.field(default_factory=list)


class _Planner:
    def __init__(self, config: ExecutionConfig) -> None:
        self.config = config
        self.stages: list[Stage | None] = []  # a slot is reserved when a stage starts, filled when it ends
        self.current: _Builder | None = None

    @property
    def stage(self) -> _Builder:
        assert self.current is not None
        return self.current

    def open_dataset(self, dataset: Any) -> _Builder:
        """Lower `dataset`'s source and ops; returns its last stage, still open (its output not chosen)."""
        outer = self.current
        stage_input, num_shards = _lower_source(dataset.source, self.config)
        self.start(stage_input, num_shards)
        for op in dataset.ops:
            if self.stage.sink is not None:
                raise PlanError(f"{self.stage.sink.name} must be the last op of a pipeline")
            lowering = _LOWERINGS.get(type(op))
            if lowering is None:
                raise PlanError(f"no lowering for op {type(op).__name__}: add one to plan._LOWERINGS")
            request = getattr(op, "resources", None)
            if request is not None:  # asked of the workers of the stage the op runs in, and left out of the
                # step: where an op runs does not change what it computes, so its fingerprint does not hold it
                self.stage.resources.append(request)
                op = dataclasses.replace(op, resources=None)
            lowering(op, self)
        last, self.current = self.stage, outer
        return last

    def start(self, stage_input: StageInput, num_shards: int) -> None:
        self.current = _Builder(len(self.stages), stage_input, num_shards)
        self.stages.append(None)

    def add(self, step: Step) -> None:
        self.stage.steps.append(step)

    def finish(self, builder: _Builder, output: StageOutput) -> int:
        """Choose `builder`'s output, compile its pipeline, fingerprint it; returns its index."""
        if builder.sink is not None and output is not builder.sink:
            raise PlanError(f"{builder.sink.name} must be the last op of a pipeline, not of a joined dataset")
        stage_input, steps = builder.input, tuple(builder.steps)
        batches_in = False
        if isinstance(stage_input, FileInput):
            stage_input = dataclasses.replace(stage_input, batch_rows=_batch_rows(stage_input, steps, output))
            batches_in = stage_input.batch_rows is not None
        elif isinstance(stage_input, AggregateInput):
            stage_input = dataclasses.replace(stage_input, as_batches=not steps and output.takes_batches)
            batches_in = stage_input.as_batches
        pipeline = Pipeline(steps, batches_in=batches_in, want_batches=output.takes_batches)
        output = dataclasses.replace(output, batches=pipeline.emits_batches)
        upstream = [self._built(i) for i in stage_input.upstream]
        described = [
            builder.num_shards,
            _describe_fields(stage_input),
            [describe(s, s.name) for s in steps],
            pipeline.batches_in,
            pipeline.want_batches,
            _describe_fields(output),
            [stage.fingerprint for stage in upstream],
        ]
        reasons = undescribable(described) + [
            f"it reads stage {stage.index}, which reruns" for stage in upstream if stage.unreusable
        ]
        stage = Stage(
            builder.index,
            stage_input,
            pipeline,
            output,
            builder.num_shards,
            digest(described),
            tuple(builder.resources),
            reasons[0] if reasons else "",
        )
        self.stages[builder.index] = stage
        return builder.index

    def end_stage(self, output: StageOutput) -> int:
        return self.finish(self.stage, output)

    def _built(self, index: int) -> Stage:
        stage = self.stages[index]
        if stage is None:
            raise PlanError(f"stage {index} is read before it was planned")
        return stage


def _batch_rows(stage_input: FileInput, steps: tuple[Step, ...], output: StageOutput) -> int | None:
    """Read a columnar source as Arrow batches when a map_batches comes first, or when a scatter on
    fields follows directly: the reader's batches are handed over without becoming records."""
    if steps:
        if not isinstance(steps[0], O.MapBatches):
            return None
        rows = steps[0].batch_size
    elif isinstance(output, Scatter) and output.takes_batches:
        rows = _SCATTER_BATCH_ROWS
    else:
        return None
    from zephyr.engine.io import format_named, infer_format

    shard = stage_input.shards[0] if stage_input.shards else None
    fmt = stage_input.source.format or (infer_format(shard.path) if shard and shard.path else None)
    return rows if fmt is not None and format_named(fmt).columnar else None


# -------------------------------------------------------------------------------------- lowerings
def _lower_source(source: O.Source, config: ExecutionConfig) -> tuple[StageInput, int]:
    if isinstance(source, O.ListSource):
        records = source.records
        n = source.num_shards or max(1, min(len(records), config.num_workers))
        bounds = [len(records) * i // n for i in range(n + 1)]
        shards = tuple(
            SourceShard(i, f"list[{bounds[i]}:{bounds[i + 1]}]", records=records[bounds[i] : bounds[i + 1]])
            for i in range(n)
        )
        return ListInput(shards, len(records)), n
    if isinstance(source, O.IterableSource):
        return IterableInput(source.shard_fn, source.num_shards), source.num_shards
    if isinstance(source, O.FilesSource):
        if source.on_bad_record is None:  # resolved here, so the fingerprint holds the policy that applies
            source = dataclasses.replace(source, on_bad_record=config.on_bad_record)
        pending = {p: who for p in source.patterns if config.dry_run and (who := pending_producer(p)) is not None}
        files = [
            (path, size)
            for pattern in source.patterns
            if pattern not in pending
            for path, size in _glob_with_sizes(pattern, source.format)
        ]
        shards = tuple(SourceShard(i, path, path=path, size=size) for i, (path, size) in enumerate(files))
        if pending:  # a dry run: an earlier step would write these; planned with an unknown shard count (0)
            return FileInput(source, shards, pending=", ".join(dict.fromkeys(pending.values()))), 0
        return FileInput(source, shards), len(shards)
    raise PlanError(f"unknown source {type(source).__name__}")


def _lower_step(op: O.NarrowOp, planner: _Planner) -> None:
    planner.add(op)  # the stage's pipeline runs the op as it is


def _lower_filter(op: O.Filter, planner: _Planner) -> None:
    stage = planner.stage
    if isinstance(stage.input, FileInput) and not stage.steps and is_expression(op.predicate):
        source = stage.input.source  # pushed into the reader: row groups it rules out are never decoded
        combined = op.predicate if source.filter is None else (source.filter & op.predicate)
        stage.input = dataclasses.replace(stage.input, source=dataclasses.replace(source, filter=combined))
        return
    planner.add(op)


def _lower_select(op: O.Select, planner: _Planner) -> None:
    stage = planner.stage
    if isinstance(stage.input, FileInput) and not stage.steps:
        source = stage.input.source  # pushed into the reader: other columns are never read
        keep = op.columns if source.columns is None else tuple(c for c in source.columns if c in op.columns)
        stage.input = dataclasses.replace(stage.input, source=dataclasses.replace(source, columns=keep))
        return
    planner.add(op)


def _lower_reshard(op: O.Reshard, planner: _Planner) -> None:
    upstream = planner.end_stage(Scatter(ShuffleSpec(op.num_shards)))
    planner.start(ReshardInput((upstream,)), op.num_shards)


def _lower_group_by(op: O.GroupBy, planner: _Planner) -> None:
    n = op.num_shards or planner.stage.num_shards
    upstream = planner.end_stage(Scatter(ShuffleSpec(n, op.key, op.sort_by, op.combiner, ranges=op.ranges)))
    planner.start(GroupInput((upstream,), op.reducer, op.batch), n)


def _lower_aggregate(op: O.Aggregate, planner: _Planner) -> None:
    n = op.num_shards or planner.stage.num_shards
    upstream = planner.end_stage(Scatter(ShuffleSpec(n, aggregation=op.aggregation)))
    planner.start(AggregateInput((upstream,), op.aggregation), n)


def _lower_union(op: O.Union, planner: _Planner) -> None:
    # every input scatters round-robin into n targets; one reshard gather concatenates them all
    first = planner.stage
    others = [planner.open_dataset(other) for other in op.others]
    n = op.num_shards or max(builder.num_shards for builder in (first, *others))
    indices = [planner.finish(builder, Scatter(ShuffleSpec(n))) for builder in (first, *others)]
    planner.start(ReshardInput(tuple(indices)), n)


def _lower_join(op: O.Join, planner: _Planner) -> None:
    left = planner.stage
    right = planner.open_dataset(op.right)
    n = op.num_shards or max(left.num_shards, right.num_shards)
    right_index = planner.finish(right, Scatter(ShuffleSpec(n, op.right_key, tag=1)))
    left_index = planner.finish(left, Scatter(ShuffleSpec(n, op.left_key, tag=0)))
    planner.start(JoinInput((left_index, right_index), op.how, op.combine), n)


def _lower_sink(op: O.Sink, planner: _Planner) -> None:
    stage = planner.stage
    if op.partition_by is not None:  # partitions unify their folder's schema
        stage.sink = PartitionedSink(op.pattern, op.format, stage.num_shards, partition_by=op.partition_by)
    else:
        stage.sink = FileSink(op.pattern, op.format, stage.num_shards, op.skip_existing, schema=op.schema)


def _lower_shard_sink(op: O.ShardSink, planner: _Planner) -> None:
    stage = planner.stage
    sources = tuple(s.path or s.name for s in stage.input.shards) if isinstance(stage.input, FileInput) else ()
    stage.sink = ShardWriterSink(op.writer, op.name, stage.num_shards, sources, check=op.check)


_LOWERINGS: dict[type, Callable[[Any, _Planner], None]] = {
    O.Map: _lower_step,
    O.FlatMap: _lower_step,
    O.Filter: _lower_filter,
    O.Select: _lower_select,
    O.MapBatches: _lower_step,
    O.MapShard: _lower_step,
    O.TakePerShard: _lower_step,
    O.Reshard: _lower_reshard,
    O.GroupBy: _lower_group_by,
    O.Aggregate: _lower_aggregate,
    O.Join: _lower_join,
    O.Union: _lower_union,
    O.Sink: _lower_sink,
    O.ShardSink: _lower_shard_sink,
}


def _glob_with_sizes(pattern: str, format: str | None = None) -> list[tuple[str, int]]:
    from zephyr.engine.io.listing import data_files

    paths = data_files(pattern, format)  # directories read recursively; hidden and _ files never
    fs, _ = url_to_fs(pattern)
    out = []
    for url in paths:
        try:
            size = int(fs.size(url_to_fs(url)[1]) or 0)
        except Exception:  # noqa: BLE001 - size is for stats and fingerprints only
            size = 0
        out.append((url, size))
    return out


def _describe_fields(value: Any) -> list[Any]:
    """A physical input or output described field by field (as deep as `describe` goes for an op)."""
    return [type(value).__name__] + [describe(getattr(value, f.name)) for f in dataclasses.fields(value)]
