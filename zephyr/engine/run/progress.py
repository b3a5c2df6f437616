"""What a run shows while it runs and when it ends, and what it feeds the run record.

One live view per run (on a terminal): the recipe's steps (done / running / cached) and the running
job's stages, each with records, bytes, rate and an ETA from the input sizes. When stdout or stderr is
not a terminal the same events come out as plain log lines, no bars. `-q` shows only errors and the
final summary's absence; `-v` adds every engine job's own table (which also goes to the run's log file
`<record_dir>/_runs/<run_id>.log`).

Non-engine work (labeling, training, verification) reports through `task_progress(...)`, which draws a
row in the same view or logs plain lines.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, Self

from rich.console import Console
from rich.table import Table

from zephyr.counters import is_internal
from zephyr.engine.run import record as run_record
from zephyr.progress import (
    format_bytes,
    format_count,
    format_duration,
    live_view,
    log,
    terminal,
    verbosity,
)

_view = live_view()

__all__ = ["ProgressDisplay", "print_run_summary", "report_results"]


# ------------------------------------------------------------------------------- engine jobs
class _StageState:
    def __init__(
        self, stage: Any, record: dict[str, Any], resumed: int, total_bytes: int, total_records: int, row: Any
    ) -> None:
        self.stage, self.record, self.row = stage, record, row
        self.started = time.monotonic()
        self.last_log = self.started
        self.resumed = resumed
        self.total_bytes = total_bytes  # input bytes of the shards to run (0: unknown)
        self.total_records = total_records  # input records of the shards to run (0: unknown)
        self.done_bytes = 0
        self.done_records = 0
        self.done_shards = 0
        self.reading = 0  # records read so far by the stage's running shards (heartbeats)


PLAIN_LOG_EVERY_S = 30.0
"""Without a terminal, a running stage logs one line of progress this often (none with progress=False)."""


class ProgressDisplay:
    """The executor's hooks for one job: feed the live view, the plain log and the run record."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = enabled
        self._stages: dict[int, _StageState] = {}
        self._bytes_out: dict[int, int] = {}
        self._job: dict[str, Any] | None = None
        self._recorder: run_record.RunRecorder | None = None
        self._own_run = False
        self._started = time.monotonic()
        self._step = None

    # ---------------------------------------------------------------------------- job
    def begin_job(self, physical: Any, config: Any) -> None:
        """Attach this job to the current run (or open a run of one job) and record it."""
        if self.enabled is not None and _view.forced is None:
            _view.forced = self.enabled
            self._forced_here = True
        self._recorder = run_record.current_run()
        sink_dir = _sink_dir(physical)
        if self._recorder is None:
            # a lone job (library use, no `zephyr run`): its record goes beside the scratch space, not
            # into the user's output folder
            self._own_run = True
            self._recorder = run_record.RunRecorder(
                backend=config.backend, workers=config.num_workers, record_dir=run_record.lone_job_record_dir(config)
            )
            sink_dir = None
        self._job = self._recorder.begin_job(sink_dir=sink_dir, config=config)
        if getattr(physical, "sampled", ()):  # an --estimate sample run: what it read of each source
            self._job["sampled"] = [list(part) for part in physical.sampled]
        self._started = time.monotonic()

    def end_job(self, status: str, counters: dict[str, int], error: BaseException | None = None) -> None:
        if self._recorder is None or self._job is None:
            return
        self._recorder.end_job(self._job, status, seconds=time.monotonic() - self._started, counters=counters)
        if self._own_run:
            self._recorder.finish(status, error)
        if getattr(self, "_forced_here", False):
            _view.forced = None
        for state in self._stages.values():
            _view.remove(state.row)
        if self._own_run:
            _view.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for state in self._stages.values():
            _view.remove(state.row)

    # -------------------------------------------------------------------------- stages
    def start_stage(self, stage: Any, *, resumed: int) -> None:
        shards = _shards(stage)
        if shards:
            total_bytes = sum(getattr(s, "size", 0) or 0 for s in shards[resumed:])
            total_records = sum(len(s.records) for s in shards[resumed:] if getattr(s, "records", None) is not None)
        else:
            upstream = getattr(stage, "upstream", ()) or ()
            total_bytes = sum(self._bytes_out.get(i, 0) for i in upstream)
            total_records = 0
        record = {
            "index": stage.index,
            "name": stage.name,
            "shards": stage.num_shards,
            "shards_done": resumed,
            "resumed_shards": resumed,
            "records_in": 0,
            "records_out": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "seconds": 0.0,
            "records_per_s": None,
            "eta_seconds": None,
            "peak_rss": 0,
            "busy_seconds": 0.0,
            "cpu_seconds": 0.0,
            "retries": [],
        }
        if self._job is not None:
            self._job["stages"].append(record)
        row = _view.add(_stage_label(stage), total=stage.num_shards, detail="starting")
        _view.update(row, completed=resumed)
        self._stages[stage.index] = _StageState(stage, record, resumed, total_bytes, total_records, row)

    def shard_done(self, stage: Any, result: Any) -> None:
        state = self._stages.get(stage.index)
        if state is None:
            return
        rec = state.record
        state.done_shards += 1
        state.reading = 0  # the next heartbeat says what the still-running shards have read
        rec["shards_done"] += 1
        for key in ("records_in", "records_out", "bytes_in", "bytes_out"):
            rec[key] += getattr(result, key, 0)
        rec["peak_rss"] = max(rec["peak_rss"], getattr(result, "peak_rss", 0))
        rec["busy_seconds"] += getattr(result, "seconds", 0.0)
        rec["cpu_seconds"] += getattr(result, "cpu_seconds", 0.0)
        if self._job is not None and "sampled" in self._job:  # --estimate's sample runs: each shard's rate
            rec.setdefault("shard_cpu", []).append(
                [getattr(result, "records_in", 0), getattr(result, "cpu_seconds", 0.0)]
            )
        shards = _shards(stage)
        if shards and result.shard < len(shards):
            state.done_bytes += getattr(shards[result.shard], "size", 0) or 0
            records = getattr(shards[result.shard], "records", None)
            state.done_records += len(records) if records is not None else 0
        else:
            state.done_bytes += getattr(result, "bytes_in", 0)
        elapsed = time.monotonic() - state.started
        rec["seconds"] = round(elapsed, 3)
        rec["records_per_s"] = round(rec["records_in"] / elapsed, 1) if elapsed > 0 else None
        rec["eta_seconds"] = _eta(state, elapsed)
        _view.update(state.row, completed=rec["shards_done"], detail=_stage_detail(state, elapsed))
        now = time.monotonic()
        plain = state.row is None and self.enabled is not False  # progress=False: no periodic lines either
        if plain and now - state.last_log >= PLAIN_LOG_EVERY_S and rec["shards_done"] < stage.num_shards:
            state.last_log = now
            log(f"{_stage_label(stage)}: {_stage_detail(state, elapsed)}")
        if self._recorder is not None:
            self._recorder.write()

    def in_flight(self, stage: Any, live: Mapping[tuple[int, int], int] | None) -> None:
        """Records the running shards of `stage` have read so far (worker heartbeats), shown live."""
        state = self._stages.get(stage.index)
        if state is None or not live:
            return
        reading = sum(n for (index, _), n in live.items() if index == stage.index)
        if reading == state.reading:
            return
        state.reading = reading
        _view.update(state.row, detail=_stage_detail(state, time.monotonic() - state.started))

    def retry(
        self,
        stage: Any,
        shard: int,
        attempt: int,
        kind: str,
        error: str,
        worker_pid: int | None,
        worker_host: str | None,
    ) -> None:
        state = self._stages.get(stage.index)
        entry = {
            "shard": shard,
            "attempt": attempt,
            "kind": kind,
            "error": run_record.one_line(error),
            "worker_pid": worker_pid,
            "worker_host": worker_host,
        }
        if state is not None:
            state.record["retries"].append(entry)
        where = f" (worker pid {worker_pid} on {worker_host})" if worker_pid else ""
        log(f"retrying {_stage_label(stage)} shard {shard} (attempt {attempt + 1}){where}: {entry['error']}")
        if self._recorder is not None:
            self._recorder.write()

    def stop_stage(self, stage: Any, *, failed: bool) -> None:
        state = self._stages.get(stage.index)
        if state is None:
            return
        elapsed = time.monotonic() - state.started
        state.record["seconds"] = round(elapsed, 3)
        state.record["eta_seconds"] = None if failed else 0.0
        self._bytes_out[stage.index] = state.record["bytes_out"]
        _view.remove(state.row)
        rec = state.record
        resumed = f" ({rec['resumed_shards']} resumed)" if rec["resumed_shards"] else ""
        line = (
            f"{_stage_label(stage)}: {'FAILED' if failed else 'done'}, {rec['shards']} shards{resumed}, "
            f"{format_count(rec['records_in'])} -> {format_count(rec['records_out'])} records, "
            f"{format_bytes(rec['bytes_in'])} in {format_duration(elapsed)}"
        )
        # one line per stage for a plain script under `zephyr run`; inside a recipe step, on a terminal (the live
        # rows showed it) or for a lone job (its table follows) only with -v
        in_step = self._recorder is not None and self._recorder.current_step is not None
        log(line, level=1 if (in_step or _view.drawing or self._own_run) else 0)

    # ------------------------------------------------------------------------- summary
    def summary(self, run: Any) -> None:
        """The job's own table: printed with -v, or for a job outside any run; always into the run's log."""
        table = job_table(run)
        text = _render(table, width=160)
        if self._recorder is not None and self._recorder.record_dir and not self._own_run:
            _append_log(self._recorder, text)
        if verbosity() >= 1 or (self._own_run and verbosity() >= 0):
            _view.log(text.rstrip("\n"))


