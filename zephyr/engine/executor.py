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

from zephyr.engine import absent_fields
from zephyr.engine.backends import Backend, Outcome, make_backend, release_backend
from zephyr.engine.context import ExecutionConfig, current_config
from zephyr.engine.counters import merge
from zephyr.engine.errors import BadInputError, PlanError, UserCodeError, ZephyrError
from zephyr.engine.inputs import FileInput
from zephyr.engine.outputs import FileSink, PartitionedSink, remove_stale_outputs
from zephyr.engine.plan import Plan, Stage, plan
from zephyr.engine.progress import ProgressDisplay
from zephyr.engine.resources import stage_request
from zephyr.engine.run_lock import run_locks
from zephyr.engine.shuffle import ReducePiece, RunFile, plan_tasks, target_bytes, task_bytes
from zephyr.engine.worker import ShardResult, ShardTask, read_results
from zephyr.errors import RefusedError, StorageError, storage_error
from zephyr.fs import atomic_write, join, missing_files, url_to_fs
from zephyr.progress import log
from zephyr.versioning import read_marker, write_marker

__all__ = ["RunResult", "StageStats", "execute", "execute_plan"]


@dataclass
class StageStats:
    index: int
    name: str
    shards: int
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    resumed_shards: int = 0
    retries: list[str] = field(default_factory=list)
    peak_rss: int = 0
    busy_seconds: float = 0.0  # the shards' own times summed: work, whatever the parallelism
    cpu_seconds: float = 0.0  # and their workers' CPU time

    def add(self, result: ShardResult) -> None:
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


def execute(dataset: Any, config: ExecutionConfig | None = None) -> RunResult:
    config = config or current_config()
    physical = plan(dataset, config)
    return execute_plan(physical, config)


def execute_plan(physical: Plan, config: ExecutionConfig) -> RunResult:
    if config.sample is not None and not config.dry_run:  # --estimate's sample runs read part of each source
        from zephyr.engine.estimate import sample_plan

        physical = sample_plan(physical, config.sample)
    _check_process_local_urls(physical, config)
    if config.dry_run:
        print(physical.describe())
        pending = [s.input.pending for s in physical.stages if isinstance(s.input, FileInput) and s.input.pending]
        if config.estimate and pending:  # nothing to sample: an earlier step of the dry run would write it
            print(f"no estimate: the plan reads the output of {pending[0]}, which a dry run does not write")
        elif config.estimate:
            from zephyr.engine.estimate import estimate_plan, format_estimate

            print(format_estimate(estimate_plan(physical, config, execute_plan), config.num_workers))
        # every stage's figures are zero: nothing ran (code reading run.stages[i] still runs on)
        stats = [StageStats(stage.index, stage.name, stage.num_shards) for stage in physical.stages]
        return RunResult([], {}, stats, plan=physical)
    started = time.perf_counter()
    run_url = join(config.scratch_url, physical.fingerprint[:16])
    with run_locks(run_url, _output_dirs(physical)):
        return _execute(physical, config, run_url, started)


def _output_dirs(physical: Plan) -> list[str]:
    """The folders the sinks write into: the fixed part of each output pattern."""
    dirs = []
    for stage in physical.stages:
        pattern = getattr(stage.output, "pattern", None)
        if isinstance(pattern, str):
            dirs.append(pattern.split("{", 1)[0].rsplit("/", 1)[0] or ".")
    return sorted(set(dirs))


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
    final = physical.stages[-1]
    results = job.results[final.index]
    if final.output.collects:
        outputs: list[Any] = [record for r in results if r.result_url for record in read_results(r.result_url)]
    else:
        outputs = [path for r in results for path in r.paths]
        sink = final.output
        if isinstance(sink, FileSink | PartitionedSink):
            if stale := remove_stale_outputs(sink.pattern, outputs):
                counters["sink/stale_files_removed"] = len(stale)
                log(
                    f"removed {len(stale)} file(s) an earlier run wrote with {sink.pattern} that this run did not "
                    f"(e.g. {stale[0]})"
                )
            if getattr(sink, "schema", None) is None:
                from zephyr.engine.io.folder_schema import unify_folder_schema

                # one schema per written folder: files whose shards lacked a field get it (null)
                if rewritten := unify_folder_schema(outputs, sink.format):
                    counters["sink/files_rewritten_to_the_folder_schema"] = rewritten
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
    if config.backend == "local":
        return
    urls = [("scratch", config.scratch_url)]
    for stage in physical.stages:
        source = getattr(stage.input, "source", None)
        urls += [("input", p) for p in getattr(source, "patterns", ())]
        pattern = getattr(stage.output, "pattern", None)
        if isinstance(pattern, str):
            urls.append(("output", pattern))
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


