"""The driver: runs a plan's stages shard by shard on a backend, with retries and checkpoints.

Scheduling, fencing and resume live here; reading and writing shards lives in `worker`, running tasks in
`backends`. Layout under the scratch URL, per plan fingerprint:

    <scratch>/<plan>/stage-<i>.pkl                      the pickled stage, read once per worker
    <scratch>/<plan>/stage-<i>/shard-<j>/attempt-<a>/   one attempt's private outputs (fencing)
    <scratch>/<plan>/stage-<i>/shard-<j>.done           the committed attempt's result (a `zephyr.versioning` marker)

A shard is committed by atomically writing its `.done` file, once, for the first attempt that succeeds;
outputs of any other attempt are ignored and removed. A rerun of the same plan finds the `.done` files
and skips those shards, so a killed run resumes without losing or duplicating records. A `.done` file is
trusted only while the files it lists exist: a shard whose output files are gone is rerun, and shuffle
runs removed once their readers finished are remade if a reader shard has to run again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from zephyr.counters import internal, merge
from zephyr.engine import absent_fields
from zephyr.engine.backend_registry import backend_spec
from zephyr.engine.backends.api import Backend, Outcome
from zephyr.engine.backends.pool import make_backend, release_backend
from zephyr.engine.context import ExecutionConfig, current_config
from zephyr.engine.plan import Plan, Stage, plan
from zephyr.engine.resources import stage_request
from zephyr.engine.run.lock import run_locks
from zephyr.engine.run.progress import ProgressDisplay
from zephyr.engine.shuffle import ReducePiece, RunFile, plan_tasks, target_bytes, task_bytes
from zephyr.engine.task import Figures
from zephyr.engine.worker import ShardResult, ShardTask
from zephyr.errors import (
    BadInputError,
    PlanError,
    RefusedError,
    StorageError,
    UserCodeError,
    ZephyrError,
    storage_error,
)
from zephyr.fs import atomic_write, join, missing_files, url_to_fs
from zephyr.progress import log
from zephyr.staged import StagedWork

__all__ = ["RunResult", "StageStats", "execute", "execute_plan"]

internal("sink/")  # files rewritten to the folder schema, dead temporary files removed: mechanics, not data


@dataclass
class StageStats(Figures):
    """One stage's figures in a run: its shards' summed (peak memory: the largest; seconds: the stage's wall
    time), the shards resumed from checkpoints, the retries."""

    index: int
    name: str
    shards: int
    resumed_shards: int = 0
    retries: list[str] = field(default_factory=list)
    busy_seconds: float = 0.0  # the shards' own times summed: work, whatever the parallelism

    def add(self, result: ShardResult) -> None:
        """Count one shard's result in."""
        self.busy_seconds += result.seconds
        self.cpu_seconds += result.cpu_seconds
        self.records_in += result.records_in
        self.records_out += result.records_out
        self.bytes_in += result.bytes_in
        self.bytes_out += result.bytes_out
        self.peak_rss = max(self.peak_rss, result.peak_rss)


@dataclass
class RunResult:
    """What a run produced: `outputs` are the collected records or the written paths."""

    outputs: list[Any]
    counters: dict[str, int]
    stages: list[StageStats]
    seconds: float = 0.0
    plan: Plan | None = None
    planned: bool = False  # a dry run: the plan was printed, nothing ran and nothing was written


def execute(dataset: Any, config: ExecutionConfig | None = None) -> RunResult:
    """Plan `dataset` and run it under `config` (default: the current `execution(...)` settings)."""
    config = config or current_config()
    physical = plan(dataset, config)
    return execute_plan(physical, config)


def execute_plan(physical: Plan, config: ExecutionConfig) -> RunResult:
    """Run a plan's stages in order, resuming from checkpoints; with `config.dry_run`, print it instead."""
    if config.sample is not None and not config.dry_run:  # --estimate's sample runs read part of each source
        from zephyr.engine.estimate import sample_plan

        physical = sample_plan(physical, config.sample)
    _check_process_local_urls(physical, config)
    if config.dry_run:
        print(physical.describe())
        pending = physical.pending
        if config.estimate and pending:  # nothing to sample: an earlier step of the dry run would write it
            print(f"no estimate: the plan reads the output of {pending[0]}, which a dry run does not write")
        elif config.estimate:
            from zephyr.engine.estimate import estimate_plan, format_estimate

            print(format_estimate(estimate_plan(physical, config, execute_plan), config.num_workers))
        # every stage's figures are zero: nothing ran (code reading run.stages[i] still runs on)
        stats = [StageStats(stage.index, stage.name, stage.num_shards) for stage in physical.stages]
        return RunResult([], {}, stats, plan=physical, planned=True)
    started = time.perf_counter()
    run_url = join(config.scratch_url, physical.fingerprint[:16])
    with run_locks(run_url, _output_dirs(physical)):
        return _execute(physical, config, run_url, started)


