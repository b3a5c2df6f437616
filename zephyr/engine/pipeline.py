"""A stage's narrow ops, compiled once into one streaming callable: `Pipeline(...)(stream, where)`.

Each narrow op of `zephyr.engine.ops` is a step as it is. Consecutive record ops (map, filter, flat_map,
take_per_shard, select) are fused into one generated Python loop, so a record passes a chain of maps
and filters without a generator hop per op; map_batches works on Arrow batches and map_shard on the
whole stream, and the pipeline converts between records and batches only where a step needs the other
kind. The fused loop is built when the pipeline is made (at plan time) and again after unpickling in a
worker (generated code does not pickle).

Every user call is tied to its op: an exception becomes a `UserCodeError` naming the op, the stage and
shard (`where`), the record's position in the stream and a preview of the record the op received.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import pyarrow as pa

from zephyr.engine.absent_fields import FieldPresence
from zephyr.engine.expr import Expr
from zephyr.engine.ops import Filter, FlatMap, Map, MapBatches, MapShard, NarrowOp, Select, TakePerShard, preview
from zephyr.errors import BadInputError, StorageError, UserCodeError, ZephyrError, storage_error

__all__ = ["Step", "Pipeline"]

Stream = Iterator[Any]
Segment = Callable[[Stream, str], Stream]
Step = NarrowOp


# Every narrow op of `zephyr.engine.ops` is a step as it is: the planner hands it over without its
# `resources` (the stage holds them).
RecordStep = Map | Filter | FlatMap | TakePerShard | Select
_RECORD_STEPS = (Map, Filter, FlatMap, TakePerShard, Select)


# --------------------------------------------------------------------------------------- pipeline
@dataclass(frozen=True)
class Pipeline:
    """The narrow steps of a stage, compiled into one callable `(stream, where) -> stream`.

    `batches_in`: the stage input yields Arrow batches (a columnar file source). `want_batches`: the
    output takes Arrow batches as they are (a columnar sink, a scatter on fields); the pipeline then
    emits batches when its last step produces them (`emits_batches`), else records.
    """

    steps: tuple[Step, ...] = ()
    batches_in: bool = False
    want_batches: bool = False
    _segments: tuple[Segment, ...] = field(default=(), init=False, repr=False, compare=False)  # compiled

    def __post_init__(self) -> None:
        object.__setattr__(self, "_segments", _compile(self.steps, self.batches_in, self.emits_batches))

    @property
    def emits_batches(self) -> bool:
        last_is_batches = isinstance(self.steps[-1], MapBatches) if self.steps else self.batches_in
        return self.want_batches and last_is_batches

    @property
    def names(self) -> list[str]:
        return [step.name for step in self.steps]

    def __call__(self, stream: Iterable[Any], where: Any) -> Stream:
        """The stage's narrow ops over `stream`; `where` (a `ShardContext`, or text) names the shard in errors
        and is what `map_shard(fn, with_context=True)` functions get."""
        out: Stream = iter(stream)
        for segment in self._segments:
            out = segment(out, where)
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_segments", None)  # generated code: rebuilt on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_segments", _compile(self.steps, self.batches_in, self.emits_batches))

    def __fingerprint__(self) -> Any:
        return ["Pipeline", list(self.steps), self.batches_in, self.want_batches]


def _compile(steps: tuple[Step, ...], batched: bool, emits_batches: bool) -> tuple[Segment, ...]:
    """Segments to chain: fused runs of record steps, batch steps, shard steps, and conversions."""
    segments: list[Segment] = []
    run: list[RecordStep] = []

    def flush() -> None:
        nonlocal batched
        if not run:
            return
        if batched:
            segments.append(_to_records)
            batched = False
        segments.extend(_fuse(part) for part in _parts(run))
        run.clear()

    for position, step in enumerate(steps):
        if isinstance(step, _RECORD_STEPS):
            run.append(step)
            continue
        flush()
        if isinstance(step, MapBatches):
            last = position == len(steps) - 1
            emit = (not last and isinstance(steps[position + 1], MapBatches)) or (last and emits_batches)
            segments.append(_MapBatches(step, batched, emit))
            batched = emit
        else:
            if batched:
                segments.append(_to_records)
                batched = False
            segments.append(_MapShard(step))
    flush()
    if batched and not emits_batches:
        segments.append(_to_records)
    return tuple(segments)


_MAX_LOOPS = 16  # Python allows 20 nested blocks per function; the fused loop uses try + for + one per FlatMap
_MAX_STEPS = 64  # and ~100 indentation levels


def _parts(run: list[RecordStep]) -> Iterator[list[RecordStep]]:
    part: list[RecordStep] = []
    loops = 0
    for step in run:
        if part and (len(part) >= _MAX_STEPS or (isinstance(step, FlatMap) and loops >= _MAX_LOOPS)):
            yield part
            part, loops = [], 0
        part.append(step)
        loops += isinstance(step, FlatMap)
    if part:
        yield part


def _fuse(steps: list[RecordStep]) -> Segment:
    """Generate one generator function running `steps` on each record, in a single loop.

    `step` holds the index of the op whose code runs (-1 while reading the input, whose errors pass
    through untouched), so a failure is pinned on its op; `r<k>` is the record op k received.
    """
    env: dict[str, Any] = {"_fail": _failure, "_steps": tuple(steps)}
    checks: list[_FieldCheck] = []
    inputs: list[str] = []
    lines = ["def fused(records, where):", "    step = -1", "    n = -1"]
    lines += [f"    t{k} = 0" for k, s in enumerate(steps) if isinstance(s, TakePerShard)]
    if any(isinstance(s, TakePerShard) and s.n <= 0 for s in steps):
        lines += ["    return", "    yield"]  # nothing passes: do not even read the input
        steps = []
    lines += ["    try:", "        for n, r0 in enumerate(records):"]
    indent, var = 12, "r0"
    tails: list[tuple[int, str]] = []
    for k, step in enumerate(steps):
        pad = " " * indent
        inputs.append(var)
        if isinstance(step, Map):
            env[f"f{k}"] = step.fn
            lines += [f"{pad}step = {k}", f"{pad}r{k + 1} = f{k}({var})"]
            var = f"r{k + 1}"
        elif isinstance(step, Filter):
            predicate = step.predicate
            if isinstance(predicate, Expr):
                checks.append(_FieldCheck(step))
                env[f"f{k}"] = checks[-1] if checks[-1].columns else predicate.compile()
            else:
                env[f"f{k}"] = predicate
            lines += [f"{pad}step = {k}", f"{pad}if f{k}({var}):"]
            indent += 4
        elif isinstance(step, FlatMap):
            env[f"f{k}"] = step.fn
            lines += [f"{pad}step = {k}", f"{pad}for r{k + 1} in f{k}({var}):"]
            indent += 4
            tails.append((indent, f"step = {k}"))  # the next item of f{k}'s iterator is op k's work again
            var = f"r{k + 1}"
        elif isinstance(step, Select):
            fields = ", ".join(f"{c!r}: {var}.get({c!r})" for c in step.columns)
            lines += [f"{pad}step = {k}", f"{pad}r{k + 1} = {{{fields}}}"]
            var = f"r{k + 1}"
        else:  # TakePerShard: counted here, checked once everything downstream of this record has run
            lines += [f"{pad}t{k} += 1"]
            tails.append((indent, f"if t{k} >= {step.n}: return"))
    pad = " " * indent
    lines += [f"{pad}step = -1", f"{pad}yield {var}"]
    lines += [" " * ind + text for ind, text in reversed(tails)]
    lines += [
        "            step = -1",
        "    except Exception as error:",
        "        if step < 0:",
        "            raise",
        f"        raise _fail(_steps[step], where, n, locals()[{tuple(inputs)!r}[step]], error) from None",
    ]
    exec(compile("\n".join(lines), "<zephyr fused ops>", "exec"), env)  # noqa: S102 - our own generated code
    fused: Segment = env["fused"]
    checks = [c for c in checks if c.columns]
    if checks and not any(isinstance(s, TakePerShard) for s in steps):  # it stops early: too few records to judge
        return _Checked(fused, tuple(checks))
    return fused


class _FieldCheck:
    """An expression filter's predicate that also notes which of the fields it reads by value appear in
    the records it sees (`zephyr.engine.absent_fields.FieldPresence`)."""

    def __init__(self, step: Filter) -> None:
        self.step = step
        self.columns = frozenset(step.predicate.value_columns())
        self.fn = step.predicate.compile()
        self.presence = FieldPresence(self.columns)

    def reset(self) -> None:
        self.presence.reset()

    def __call__(self, record: Any) -> Any:
        if self.presence.missing:
            self.presence.see(record)
        return self.fn(record)

    def finish(self, where: str) -> None:
        """Note the fields no record of the shard had: the stage fails when no shard had one (a typo or a
        field an earlier op dropped, not a request for zero rows)."""
        self.presence.note(
            lambda missing, first: (
                f"{self.step.name} in {where}: no record has field(s) {', '.join(map(repr, missing))}; the first "
                f"record has {', '.join(sorted(first)) or 'no fields'}. Fix the field name, or use a function "
                f"filter (lambda r: ...) or col({missing[0]!r}).is_null() if it is optional."
            )
        )


@dataclass(frozen=True)
class _Checked:
    """A fused segment whose expression filters are checked for absent fields once the shard ends."""

    fused: Segment
    checks: tuple[_FieldCheck, ...]

    def __call__(self, records: Stream, where: str) -> Stream:
        for check in self.checks:
            check.reset()
        yield from self.fused(records, where)
        for check in self.checks:
            check.finish(where)


def _failure(step: Step, where: str, index: int, record: Any, error: Exception) -> ZephyrError:
    environment = storage_error(error, f"{step.name} in {where}, on record #{index}")
    if environment is not None:  # a full disk or a read-only folder is not the user's code
        return environment
    if isinstance(error, BadInputError):  # the function judged its record bad: deterministic, not its code
        return BadInputError(f"{step.name} in {where}, on record #{index}: {error}")
    return UserCodeError(
        f"{step.name} failed in {where}, on record #{index}: {type(error).__name__}: {error}\n"
        f"  record: {preview(record)}",
        traceback_text=traceback.format_exc(),
    )


# ----------------------------------------------------------------------------- batches and shards
def _to_records(batches: Stream, where: str) -> Stream:
    for batch in batches:
        yield from batch.to_pylist()


@dataclass(frozen=True)
class _MapShard:
    step: MapShard

    def __call__(self, records: Stream, where: Any) -> Stream:
        try:
            yield from self.step.fn(records, where) if self.step.with_context else self.step.fn(records)
        except BadInputError as error:  # deterministic: named with its shard, never retried as the user's code
            raise BadInputError(f"{self.step.name} in {where}: {error}") from None
        except (UserCodeError, StorageError):
            raise
        except Exception as error:  # noqa: BLE001
            environment = storage_error(error, f"{self.step.name} in {where}")
            if environment is not None:
                raise environment from None
            raise UserCodeError(
                f"{self.step.name} failed in {where}: {type(error).__name__}: {error}",
                traceback_text=traceback.format_exc(),
            ) from None


@dataclass(frozen=True)
class _MapBatches:
    step: MapBatches
    batched: bool  # the input is already Arrow batches
    emit_batches: bool  # hand batches on (else records)

    def __call__(self, stream: Stream, where: str) -> Stream:
        step, index = self.step, 0
        batches = stream if self.batched else _batches_of(stream, step.batch_size, where)
        for batch in batches:
            try:
                out = step.fn(batch)
            except Exception as error:  # noqa: BLE001
                environment = storage_error(error, f"{step.name} in {where}")
                if environment is not None:  # a full disk, a refused cross-region read: not the user's code
                    raise environment from None
                first = batch.slice(0, 1).to_pylist()[0] if batch.num_rows else None
                raise UserCodeError(
                    f"{step.name} failed in {where}, on the batch of records #{index}..#{index + batch.num_rows - 1}: "
                    f"{type(error).__name__}: {error}\n  first record: {preview(first)}",
                    traceback_text=traceback.format_exc(),
                ) from None
            index += batch.num_rows
            if out is None:
                continue
            if isinstance(out, pa.Table):
                parts = out.combine_chunks().to_batches()
            elif isinstance(out, pa.RecordBatch):
                parts = [out]
            else:
                raise UserCodeError(
                    f"{step.name} in {where} returned {type(out).__name__}; map_batches functions must return "
                    "a pyarrow.RecordBatch or pyarrow.Table (build one with pyarrow.RecordBatch.from_pydict)"
                )
            if self.emit_batches:
                yield from parts
            else:
                for part in parts:
                    yield from part.to_pylist()


def _batches_of(records: Stream, size: int, where: str) -> Iterator[pa.RecordBatch]:
    from zephyr.engine.io import batch_from_dicts  # unions the fields of all rows

    start = 0
    while True:
        chunk = list(islice(records, size))
        if not chunk:
            return
        rows = f"{where}, records #{start}..#{start + len(chunk) - 1}"
        yield batch_from_dicts(chunk, where=rows, error=UserCodeError)
        start += len(chunk)