def _run_stage(job: _Job, stage: Stage, stats: StageStats) -> list[ShardResult]:
    config, backend, progress = job.config, job.backend, job.progress
    stage_url = join(job.run_url, f"stage-{stage.index}")
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
    # reduce tasks from the scatter sidecars' bytes per target: a large target is split into key-hash
    # ranges, small neighbours are packed together (plan_tasks); tasks start largest first, so a skewed one
    # does not start last and straggle. The stage then has one output shard per task: sinks' {total}, the
    # stage's stats and the progress count tasks, not the planned targets
    sizes = target_bytes(_upstream_runs(job, stage), stage.num_shards)
    reduce_plan = _reduce_plan(job, stage, sizes) if getattr(stage.input, "splittable", False) else None
    num_tasks = len(reduce_plan) if reduce_plan else stage.num_shards
    expected_bytes = [task_bytes(sizes, task) for task in reduce_plan] if reduce_plan else sizes
    stats.shards = num_tasks
    shown = stage if num_tasks == stage.num_shards else dataclasses.replace(stage, num_shards=num_tasks)
    done: dict[int, ShardResult] = {}
    for shard in range(num_tasks):
        committed = _load_done(stage_url, shard, stage.fingerprint)
        if committed is not None:
            done[shard] = committed
    for shard in _lost_shards(stage, done, lambda result: [*result.paths, *filter(None, [result.result_url])]):
        del done[shard]  # a checkpoint is only as good as the files it lists: rerun the shard
    job.resumed[stage.index] = set(done)
    stats.resumed_shards = len(done)
    if len(done) < num_tasks:
        _restore_upstream_runs(job, stage)
    upstream_runs = _upstream_runs(job, stage)  # after a restore: the remade runs
    if hasattr(backend, "prepare") and len(done) < num_tasks:
        backend.prepare(stage_request(stage))  # workers of the shape this stage's ops ask for
    progress.start_stage(shown, resumed=len(done))
    started = time.perf_counter()
    pending = [_Pending(shard) for shard in range(num_tasks) if shard not in done]
    pending.sort(key=lambda p: -expected_bytes[p.shard])
    in_flight: dict[int, _Pending] = {}
    make_task: Callable[[_Pending], ShardTask] = lambda p: ShardTask(  # noqa: E731
        stage_pickle,
        stage.index,
        p.shard,
        p.attempt,
        join(stage_url, f"shard-{p.shard:05d}", f"attempt-{p.attempt}"),
        upstream_runs,
        config.memory_per_worker,
        stage.name,
        reduce_plan[p.shard] if reduce_plan else (),
        num_tasks,
    )
    try:
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
            progress.in_flight(shown, getattr(backend, "live", None))
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
    except BaseException:
        progress.stop_stage(shown, failed=True)
        raise
    stats.seconds = time.perf_counter() - started
    progress.stop_stage(shown, failed=False)
    return [done[shard] for shard in range(num_tasks)]


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
    pid, host = getattr(outcome, "worker_pid", None), getattr(outcome, "worker_host", None)
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
    url = join(job.run_url, f"stage-{stage.index}.tasks")
    marker = read_marker(url, _TASKS_MARKER, stage.fingerprint)
    if marker is not None:
        tasks = marker.payload["tasks"]
        return None if tasks is None else [tuple(ReducePiece(*piece) for piece in task) for task in tasks]
    planned = plan_tasks(sizes, job.config.num_workers)
    payload = None if planned is None else [[[p.target, p.lo, p.hi] for p in task] for task in planned]
    write_marker(url, _TASKS_MARKER, stage.fingerprint, {"tasks": payload})
    return planned


def _done_url(stage_url: str, shard: int) -> str:
    return join(stage_url, f"shard-{shard:05d}.done")


def _lost_shards(
    stage: Stage, results: dict[int, ShardResult], files_of: Callable[[ShardResult], list[str]]
) -> list[int]:
    """The shards among `results` (taken from checkpoints) some of whose listed files are gone, with a line
    saying so: a step that clears its unfinished output before a rerun, a user removing a file, or the
    engine itself removing the shuffle runs of a stage whose readers had finished (before a kill)."""
    owner = {url: shard for shard, result in results.items() for url in files_of(result)}
    missing = missing_files(list(owner))
    lost = sorted({owner[url] for url in missing})
    if lost:
        log(
            f"stage {stage.index} ({stage.name}): rerunning {len(lost)} finished shard(s) of an earlier run whose "
            f"files are gone (e.g. {missing[0]})"
        )
    return lost


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


def _load_done(stage_url: str, shard: int, fingerprint: str) -> ShardResult | None:
    marker = read_marker(_done_url(stage_url, shard), _SHARD_MARKER, fingerprint)
    return None if marker is None else _result_from_json(marker.payload)


def _commit(stage_url: str, fingerprint: str, result: ShardResult) -> None:
    write_marker(_done_url(stage_url, result.shard), _SHARD_MARKER, fingerprint, _result_to_json(result))


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
            }
        )
        for run in data["runs"]
    ]
    return ShardResult(**{**data, "runs": runs})