def _output_dirs(physical: Plan) -> list[str]:
    """The folders the sinks write into: the fixed part of each output pattern."""
    return sorted({stage.output.folder for stage in physical.stages if stage.output.folder is not None})


@dataclass
class _Job:
    """What every stage of one run shares: the plan, where its checkpoints live, the backend, and the
    results of the stages run so far (`resumed`: the shards of each taken from an earlier run's checkpoints)."""

    physical: Plan
    config: ExecutionConfig
    run_url: str
    backend: Backend
    progress: ProgressDisplay
    results: dict[int, list[ShardResult]] = field(default_factory=dict)
    resumed: dict[int, set[int]] = field(default_factory=dict)


def _execute(physical: Plan, config: ExecutionConfig, run_url: str, started: float) -> RunResult:
    stats: list[StageStats] = []
    counters: dict[str, int] = {}
    progress = ProgressDisplay(enabled=config.progress)
    progress.begin_job(physical, config)
    job = _Job(physical, config, run_url, make_backend(config), progress)
    idle = False
    try:
        with progress:
            for stage in physical.stages:
                stage_stats = StageStats(stage.index, stage.name, stage.num_shards)
                stats.append(stage_stats)
                results = job.results[stage.index] = _run_stage(job, stage, stage_stats)
                stage_counters: dict[str, int] = {}
                for result in results:
                    merge(stage_counters, result.counters)
                    stage_stats.add(result)
                absent_fields.check_stage(f"stage {stage.index} ({stage.name})", stage_counters)
                merge(counters, stage_counters)
                for upstream in _finished_upstreams(physical, stage.index):
                    _remove_stage_outputs(run_url, upstream, config)
        idle = True
    except BaseException as error:
        progress.end_job("interrupted" if isinstance(error, KeyboardInterrupt) else "failed", counters, error)
        raise
    finally:
        release_backend(job.backend, idle=idle)
    final = physical.stages[-1].output
    outputs = final.outputs(job.results[physical.stages[-1].index])
    final.finish(outputs, counters)  # e.g. a sink's stale files removed, its folder given one schema
    if not config.keep_scratch:
        _remove(run_url)
    run = RunResult(outputs, counters, stats, time.perf_counter() - started, physical)
    if config.summary:
        progress.summary(run)
    progress.end_job("succeeded", counters)
    return run


_PROCESS_LOCAL = ("memory://",)  # fsspec filesystems that live in one process's memory


def _check_process_local_urls(physical: Plan, config: ExecutionConfig) -> None:
    """memory:// is one process's memory: under a backend whose workers are other processes, files a worker
    writes there vanish with it and files the driver wrote are not there for the workers. Refuse it up
    front instead of returning paths nobody can read."""
    if backend_spec(config.backend).in_process:
        return
    urls = [("scratch", config.scratch_url)]
    for stage in physical.stages:
        urls += [("input", url) for url in stage.input.locations]
        urls += [("output", url) for url in stage.output.locations]
    for role, url in urls:
        if str(url).startswith(_PROCESS_LOCAL):
            raise PlanError(
                f"{role} {url!r} is in memory://, which each process has its own of: under the {config.backend!r} "
                "backend the workers are other processes, so what they write there vanishes and they cannot read "
                "what this process wrote. Use backend='local' (execution(backend='local') or --backend local), "
                "or a local directory or bucket URL."
            )


def _finished_upstreams(physical: Plan, index: int) -> list[int]:
    """Stages whose shuffle output no later stage reads any more."""
    done = []
    for stage in physical.stages[: index + 1]:
        readers = [s.index for s in physical.stages if stage.index in s.upstream]
        if readers and max(readers) <= index:
            done.append(stage.index)
    return done


def _remove_stage_outputs(run_url: str, stage_index: int, config: ExecutionConfig) -> None:
    if not config.keep_scratch:
        # keep .done files (resume needs them only until the run ends), drop the bulky shuffle runs
        fs, path = url_to_fs(join(run_url, f"stage-{stage_index}"))
        with contextlib.suppress(FileNotFoundError):
            for entry in fs.ls(path, detail=False):
                if not entry.endswith(".done"):
                    with contextlib.suppress(FileNotFoundError):
                        fs.rm(entry, recursive=True)


def _remove(url: str) -> None:
    fs, path = url_to_fs(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=True)


