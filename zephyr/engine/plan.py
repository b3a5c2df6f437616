"""Planner: a Dataset's logical ops become stages of fused narrow ops split at shuffle boundaries.

Each stage reads a source (one shard per file / list chunk) or the output of a shuffle, runs its narrow
ops as one streaming generator per shard, and ends in a shuffle scatter, a sink, or collected results.
Every stage has a fingerprint of its inputs, ops and upstream stages: completed shards are checkpointed
under it, so a rerun of the same pipeline resumes instead of recomputing.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pickle
from dataclasses import dataclass
from typing import Any

import xxhash

from zephyr.engine import ops as O
from zephyr.engine.context import ExecutionConfig
from zephyr.engine.errors import PlanError
from zephyr.fs import url_to_fs
from zephyr.engine.shuffle import ShuffleSpec

__all__ = ["SourceShard", "ShuffleInput", "Stage", "Plan", "plan", "is_expression"]


@dataclass(frozen=True)
class SourceShard:
    """What one source shard reads: a file, a chunk of a list, or `shard_fn(index)`."""

    index: int
    name: str  # for messages: the file path, or "list[0:100]"
    path: str | None = None
    size: int = 0
    records: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class ShuffleInput:
    """A stage input that gathers the shuffle written by `upstream` stages.

    kind "group": group rows by key and apply `reducer`; "join": co-group two sides; "reshard": concat.
    """

    upstream: tuple[int, ...]
    kind: str
    reducer: Any = None
    join: O.Join | None = None


@dataclass(frozen=True)
class Stage:
    index: int
    source: O.Source | None  # set for source stages
    shards: tuple[SourceShard, ...]  # source shards (empty for shuffle stages)
    shuffle_input: ShuffleInput | None
    ops: tuple[Any, ...]
    output: ShuffleSpec | O.Sink | None  # None: collect records
    num_shards: int
    fingerprint: str

    @property
    def name(self) -> str:
        parts = []
        if self.source is not None:
            parts.append(_source_name(self.source))
        elif self.shuffle_input is not None:
            si = self.shuffle_input
            parts.append(
                {"group": f"group_by({_callable_name(si.reducer)})", "join": "join", "reshard": "reshard"}[
                    si.kind
                ]
            )
        parts += [O.op_name(op) for op in self.ops]
        if isinstance(self.output, O.Sink):
            parts.append(O.op_name(self.output))
        elif isinstance(self.output, ShuffleSpec):
            parts.append("scatter")
        return " -> ".join(parts)


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]

    @property
    def fingerprint(self) -> str:
        return self.stages[-1].fingerprint

    def describe(self) -> str:
        lines = [f"plan {self.fingerprint[:12]}: {len(self.stages)} stage(s)"]
        for stage in self.stages:
            if stage.shuffle_input is not None:
                reads = f"shuffle of stage(s) {', '.join(map(str, stage.shuffle_input.upstream))}"
            else:
                reads = f"{len(stage.shards)} source shard(s)"
            if isinstance(stage.output, ShuffleSpec):
                writes = f"scatter to {stage.output.num_targets} shard(s)"
            elif isinstance(stage.output, O.Sink):
                writes = f"write {stage.output.format} {stage.output.pattern}"
            else:
                writes = "collect"
            lines.append(f"  stage {stage.index} [{stage.num_shards} shards] {stage.name}")
            lines.append(f"      reads {reads}; fused ops: {len(stage.ops)}; {writes}")
        return "\n".join(lines)


def is_expression(predicate: Any) -> bool:
    return hasattr(predicate, "to_arrow") and hasattr(predicate, "evaluate")


# ------------------------------------------------------------------------------------------- plan
def plan(dataset: Any, config: ExecutionConfig) -> Plan:
    """Turn `dataset` into stages; raises PlanError naming the op when a pipeline cannot run."""
    stages: list[Stage] = []
    _plan_into(dataset, config, stages)
    return Plan(tuple(stages))


def _plan_into(dataset: Any, config: ExecutionConfig, stages: list[Stage]) -> int:
    """Append the stages of `dataset` to `stages`; returns the index of its last stage."""
    source, shards = _resolve_source(dataset.source, config)
    current = _StageBuilder(index=len(stages), source=source, shards=shards, num_shards=len(shards))
    for position, op in enumerate(dataset.ops):
        if isinstance(op, O.Sink):
            if position != len(dataset.ops) - 1:
                raise PlanError(f"{O.op_name(op)} must be the last op of a pipeline")
            current.output = op
        elif isinstance(op, O.GroupBy | O.Reshard | O.Join):
            if isinstance(op, O.Reshard):
                n = op.num_shards
                current.output = ShuffleSpec(n)
                upstream = (current.index,)
                shuffle = ShuffleInput(upstream, "reshard")
            elif isinstance(op, O.GroupBy):
                n = op.num_shards or current.num_shards
                current.output = ShuffleSpec(n, op.key, op.sort_by, op.combiner)
                upstream = (current.index,)
                shuffle = ShuffleInput(upstream, "group", reducer=op.reducer)
            else:
                stages.append(current.build(stages))
                right_last = _plan_into(op.right, config, stages)
                right = stages[right_last]
                n = op.num_shards or max(current.num_shards, right.num_shards)
                stages[right_last] = _with_output(right, ShuffleSpec(n, op.right_key, tag=1), stages)
                current.output = ShuffleSpec(n, op.left_key, tag=0)
                stages[current.index] = current.build(stages)
                upstream = (current.index, right_last)
                shuffle = ShuffleInput(upstream, "join", join=op)
                current = _StageBuilder(index=len(stages), shuffle_input=shuffle, num_shards=n)
                continue
            stages.append(current.build(stages))
            current = _StageBuilder(index=len(stages), shuffle_input=shuffle, num_shards=n)
        else:
            current.ops.append(op)
    _push_down(current)
    stages.append(current.build(stages))
    return current.index


@dataclass
class _StageBuilder:
    index: int
    num_shards: int
    source: O.Source | None = None
    shards: tuple[SourceShard, ...] = ()
    shuffle_input: ShuffleInput | None = None
    ops: list[Any] = dataclasses.field(default_factory=list)
    output: Any = None

    def build(self, stages: list[Stage]) -> Stage:
        _push_down(self)
        upstream_fps = (
            [stages[i].fingerprint for i in self.shuffle_input.upstream if i < len(stages)]
            if self.shuffle_input
            else []
        )
        fingerprint = _fingerprint(
            [
                self.num_shards,
                _describe(self.source),
                [(s.path, s.size, _records_digest(s.records)) for s in self.shards],
                _describe(self.shuffle_input),
                [_describe(op) for op in self.ops],
                _describe(self.output),
                upstream_fps,
            ]
        )
        return Stage(
            self.index,
            self.source,
            self.shards,
            self.shuffle_input,
            tuple(self.ops),
            self.output,
            self.num_shards,
            fingerprint,
        )


def _with_output(stage: Stage, output: Any, stages: list[Stage]) -> Stage:
    builder = _StageBuilder(
        stage.index, stage.num_shards, stage.source, stage.shards, stage.shuffle_input, list(stage.ops), output
    )
    return builder.build(stages)


def _push_down(builder: _StageBuilder) -> None:
    """Move leading expression filters and selects into a file source, so readers can skip data."""
    if not isinstance(builder.source, O.FilesSource):
        return
    source = builder.source
    while builder.ops:
        op = builder.ops[0]
        if isinstance(op, O.Filter) and is_expression(op.predicate):
            combined = op.predicate if source.filter is None else (source.filter & op.predicate)
            source = dataclasses.replace(source, filter=combined)
        elif isinstance(op, O.Select):
            keep = op.columns if source.columns is None else tuple(c for c in source.columns if c in op.columns)
            source = dataclasses.replace(source, columns=keep)
        else:
            break
        builder.ops.pop(0)
    builder.source = source


def _resolve_source(source: O.Source, config: ExecutionConfig) -> tuple[O.Source, tuple[SourceShard, ...]]:
    if isinstance(source, O.ListSource):
        records = source.records
        n = source.num_shards or max(1, min(len(records), config.num_workers))
        bounds = [len(records) * i // n for i in range(n + 1)]
        shards = tuple(
            SourceShard(i, f"list[{bounds[i]}:{bounds[i + 1]}]", records=records[bounds[i] : bounds[i + 1]])
            for i in range(n)
        )
        return source, shards
    if isinstance(source, O.IterableSource):
        return source, tuple(SourceShard(i, f"{_callable_name(source.shard_fn)}({i})") for i in range(source.num_shards))
    if isinstance(source, O.FilesSource):
        shards = []
        for pattern in source.patterns:
            for path, size in _glob_with_sizes(pattern):
                shards.append(SourceShard(len(shards), path, path=path, size=size))
        return source, tuple(shards)
    raise PlanError(f"unknown source {type(source).__name__}")


def _glob_with_sizes(pattern: str) -> list[tuple[str, int]]:
    from zephyr.fs import expand_glob

    paths = expand_glob(pattern)
    fs, _ = url_to_fs(pattern)
    out = []
    for url in paths:
        try:
            size = int(fs.size(url_to_fs(url)[1]) or 0)
        except Exception:  # noqa: BLE001 - size is for stats and fingerprints only
            size = 0
        out.append((url, size))
    return out


# ------------------------------------------------------------------------------------ fingerprint
def _fingerprint(parts: Any) -> str:
    return xxhash.xxh3_128_hexdigest(repr(parts).encode())


def _records_digest(records: tuple[Any, ...] | None) -> str | None:
    if records is None:
        return None
    try:
        return xxhash.xxh3_64_hexdigest(pickle.dumps(records, protocol=5))
    except Exception:  # noqa: BLE001 - unpicklable records: fall back to their repr
        return xxhash.xxh3_64_hexdigest(repr(records).encode())


def _source_name(source: O.Source) -> str:
    if isinstance(source, O.FilesSource):
        extra = f", filter={source.filter!r}" if source.filter is not None else ""
        cols = f", columns={list(source.columns)}" if source.columns is not None else ""
        return f"read({', '.join(source.patterns)}{cols}{extra})"
    if isinstance(source, O.ListSource):
        return f"from_list({len(source.records)})"
    return f"from_iterable({_callable_name(source.shard_fn)})"


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _describe(value: Any, depth: int = 0) -> Any:
    """A stable description of ops and their functions (code, not object identity) for fingerprints."""
    if depth > 6:
        return "..."
    if value is None or isinstance(value, str | int | float | bool | bytes):
        return value
    if isinstance(value, tuple | list):
        return [_describe(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, O.ListSource):
        return ["ListSource", value.num_shards, len(value.records)]
    if type(value).__name__ == "Dataset":
        return ["Dataset", _describe(value.source, depth + 1), _describe(value.ops, depth + 1)]
    if isinstance(value, functools.partial):
        return ["partial", _describe(value.func, depth + 1), _describe(value.args, depth + 1), _describe(value.keywords, depth + 1)]
    if inspect.isfunction(value) or inspect.ismethod(value):
        fn = value.__func__ if inspect.ismethod(value) else value
        closure = [_describe(c.cell_contents, depth + 1) for c in (fn.__closure__ or ()) if _cell_ok(c)]
        bound = _describe(value.__self__, depth + 1) if inspect.ismethod(value) else None
        return [fn.__module__, fn.__qualname__, _code_digest(fn.__code__), closure, _describe(fn.__defaults__, depth + 1), bound]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__module__, type(value).__qualname__] + [
            _describe(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        ]
    if inspect.isbuiltin(value) or isinstance(value, type):
        return [getattr(value, "__module__", None), getattr(value, "__qualname__", repr(value))]
    if is_expression(value):
        return ["expr", repr(value)]
    text = repr(value)
    if " at 0x" in text:  # identity-based repr: describe by type (and callable code, if any)
        call = getattr(type(value), "__call__", None)
        return [type(value).__module__, type(value).__qualname__, _code_digest(call.__code__) if hasattr(call, "__code__") else None]
    return text


def _cell_ok(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _code_digest(code: Any) -> str:
    parts = [code.co_code, code.co_names, code.co_varnames]
    for const in code.co_consts:
        parts.append(_code_digest(const) if inspect.iscode(const) else repr(const))
    return xxhash.xxh3_64_hexdigest(repr(parts).encode())