def _shards(stage: Any) -> tuple[Any, ...]:
    """A source stage's shards (with sizes or records, for the ETA); () for a shuffle stage."""
    return tuple(getattr(getattr(stage, "input", None), "shards", ()) or ())


def _sink_dir(physical: Any) -> str | None:
    try:
        output = physical.stages[-1].output
        pattern = getattr(output, "pattern", None)
    except (AttributeError, IndexError):
        return None
    if not isinstance(pattern, str):
        return None
    head = pattern.split("{", 1)[0]
    directory = head.rsplit("/", 1)[0] if "/" in head else "."
    return directory if "://" in directory else os.path.abspath(directory)


def _stage_label(stage: Any) -> str:
    return f"stage {stage.index} {stage.name}"


def _eta(state: _StageState, elapsed: float) -> float | None:
    if elapsed <= 0:
        return None
    remaining = None
    if state.total_bytes and state.done_bytes:
        remaining = elapsed * (state.total_bytes - state.done_bytes) / state.done_bytes
    elif state.total_records and state.done_records:
        remaining = elapsed * (state.total_records - state.done_records) / state.done_records
    elif state.done_shards:
        todo = state.stage.num_shards - state.resumed - state.done_shards
        remaining = elapsed * todo / state.done_shards
    return round(max(remaining, 0.0), 1) if remaining is not None else None


