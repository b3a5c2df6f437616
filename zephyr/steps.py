"""Versioned recipe steps: each step's output lives under a hash of its code, config and inputs.

A recipe is a chain of steps (normalize -> dedup -> tokenize -> ...). Rerunning it skips every step
whose version already completed, and a changed step (new config, new code, new input) gets a new version,
so it and only the steps that depend on it rerun. A step is complete when its `_STEP.json` marker (a
`zephyr.versioning` done marker with the step's version as fingerprint) exists; the marker is written
atomically after the step's outputs, and holds the step's summary. A completed output is only ever
replaced by another completed one (see `StepRunner.run`).

    with StepRunner("out/nemotron") as steps:
        docs = steps.run("normalize", normalize, config=NormalizeConfig(...), inputs={"raw": "data/*.jsonl.zst"})
        dedup = steps.run("exact_dedup", exact_dedup, config=..., inputs={"docs": docs})
    dedup.path, dedup.summary, dedup.skipped

The `with` block is how long the runner holds its output root (one run per root at a time, see
`_hold_root`); a runner used without it holds the root until `close()`, or until it is garbage-collected or
the process ends.

An estimate (`zephyr run --estimate`) runs every step for real on a sample of the input and on half of it,
into a throw-away folder, and ends where a dry run ends with a table of each step's figures grown to the
full input (`zephyr.step_estimate`).

A dry run (`zephyr run --dry-run`, or `execution(dry_run=True)`) prints every step's plan and writes
nothing a later run would trust (no output, no marker, no run record): completed steps are reported as
reused; every step that would run is called with its output redirected to a throw-away directory under
the engine's dry run, so its pipelines print their plans and write nothing, and it returns a *planned*
`StepOutput` (`planned=True`, empty summary). Its output folder (and the throw-away one) are declared
pending (`zephyr.engine.run.pending`), so the later steps that read them are planned too: their sources
read "the output of step 'x', not written yet", with a shard count known once it runs. Work a recipe does
outside a step (building a sample, training on the results) asks `would_write(...)` first.

The runner, not the recipe, ends a dry run and an estimate: when its `with` block ends without an error, it
lists every step and whether it would run (an estimate: prints its table) and raises `DryRunStop` (exit code
0), so nothing after the block (a summary reading the steps' figures, which a dry run does not have) runs.
A recipe says nothing about dry runs. A runner used without `with` plans its steps all the same and returns
planned outputs, but nothing ends the run for it: its caller goes on with empty summaries, and an
estimate's table is not printed (`close()` still removes its throw-away folder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from zephyr.engine.run.lock import hold_folder
from zephyr.engine.run.pending import declare_pending
from zephyr.engine.run.record import RunRecorder, current_run, use_run
from zephyr.fs import join, url_to_fs
from zephyr.progress import format_duration, live_view, log
from zephyr.staged import StagedWork, clear
from zephyr.step_estimate import StepEstimator
from zephyr.versioning import describe, digest, undescribable

__all__ = ["DryRunStop", "StepOutput", "StepRunner"]

MARKER = "_STEP.json"
_KIND = "recipe-step"


class DryRunStop(SystemExit):
    """Ends a dry run once every step was planned (exit code 0); the message says what would run."""

    def __init__(self, message: str) -> None:
        super().__init__(0)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class StepOutput:
    """A completed step: where its outputs are, its version and the summary it returned."""

    name: str
    path: str
    version: str
    summary: dict[str, Any]
    skipped: bool  # True when an earlier run had already completed this version
    seconds: float
    planned: bool = False  # dry run: the step would run; nothing is at `path` yet and `summary` is empty


@dataclass
class StepRunner:
    """Runs steps under `root`, each in `root/<name>-<version>`."""

    root: str
    force: tuple[str, ...] = ()  # step names to rerun even when complete
    history: list[StepOutput] = dataclasses.field(default_factory=list)
    dry_run: bool | None = None  # None: the current execution config's dry_run
    _pending: dict[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)  # dry run
    _own: RunRecorder | None = dataclasses.field(default=None, repr=False, compare=False)
    _root_lock: Any = dataclasses.field(default=None, repr=False, compare=False)
    _estimator: StepEstimator | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def is_estimate(self) -> bool:
        """`zephyr run --estimate`: steps run on input samples in a throw-away folder (`zephyr.step_estimate`)."""
        from zephyr.engine.context import current_config

        config = current_config()
        return self.dry_run is None and config.dry_run and config.estimate

    @property
    def is_dry_run(self) -> bool:
        if self.dry_run is not None:
            return self.dry_run
        from zephyr.engine.context import current_config

        return current_config().dry_run and not self.is_estimate

    def would_write(self, name: str, path: str, what: str, *, builds_input: bool = True) -> bool:
        """For work a recipe does outside a step: return True when the caller must skip it (it is planned,
        not done), False when the caller does it now.

        In a dry run: say that `name` would write `what` (into `path`), declare `path` pending (the steps
        reading it are planned against it), list it with the steps, and return True. In an estimate, work
        that `builds_input` (a sample the steps read) is done for real, the input the estimate samples
        (False); other work (training on the steps' results, which no sample can stand for) is skipped and
        said so (True). In a real run: False (and the runner holds its root from here on)."""
        if self.is_estimate:
            if builds_input:
                print(f"[estimate] {name!r} writes {what}: the input the estimate samples", flush=True)
                return False
            print(f"[estimate] {name!r} is not estimated: it would write {what}", flush=True)
            return True
        if not self.is_dry_run:
            self._hold_root()
            return False
        planned = "not written, the steps reading it are planned" if builds_input else "not written"
        print(f"[dry run] {name!r} would write {what}; {planned}", flush=True)
        self._pending[path] = f"{name!r}"
        self.history.append(StepOutput(name, path, "", {}, False, 0.0, planned=True))
        return True

    def _end_planning(self) -> None:
        """The end of the `with` block: in a dry run, a line listing every step and whether it would run, then
        `DryRunStop` (exit code 0); in an estimate, its table, then `DryRunStop`; otherwise nothing."""
        if self.is_estimate:
            estimator = self._estimator or StepEstimator()
            try:
                print(estimator.report(), flush=True)
            finally:
                estimator.close()
            raise DryRunStop(
                f"[estimate] {len(self.history)} step(s) estimated. Nothing was written under {self.root}."
            )
        if not self.is_dry_run:
            return
        listed = [f"{o.name} ({'would run' if o.planned else 'reused'})" for o in self.history]
        message = (
            f"[dry run] {len(listed)} step(s): {', '.join(listed) or 'none'}; "
            f"{sum(o.planned for o in self.history)} would run. Nothing was written."
        )
        print(message, flush=True)
        raise DryRunStop(message)

    def run(
        self,
        name: str,
        fn: Callable[..., Mapping[str, Any] | None],
        *,
        config: Any = None,
        inputs: Mapping[str, StepOutput | str | list[str]] | None = None,
    ) -> StepOutput:
        """Run `fn(output_path, config=config, **inputs)` unless this version already completed.

        Step inputs are passed as their output paths; plain strings (paths, globs) as given. `fn` returns
        a JSON-serialisable summary (counts, figures) that later reruns read back from the marker.

        A completed output is only ever replaced by another completed one: a forced rerun writes
        beside it and swaps it in once `fn` returned, so a rerun that fails leaves the old output (and
        its marker) as they were. Files a failed run left behind are removed before the next attempt,
        so they never become part of a completed output.
        """
        inputs = dict(inputs or {})
        if self.is_estimate:
            return self._estimated(name, fn, config, inputs)
        if not self.is_dry_run:
            self._hold_root()  # before reading the marker: another run may be writing this step
        version, unreusable = _version(name, fn, config, inputs, self.root)
        path = join(self.root, f"{name}-{version[:10]}")
        work = StagedWork(join(path, MARKER), _KIND, version)
        marker = work.done()
        if unreusable:  # its version cannot stand for what its code reads: never reused, rerun every time
            log(f"step {name}: not reused, it runs every time: {unreusable}")
        reusable = marker is not None and name not in self.force and not unreusable
        args = {key: value.path if isinstance(value, StepOutput) else value for key, value in inputs.items()}
        if self.is_dry_run:  # reported, never recorded: a dry run leaves no run record
            if reusable:
                payload = marker.payload
                print(f"[dry run] step {name!r} (version {version[:10]}) is complete: reused", flush=True)
                output = StepOutput(name, path, version, payload["summary"], True, payload.get("seconds", 0.0))
            else:
                output = self._plan(name, fn, config, inputs, args, version, path)
        elif reusable:
            payload = marker.payload

            def reuse() -> StepOutput:
                return StepOutput(name, path, version, payload["summary"], True, payload.get("seconds", 0.0))

            output = self._recorded(name, version, path, reuse)
        else:

            def produce() -> StepOutput:
                log(f"step {name}: running -> {path}")
                summary, seconds = _run_replacing(
                    path, work if marker is not None else None, name, lambda target: fn(target, config=config, **args)
                )
                work.certify({"name": name, "summary": summary, "seconds": seconds})
                return StepOutput(name, path, version, summary, False, seconds)

            output = self._recorded(name, version, path, produce)
        self.history.append(output)
        return output

    def __enter__(self) -> StepRunner:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        """Release the root; a block that ended without an error ends a dry run or an estimate (`DryRunStop`)."""
        try:
            if exc_type is None:
                self._end_planning()
        finally:
            self.close()

    def close(self) -> None:
        """Release the output root now (the end of a `with` block calls it) and remove an estimate's throw-away
        folder. Steps run after it take the root again. It does not end a dry run: only the `with` block does."""
        if self._estimator is not None:
            self._estimator.close()
        if self._root_lock:
            self._root_lock()  # a weakref.finalize runs its callback once, and is then dead
        self._root_lock = None

    def _hold_root(self) -> None:
        """One run per output root at a time: a second run of a recipe on the same `--output` used to rerun an
        unfinished step into the folder the first was reading, and both went on (one failed, the other's
        steps were marked complete with documents missing). The lock (`.zephyr-run.lock` in the root, see
        `zephyr.engine.run.lock`) is held from the first step until `close()` (the end of a `with` block);
        without it, until this runner is garbage-collected or the process ends. That is not the moment
        the last reference goes: looking for a step's marker on a bucket raises FileNotFoundError inside
        fsspec's `sync()`, whose frame keeps the exception, its traceback, and through the frames' callers
        this runner: a reference cycle, freed only by the cycle collector (checked with `gc.disable()`).
        A run that died leaves a lock that the next run takes over."""
        if self._root_lock is None:
            release = hold_folder(self.root, "recipe output folder")
            self._root_lock = weakref.finalize(self, _release_quietly, release) if release is not None else False

    def _estimated(
        self, name: str, fn: Callable[..., Any], config: Any, inputs: Mapping[str, StepOutput | str | list[str]]
    ) -> StepOutput:
        """Estimate mode: the step on both input samples (its inputs, earlier steps' sample outputs)."""
        if self._estimator is None:
            self._estimator = StepEstimator()
        version, _ = _version(name, fn, config, inputs, self.root)
        named = {key: ("step", value.name) if isinstance(value, StepOutput) else value for key, value in inputs.items()}
        path, summary, seconds = self._estimator.run(name, fn, config, named)
        output = StepOutput(name, path, version, summary, False, seconds)
        self.history.append(output)
        return output

    def _plan(
        self,
        name: str,
        fn: Callable[..., Any],
        config: Any,
        inputs: Mapping[str, Any],
        args: Mapping[str, Any],
        version: str,
        path: str,
    ) -> StepOutput:
        """Dry run of a step that would run: `fn` into a throw-away folder under the engine's dry run
        (its pipelines print their plans), with the outputs of earlier planned steps declared pending."""
        waits = [v.name for v in inputs.values() if isinstance(v, StepOutput) and v.planned]
        reads = f", reading the output of {', '.join(map(repr, waits))} (not written yet)" if waits else ""
        who = f"step {name!r}"
        with tempfile.TemporaryDirectory(prefix=f"zephyr-dry-run-{name}-") as throwaway:
            print(
                f"[dry run] step {name!r} (version {version[:10]}) would run into {path}{reads}; its plans write "
                f"to {throwaway} in its place (removed after)",
                flush=True,
            )
            try:
                with declare_pending({**self._pending, path: who, throwaway: who}):
                    fn(throwaway, config=config, **args)
            except Exception as error:  # noqa: BLE001 - the step's own code met what a dry run does not make
                why = f"it needs what {', '.join(map(repr, waits))} would write" if waits else "on empty results"
                first = str(error).splitlines()[0] if str(error) else ""
                print(
                    f"[dry run] step {name!r}: its code went no further ({why}): {type(error).__name__}: {first}",
                    flush=True,
                )
        self._pending[path] = who
        return StepOutput(name, path, version, {}, False, 0.0, planned=True)

    def _recorded(self, name: str, version: str, path: str, step: Callable[[], StepOutput]) -> StepOutput:
        """Run or reuse one step (`step()`), reporting it to the run record and the live view."""
        recorder, owned = self._recorder()
        record = recorder.begin_step(name, version, path)
        view_row = live_view().add(f"step {name}", total=None, detail="running")
        started = time.perf_counter()
        try:
            with use_run(recorder):
                output = step()
        except BaseException as error:
            live_view().remove(view_row)
            recorder.end_step(record, "failed", seconds=time.perf_counter() - started, summary={})
            log(f"step {name}: failed after {format_duration(time.perf_counter() - started)}")
            if owned:
                recorder.finish("interrupted" if isinstance(error, KeyboardInterrupt) else "failed", error)
            raise
        live_view().remove(view_row)
        status = "cached" if output.skipped else "done"
        recorder.end_step(record, status, seconds=output.seconds, summary=output.summary)
        log(
            f"step {name}: "
            + (
                "cached (an earlier run completed this version)"
                if output.skipped
                else f"done in {format_duration(output.seconds)}"
            )
        )
        if owned:
            recorder.finish("succeeded")  # rewritten as "running" when the next step starts
        return output

    def _recorder(self) -> tuple[RunRecorder, bool]:
        """The current run (`zephyr run`), or a run of this StepRunner's own; steps report to it."""
        recorder = current_run()
        owned = False
        if recorder is None:
            if self._own is None:
                self._own = RunRecorder(record_dir=self.root)
            recorder, owned = self._own, True
            recorder.record["status"] = "running"
            recorder.record["finished_at"] = None
        if recorder.record_dir is None:
            recorder.record_dir = self.root
        return recorder, owned


def _run_replacing(
    path: str, completed: StagedWork | None, name: str, call: Callable[[str], Mapping[str, Any] | None]
) -> tuple[dict[str, Any], float]:
    """Run `call(target)` so that a completed output at `path` is only replaced by a completed one.

    With nothing completed at `path`, the step writes there (after clearing what a failed attempt
    left); with a completed output there (`completed`: a forced rerun), it writes beside it and the new
    output is moved into place once `call` returned, the old marker removed first (so the step reads as
    not done until the new marker is written). Returns (summary, seconds); strings in the summary naming
    the temporary place are renamed to `path`.
    """
    root = path.rsplit("/", 1)[0]
    target = path if completed is None else join(root, f".{name}-{completed.version[:10]}.rerun-{uuid.uuid4().hex[:8]}")
    clear(target)  # leftovers of a failed attempt belong to no completed run
    started = time.perf_counter()
    try:
        summary = dict(call(target) or {})
    except BaseException:
        if target != path:
            clear(target)
        raise
    seconds = time.perf_counter() - started
    if target != path:
        summary = _moved(summary, target, path)
        assert completed is not None  # only a completed output is written beside
        completed.forget()
        clear(path)
        fs, target_path = url_to_fs(target)
        if fs.exists(target_path):
            fs.mv(target_path, url_to_fs(path)[1], recursive=True)
    return summary, seconds


def _release_quietly(release: Callable[[], None]) -> None:
    """Release a root lock when its runner goes or at exit, when a bucket's client may be shut down already:
    a lock left behind is taken over by the next run on this machine (its pid is gone)."""
    with contextlib.suppress(Exception):
        release()


def _version(name: str, fn: Callable[..., Any], config: Any, inputs: Mapping[str, Any], root: str) -> tuple[str, str]:
    """(the step's version, why it must rerun anyway: "" unless what its code reads cannot be described).

    A user function is described without its module's name (which differs between `zephyr run x.py`,
    `python x.py` and an import; the code does not). Paths inside the output root count by their path
    relative to it (`_rooted`), so `--output out` and `--output /abs/out` give the same versions."""
    parts = [name, describe(fn), describe(config)]
    for key in sorted(inputs):
        value = inputs[key]
        parts.append([key, value.version if isinstance(value, StepOutput) else describe(value)])
    parts = _rooted(parts, root)
    reasons = undescribable(parts)
    return digest(parts), reasons[0] if reasons else ""


def _rooted(described: Any, root: str) -> Any:
    """`described` with every string naming a path inside the output root `root` (relative or absolute,
    as `os.path.abspath` resolves it; a bucket root as spelled) written as `<output>/<path within>`."""
    local = "://" not in root or root.startswith("file://")
    prefix = os.path.abspath(root.removeprefix("file://")) if local else root.rstrip("/")

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            path = os.path.abspath(item.removeprefix("file://")) if local and "://" not in item else item
            if path == prefix or path.startswith(prefix + "/"):
                return "<output>" + path[len(prefix) :]
            return item
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        return item

    return walk(described)


def _moved(value: Any, old: str, new: str) -> Any:
    """`value` with every string naming something under `old` renamed under `new` (a rerun's summary)."""
    if isinstance(value, str):
        return new + value[len(old) :] if value == old or value.startswith(old.rstrip("/") + "/") else value
    if isinstance(value, list | tuple):
        return [_moved(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _moved(v, old, new) for k, v in value.items()}
    return value