# ------------------------------------------------------------------------------------------ stage
@dataclass
class _Pending:
    shard: int
    attempt: int = 0
    user_failures: int = 0
    infra_failures: int = 0
    not_before: float = 0.0


@dataclass(frozen=True)
class _Tasks:
    """What a stage runs in this run: one task per shard, or per reduce task of a split or packed plan."""

    count: int
    reduce_plan: list[tuple[ReducePiece, ...]] | None  # each task's pieces; None: task i is target i, whole
    expected_bytes: list[int]  # what each task is expected to read (larger ones start first)
    shown: Stage  # the stage as progress shows it: its shard count is the task count


def _run_stage(job: _Job, stage: Stage, stats: StageStats) -> list[ShardResult]:
    """Run one stage: plan its tasks, take what checkpoints already hold, schedule the rest."""
    stage_pickle = _ship(job, stage)
    if stage.unreusable:
        _forget_checkpoints(job, stage)  # before planning: the reduce plan kept beside them is not reused either
    tasks = _plan_tasks(job, stage)
    stats.shards = tasks.count
    done = _resume(job, stage, tasks.count)
    stats.resumed_shards = len(done)
    if len(done) < tasks.count:
        _restore_upstream_runs(job, stage)
        job.backend.prepare(stage_request(stage))  # workers of the shape this stage's ops ask for
    job.progress.start_stage(tasks.shown, resumed=len(done))
    started = time.perf_counter()
    try:
        _schedule(job, stage, tasks, done, stage_pickle, stats)
    except BaseException:
        job.progress.stop_stage(tasks.shown, failed=True)
        raise
    stats.seconds = time.perf_counter() - started
    job.progress.stop_stage(tasks.shown, failed=False)
    return [done[shard] for shard in range(tasks.count)]


def _ship(job: _Job, stage: Stage) -> str:
    """Pickle the stage once into the run's scratch, where every worker loads it; returns its URL."""
    stage_pickle = join(job.run_url, f"stage-{stage.index}.pkl")
    with atomic_write(stage_pickle, "wb", compression=None) as handle:
        try:
            cloudpickle.dump(stage, handle)
        except Exception as error:  # noqa: BLE001
            if environment := storage_error(error, f"writing stage {stage.index} to the scratch", stage_pickle):
                raise environment from None  # a full or read-only scratch disk, not an unpicklable function
            raise PlanError(
                f"stage {stage.index} ({stage.name}) cannot be shipped to workers: {type(error).__name__}: "
                f"{error}. Functions and the objects they hold must be picklable with cloudpickle; create "
                "clients, models and open files inside the function (e.g. in map_shard) instead."
            ) from error
    return stage_pickle


def _forget_checkpoints(job: _Job, stage: Stage) -> None:
    """Remove an unreusable stage's checkpoints and reduce plan: what it reads has no fingerprint, so what an
    earlier run committed under its name may be of other work (`Stage.unreusable` says why)."""
    log(f"stage {stage.index} ({stage.name}): checkpoints not reused, it runs in full: {stage.unreusable}")
    _remove(join(job.run_url, f"stage-{stage.index}"))
    _remove(join(job.run_url, f"stage-{stage.index}.tasks"))


def _plan_tasks(job: _Job, stage: Stage) -> _Tasks:
    """A stage's tasks. A shuffle read whose input is splittable gets reduce tasks from the scatter sidecars'
    bytes per target: a large target is split into key-hash ranges, small neighbours are packed together
    (plan_tasks); tasks start largest first, so a skewed one does not start last and straggle. The stage
    then has one output shard per task: sinks' {total}, the stage's stats and the progress count tasks,
    not the planned targets."""
    sizes = target_bytes(_upstream_runs(job, stage), stage.num_shards)
    reduce_plan = _reduce_plan(job, stage, sizes) if stage.input.splittable else None
    if not reduce_plan:
        return _Tasks(stage.num_shards, reduce_plan, sizes, stage)
    shown = stage if len(reduce_plan) == stage.num_shards else dataclasses.replace(stage, num_shards=len(reduce_plan))
    return _Tasks(len(reduce_plan), reduce_plan, [task_bytes(sizes, task) for task in reduce_plan], shown)


def _resume(job: _Job, stage: Stage, num_tasks: int) -> dict[int, ShardResult]:
    """The tasks an earlier run of this stage committed whose files are all still there."""
    stage_url = join(job.run_url, f"stage-{stage.index}")
    done: dict[int, ShardResult] = {}
    for shard in range(0 if stage.unreusable else num_tasks):
        committed = _load_done(stage_url, shard, stage.fingerprint)
        if committed is not None:
            done[shard] = committed
    for shard in _lost_shards(stage, done, _files_of, stage.output.stale):
        del done[shard]  # a checkpoint is only as good as the files it lists: rerun the shard
    job.resumed[stage.index] = set(done)
    return done