def _stage_detail(state: _StageState, elapsed: float) -> str:
    rec = state.record
    records = rec["records_in"] + state.reading  # finished shards, plus what running shards read so far
    text = f"{rec['shards_done']}/{rec['shards']} shards  {format_count(records)} rec"
    if rec["bytes_in"]:
        text += f" {format_bytes(rec['bytes_in'])}"
    if elapsed > 0 and records:
        text += f"  {format_count(records / elapsed)} rec/s"
        if rec["bytes_in"]:
            text += f" {format_bytes(rec['bytes_in'] / elapsed)}/s"
    eta = _eta(state, elapsed)
    if eta is not None and rec["shards_done"] < rec["shards"]:
        text += f"  ETA {format_duration(eta)}"
    return text


def job_table(run: Any) -> Table:
    """One engine job's summary table: per stage its shards (resumed), records and bytes in and out, time and peak
    memory."""
    table = Table(title=f"zephyr job summary ({run.seconds:.1f} s)", title_justify="left")
    for column in ("stage", "shards", "records in", "records out", "bytes in", "bytes out", "time", "peak RSS"):
        table.add_column(column, justify="right" if column != "stage" else "left")
    for s in run.stages:
        resumed = f" ({s.resumed_shards} resumed)" if s.resumed_shards else ""
        table.add_row(
            f"{s.index} {s.name[:70]}",
            f"{s.shards}{resumed}",
            format_count(s.records_in),
            format_count(s.records_out),
            format_bytes(s.bytes_in),
            format_bytes(s.bytes_out),
            f"{s.seconds:.1f} s",
            format_bytes(s.peak_rss),
        )
    retries = [r for s in run.stages for r in s.retries]
    if retries or run.counters:
        extra = [f"{len(retries)} retried shard attempt(s): " + "; ".join(map(str, retries))] if retries else []
        extra += [f"{name} = {value:,}" for name, value in sorted(run.counters.items())]
        table.caption = "\n".join(extra)
        table.caption_justify = "left"
    return table


