"""What a worker does for one shard of one stage, on any backend: `output.write(ops(input.open(shard)))`.

The stage was lowered by the planner into a tagged input, a compiled pipeline of narrow ops and a tagged
output, so the worker knows no logical op type. User errors come out of the pipeline and the inputs as
`UserCodeError`s naming op, stage, shard and record; any other error is still tied to the shard here.
"""

from __future__ import annotations

import resource
import time
import traceback

import cloudpickle

from zephyr import counters
from zephyr.engine import absent_fields
from zephyr.engine.outputs import read_results
from zephyr.engine.plan import Stage
from zephyr.engine.task import ShardContext, ShardResult, ShardTask
from zephyr.errors import BadInputError, StorageError, UserCodeError, ZephyrError, storage_error
from zephyr.fs import open_url

__all__ = ["ShardContext", "ShardTask", "ShardResult", "run_task", "load_stage", "read_results"]

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
    cpu_started = time.process_time()
    counters.reset()
    _reset_peak_rss()
    stage = load_stage(task.stage_url)
    result = ShardResult(task.shard, task.attempt)
    where = f"stage {stage.index} ({stage.name}), shard {task.shard} ({stage.input.shard_name(task.shard)})"
    context = ShardContext(task.shard, task.num_tasks or stage.num_shards, stage.index, task.attempt, where)
    try:
        existing = stage.output.existing(task)
        if existing:  # skip_existing: the shard's output is already there
            result.paths = existing
            result.skipped_existing = True
            return _finish(result, started, cpu_started)
        stream = stage.input.open(task, result)
        try:
            with absent_fields.counted():  # fields a filter reads that a file or shard lacks: judged per stage
                stage.output.write(stage.ops(stream, context), task, result)
        finally:
            close = getattr(stream, "close", None)  # settles an input's counts when the pipeline stopped early
            if close is not None:
                close()
    except (UserCodeError, BadInputError, StorageError):
        raise
    except ZephyrError as error:
        raise type(error)(f"{where}: {error}") from error
    except Exception as error:  # noqa: BLE001 - an error outside user calls: still name the shard
        environment = storage_error(error, where)
        if environment is not None:
            raise environment from None
        raise UserCodeError(
            f"{where} failed: {type(error).__name__}: {error}", traceback_text=traceback.format_exc()
        ) from None
    return _finish(result, started, cpu_started)


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


def _finish(result: ShardResult, started: float, cpu_started: float) -> ShardResult:
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    result.peak_rss = _peak_rss()
    result.counters = counters.reset()
    return result