def _schedule(
    job: _Job, stage: Stage, tasks: _Tasks, done: dict[int, ShardResult], stage_pickle: str, stats: StageStats
) -> None:
    """Run the tasks not in `done` on the backend, largest first, retrying failures (fenced by attempt),
    committing each result as it arrives."""
    config, backend, progress, shown = job.config, job.backend, job.progress, tasks.shown
    stage_url = join(job.run_url, f"stage-{stage.index}")
    upstream_runs = _upstream_runs(job, stage)  # after a restore: the remade runs
    pending = [_Pending(shard) for shard in range(tasks.count) if shard not in done]
    pending.sort(key=lambda p: -tasks.expected_bytes[p.shard])
    in_flight: dict[int, _Pending] = {}

    def make_task(p: _Pending) -> ShardTask:
        return ShardTask(
            stage_pickle,
            stage.index,
            p.shard,
            p.attempt,
            join(stage_url, f"shard-{p.shard:05d}", f"attempt-{p.attempt}"),
            upstream_runs,
            config.memory_per_worker,
            stage.name,
            tasks.reduce_plan[p.shard] if tasks.reduce_plan else (),
            tasks.count,
        )

    while pending or in_flight:
        now = time.monotonic()
        while len(in_flight) < backend.capacity:
            ready = next((p for p in pending if p.not_before <= now), None)
            if ready is None:
                break
            pending.remove(ready)
            in_flight[ready.shard] = ready
            backend.submit(make_task(ready))
        outcomes = backend.wait(timeout=0.2)
        progress.in_flight(shown, backend.live)
        for outcome in outcomes:
            entry = in_flight.get(outcome.task.shard)
            if (
                entry is None
                or outcome.task.stage_url != stage_pickle
                or entry.attempt != outcome.task.attempt
                or outcome.task.shard in done
            ):
                continue  # a stale attempt (fenced): its outputs are ignored
            del in_flight[outcome.task.shard]
            if outcome.result is not None:
                _commit(stage_url, stage.fingerprint, outcome.result)
                done[outcome.task.shard] = outcome.result
                progress.shard_done(shown, outcome.result)
                continue
            retry = _retry_or_raise(stage, entry, outcome, config, stats)
            progress.retry(
                shown,
                entry.shard,
                entry.attempt - 1,
                "infra" if outcome.lost else "user",
                stats.retries[-1],
                *_worker_of(outcome),
            )
            pending.append(retry)


def _retry_or_raise(
    stage: Stage, entry: _Pending, outcome: Outcome, config: ExecutionConfig, stats: StageStats
) -> _Pending:
    where = f"stage {stage.index} ({stage.name}), shard {entry.shard}"
    if outcome.lost:
        entry.infra_failures += 1
        reason = f"{where}: lost worker ({outcome.detail}), attempt {entry.attempt}"
        if entry.infra_failures > config.max_infra_retries:
            raise ZephyrError(f"{reason}; gave up after {config.max_infra_retries} infrastructure retries")
    else:
        error = outcome.error
        if isinstance(error, BadInputError | PlanError | StorageError | RefusedError):
            raise error  # deterministic: a retry would fail (or be refused) the same way
        entry.user_failures += 1
        reason = f"{where}: {type(error).__name__}: {str(error).splitlines()[0]}"
        if entry.user_failures > config.max_user_retries:
            if isinstance(error, UserCodeError):
                raise error
            raise UserCodeError(f"{where} failed: {type(error).__name__}: {error}") from error
    stats.retries.append(reason)
    failures = entry.infra_failures + entry.user_failures
    entry.attempt += 1
    entry.not_before = time.monotonic() + min(config.retry_backoff_s * 2 ** (failures - 1), 30.0)
    return entry


def _worker_of(outcome: Outcome) -> tuple[int | None, str | None]:
    """The pid and host of the worker an attempt ran on (for the run record's retries)."""
    pid, host = outcome.worker_pid, outcome.worker_host
    if pid is None:
        match = re.search(r"pid (\d+)(?: on ([\w.-]+))?", outcome.detail or "")
        if match:
            pid, host = int(match.group(1)), match.group(2) or host
    return pid, host


_SHARD_MARKER = "engine-shard"
_TASKS_MARKER = "engine-reduce-tasks"