def _render(renderable: Any, width: int | None = None) -> str:
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=False, width=width or 160, color_system=None).print(renderable)
    return buffer.getvalue()


def _append_log(recorder: run_record.RunRecorder, text: str) -> None:
    path = os.path.join(str(recorder.record_dir), "_runs", f"{recorder.run_id}.log")
    if "://" in path:
        return  # the log file is local only; the JSON record goes to buckets too
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write(text)
    except OSError:
        pass


# --------------------------------------------------------------------------------- run end
def report_results(lines: list[str]) -> None:
    """A program's own closing figures (a recipe's splits, tokens, losses): shown once, after the live view.

    Under `zephyr run` (or a subcommand) they become part of the run's one final summary, printed below its
    table (and kept in the run record as "results"); otherwise the live view is closed and they are printed
    now. Results go to stdout and are printed with -q too; the table goes to stderr.
    """
    recorder = run_record.current_run()
    if recorder is not None and recorder.summary_at_end:
        recorder.record.setdefault("results", []).extend(lines)
        recorder.write(force=True)
        return
    _view.close()
    print("\n".join(lines), flush=True)


def print_run_summary(record: dict[str, Any]) -> None:
    """The one summary at the end of a run, after the live view is closed: a table of its steps (or, without
    steps, of its stages), the counters that describe the data (internal ones only with -v; all are in the
    run record), then the program's own results (`report_results`)."""
    _view.close()
    if verbosity() >= 0:
        _print_run_table(record)
    results = record.get("results") or []
    if results:
        sys.stderr.flush()
        print("\n".join(results), flush=True)


def _print_run_table(record: dict[str, Any]) -> None:
    width = None if terminal() else 160
    console = Console(stderr=True, width=width)
    status = record.get("status", "?")
    command = record.get("command") or []
    what = " ".join(command[:2]) if len(command) >= 2 and command[0] == "zephyr" else "zephyr run"
    title = f"{what} {status} in {format_duration(record.get('seconds'))}"
    table = Table(title=title, title_justify="left")
    if record.get("steps"):
        for column in ("step", "status", "time", "docs in", "docs out", "removed", "tokens"):
            table.add_column(column, justify="left" if column in ("step", "status") else "right")
        for step in record["steps"]:
            removed = sum(step.get("removed", {}).values())
            table.add_row(
                step["name"],
                step["status"],
                "-" if step["status"] == "cached" else format_duration(step.get("seconds")),
                _exact(step.get("docs_in")),
                _exact(step.get("docs_out")),
                f"{removed:,}" if step.get("removed") else "",
                _exact(step.get("tokens")),
            )
    else:
        for column in ("stage", "shards", "records in", "records out", "bytes in", "time", "retries"):
            table.add_column(column, justify="left" if column == "stage" else "right")
        for job in record.get("jobs", []):
            for stage in job.get("stages", []):
                name = stage["name"] if len(stage["name"]) <= 70 else stage["name"][:67] + "..."
                resumed = f" ({stage['resumed_shards']} resumed)" if stage.get("resumed_shards") else ""
                table.add_row(
                    (f"{job['job']}." if len(record["jobs"]) > 1 else "") + f"{stage['index']} {name}",
                    f"{stage['shards']}{resumed}",
                    format_count(stage["records_in"]),
                    format_count(stage["records_out"]),
                    format_bytes(stage["bytes_in"]),
                    format_duration(stage["seconds"]),
                    str(len(stage["retries"])) if stage["retries"] else "",
                )
    counters: dict[str, int] = {}
    for job in record.get("jobs", []):
        for name, value in job.get("counters", {}).items():
            counters[name] = counters.get(name, 0) + value
    retries = sum(len(s["retries"]) for j in record.get("jobs", []) for s in j.get("stages", []))
    if not table.row_count:  # failed before any stage finished (a cluster error): the error line says it all
        return
    console.print(table)
    shown = counters if verbosity() >= 1 else {k: v for k, v in counters.items() if not is_internal(k)}
    if shown:
        console.print(
            "counters: " + ", ".join(f"{k}={v:,}" for k, v in sorted(shown.items())), markup=False, highlight=False
        )
    if retries:
        console.print(f"{retries} retried shard attempt(s); details in the run record", markup=False, highlight=False)


def _exact(value: Any) -> str:
    """A count in the final summary, exact and with separators (3,234, not 3.23K): it is compared with the
    program's own figures printed below it."""
    return f"{value:,}" if isinstance(value, int | float) else ""