def _reduce_plan(job: _Job, stage: Stage, sizes: list[int]) -> list[tuple[ReducePiece, ...]] | None:
    """The stage's reduce tasks (`plan_tasks`), planned once per run and kept beside its checkpoints: the plan
    depends on the worker count, and a run resumed with another --workers must finish the tasks whose
    checkpoints it finds (task j's `.done` covers the pieces of the killed run's task j, not of a new plan's)."""
    work = StagedWork(join(job.run_url, f"stage-{stage.index}.tasks"), _TASKS_MARKER, stage.fingerprint)
    marker = work.done()
    if marker is not None:
        tasks = marker.payload["tasks"]
        return None if tasks is None else [tuple(ReducePiece(*piece) for piece in task) for task in tasks]
    planned = plan_tasks(sizes, job.config.num_workers)
    payload = None if planned is None else [[[p.target, p.lo, p.hi] for p in task] for task in planned]
    work.certify({"tasks": payload})
    return planned


def _done_url(stage_url: str, shard: int) -> str:
    return join(stage_url, f"shard-{shard:05d}.done")


def _lost_shards(
    stage: Stage,
    results: dict[int, ShardResult],
    files_of: Callable[[ShardResult], list[str]],
    stale: Callable[[list[str]], list[str]] = missing_files,
) -> list[int]:
    """The shards among `results` (taken from checkpoints) some of whose listed files are gone (`stale`: or no
    longer theirs), with a line saying so: a step that clears its unfinished output before a rerun, a user
    removing a file, the engine itself removing the shuffle runs of a stage whose readers had finished
    (before a kill), another run rewriting what a custom writer wrote."""
    owner = {url: shard for shard, result in results.items() for url in files_of(result)}
    missing = stale(list(owner))
    lost = sorted({owner[url] for url in missing})
    if lost:
        log(
            f"stage {stage.index} ({stage.name}): rerunning {len(lost)} finished shard(s) of an earlier run whose "
            f"files are gone (e.g. {missing[0]})"
        )
    return lost


def _files_of(result: ShardResult) -> list[str]:
    """What a committed shard wrote: its output files, or its collected records' file."""
    return [*result.paths, *filter(None, [result.result_url])]


def _upstream_runs(job: _Job, stage: Stage) -> tuple[tuple[RunFile, ...], ...]:
    """The shuffle runs `stage` reads, per upstream stage."""
    return tuple(tuple(run for result in job.results[i] for run in result.runs) for i in stage.upstream)


def _restore_upstream_runs(job: _Job, stage: Stage) -> None:
    """Rerun the upstream shards, taken from checkpoints, whose shuffle runs `stage` needs and that are gone.
    The reduce plan stays the one made from the checkpoints: its pieces name targets and key-hash ranges,
    which any rerun of the same shards fills the same way."""
    for index in stage.upstream:
        upstream = job.physical.stages[index]
        checkpointed = {r.shard: r for r in job.results[index] if r.shard in job.resumed.get(index, ())}
        lost = _lost_shards(upstream, checkpointed, lambda result: [run.url for run in result.runs])
        if not lost:
            continue
        for shard in lost:
            _remove(_done_url(join(job.run_url, f"stage-{index}"), shard))
        job.results[index] = _run_stage(job, upstream, StageStats(upstream.index, upstream.name, upstream.num_shards))


def _shard_work(stage_url: str, shard: int, fingerprint: str) -> StagedWork:
    """One shard of a stage as staged work: committed once, by the first attempt that succeeds."""
    return StagedWork(_done_url(stage_url, shard), _SHARD_MARKER, fingerprint)


def _load_done(stage_url: str, shard: int, fingerprint: str) -> ShardResult | None:
    marker = _shard_work(stage_url, shard, fingerprint).done()
    return None if marker is None else _result_from_json(marker.payload)


def _commit(stage_url: str, fingerprint: str, result: ShardResult) -> None:
    _shard_work(stage_url, result.shard, fingerprint).certify(_result_to_json(result))


def _result_to_json(result: ShardResult) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    data["runs"] = [
        {**dataclasses.asdict(run), "segments": [[target, *seg] for target, seg in run.segments.items()]}
        for run in result.runs
    ]
    return data


def _result_from_json(data: dict[str, Any]) -> ShardResult:
    runs = [
        RunFile(
            **{
                **run,
                "segments": {int(seg[0]): tuple(seg[1:]) for seg in run["segments"]},
                # JSON keys are strings: back to target ints (a split reduce task finds its batches by them)
                "khash_starts": {int(target): tuple(starts) for target, starts in run.get("khash_starts", {}).items()},
                "sort_kinds": tuple(run.get("sort_kinds", ())),
            }
        )
        for run in data["runs"]
    ]
    return ShardResult(**{**data, "runs": runs})
