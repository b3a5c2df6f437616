"""The machine-readable record of a run ("zephyr.run/1", see docs/RUN_RECORD.md): steps, jobs, stages, retries.

Every run writes `<record_dir>/_runs/<run_id>.json` so that later tools (`zephyr ui`, scripts, CI) read
what happened instead of scraping the terminal. The executor and `StepRunner` feed the current
`RunRecorder`; `read_run_records(root)` reads them back.

Which run a job belongs to:
- `zephyr run SCRIPT` (and every subcommand) opens one run around the whole command (`open_run`);
- a `StepRunner` used outside such a command opens a run of its own that it keeps up to date step by step;
- an engine job outside both (a plain `python script.py` calling `.collect()`) is a run of one job,
  recorded under `$ZEPHYR_RUNS`, else `./.zephyr` (beside the default scratch space), so library use
  never adds files to the user's output folders.

The record dir of a `zephyr run` is the recipe's output root (StepRunner), else the directory of the first
sink, else `$ZEPHYR_RUNS`, else `./.zephyr` (the parent of an explicit local `--scratch`).
Writes are atomic (temp file + rename) and happen at most once per second while running, and at the end.

A record says "running" until its process says otherwise, so a process killed with `kill -9` (or a
machine that died) would leave it "running" forever. While running, a heartbeat rewrites the record
every `HEARTBEAT_S` even when nothing else changes, and readers (`observed_status`, used by
`read_run_records` and `zephyr ui`) show a "running" record as "killed" when its process is gone
(same host: the pid is not alive, or is now another process that started after the run), and as
"lost" when it ran on another host and its heartbeat is older than `LOST_AFTER_S`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from zephyr.fs import join, url_to_fs

__all__ = [
    "FORMAT",
    "HEARTBEAT_S",
    "LOST_AFTER_S",
    "RunRecorder",
    "current_run",
    "observed_status",
    "open_run",
    "read_run_records",
    "run_id_now",
    "use_run",
]

FORMAT = "zephyr.run/1"
_WRITE_INTERVAL_S = 1.0
HEARTBEAT_S = 30.0
"""A running record is rewritten at least this often, even while nothing changes (a long shard, training)."""
LOST_AFTER_S = 150.0
"""A running record from another host whose last write is older than this (five heartbeats) reads as "lost"."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_id_now() -> str:
    """A sortable run id: UTC time and pid."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _versions() -> dict[str, str | None]:
    return {
        "zephyr": _version("zephyr") or "0+unknown",  # the installed distribution's (zephyr.__version__)
        "python": platform.python_version(),
        "pyarrow": _version("pyarrow"),
        "ray": _version("ray"),
    }


def one_line(error: BaseException | str) -> str:
    """The first non-empty line of an error's message (records and summaries keep one line)."""
    text = str(error)
    return next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)


class RunRecorder:
    """The record of one run, kept in memory and rewritten to disk as it changes."""

    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        script: str | None = None,
        record_dir: str | None = None,
        backend: str | None = None,
        workers: int | None = None,
        write_empty: bool = True,
    ) -> None:
        self.run_id = run_id_now()
        self.write_empty = write_empty  # False: a run without jobs or steps leaves no record (e.g. `zephyr inspect`)
        self.record_dir = record_dir
        self._started = time.monotonic()
        self._last_write = 0.0
        self._lock = threading.Lock()
        self._write_failed = False
        self._heartbeat: threading.Thread | None = None
        self._stopped = threading.Event()
        self.record: dict[str, Any] = {
            "format": FORMAT,
            "run_id": self.run_id,
            "status": "running",
            "command": list(command if command is not None else ["python", *sys.argv]),
            "script": script,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "backend": backend,
            "workers": workers,
            "started_at": _now(),
            "updated_at": _now(),
            "finished_at": None,
            "seconds": 0.0,
            "versions": _versions(),
            "error": None,
            "steps": [],
            "jobs": [],
        }
        self.current_step: str | None = None
        self.summary_at_end = False  # the command prints this run's final summary (`zephyr run`, subcommands)

    # ------------------------------------------------------------------------------- steps
    def begin_step(self, name: str, version: str, path: str) -> dict[str, Any]:
        step: dict[str, Any] = {
            "name": name,
            "version": version[:10],
            "path": path,
            "status": "running",
            "started_at": _now(),
            "seconds": None,
            "docs_in": None,
            "docs_out": None,
            "removed": {},
            "tokens": None,
            "summary": {},
        }
        self.record["steps"].append(step)
        self.current_step = name
        self.write(force=True)
        return step

    def end_step(self, step: dict[str, Any], status: str, *, seconds: float, summary: dict[str, Any] | None) -> None:
        step["status"] = status
        step["seconds"] = round(seconds, 3)
        summary = summary or {}
        step["summary"] = _jsonable(summary)
        step.update(step_figures(summary))
        self.current_step = None
        self.write(force=True)

    # -------------------------------------------------------------------------------- jobs
    def begin_job(self, *, sink_dir: str | None, config: Any) -> dict[str, Any]:
        if self.record_dir is None and sink_dir is not None:
            self.record_dir = sink_dir
        if self.record["backend"] is None:
            self.record["backend"] = config.backend
            self.record["workers"] = config.num_workers
        job: dict[str, Any] = {
            "job": len(self.record["jobs"]),
            "step": self.current_step,
            "status": "running",
            "started_at": _now(),
            "seconds": None,
            "counters": {},
            "stages": [],
        }
        self.record["jobs"].append(job)
        self.write()
        return job

    def end_job(self, job: dict[str, Any], status: str, *, seconds: float, counters: dict[str, int]) -> None:
        job["status"] = status
        job["seconds"] = round(seconds, 3)
        job["counters"] = dict(counters)
        self.write(force=True)

    # ------------------------------------------------------------------------------ finish
    def finish(self, status: str, error: BaseException | None = None, *, fallback_dir: str | None = None) -> None:
        self.record["status"] = status
        self._stopped.set()  # the heartbeat ends; a StepRunner that runs another step restarts it
        self.record["finished_at"] = _now()
        if error is not None:
            self.record["error"] = {"type": type(error).__name__, "message": one_line(error)}
        if not self.write_empty and not self.record["jobs"] and not self.record["steps"]:
            return
        if self.record_dir is None:
            self.record_dir = fallback_dir or default_record_dir()
        self.write(force=True)

    @property
    def path(self) -> str | None:
        return join(self.record_dir, "_runs", f"{self.run_id}.json") if self.record_dir else None

    def write(self, *, force: bool = False) -> None:
        """Rewrite the record atomically (at most once per second unless forced); never fails the run."""
        now = time.monotonic()
        if self.record_dir is None or (not force and now - self._last_write < _WRITE_INTERVAL_S):
            return
        with self._lock:
            self._last_write = now
            self.record["updated_at"] = _now()
            self.record["seconds"] = round(now - self._started, 3)
            try:
                text = json.dumps(self.record, indent=1, default=str)
                fs, directory = url_to_fs(join(self.record_dir, "_runs"))
                fs.makedirs(directory, exist_ok=True)
                final = f"{directory}/{self.run_id}.json"
                temp = f"{directory}/.tmp-{self.run_id}.json"
                with fs.open(temp, "w") as handle:
                    handle.write(text)
                fs.mv(temp, final)
            except Exception as error:  # noqa: BLE001 - the record is a by-product; the run goes on
                if not self._write_failed:
                    self._write_failed = True
                    print(f"zephyr: cannot write the run record under {self.record_dir}: {error}", file=sys.stderr)
        if self.record["status"] == "running" and (self._heartbeat is None or not self._heartbeat.is_alive()):
            self._stopped.clear()
            self._heartbeat = threading.Thread(target=self._beat, name="zephyr-run-heartbeat", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        """Rewrite the record every HEARTBEAT_S while it says "running", so a reader on another host can
        tell a quiet run from a dead one."""
        while not self._stopped.wait(HEARTBEAT_S):
            if self.record["status"] != "running":
                return
            self.write(force=True)


def default_record_dir(scratch: str | None = None) -> str:
    """$ZEPHYR_RUNS, else the parent of an explicitly set scratch directory, else ./.zephyr."""
    if os.environ.get("ZEPHYR_RUNS"):
        return os.environ["ZEPHYR_RUNS"]
    if scratch and "://" not in scratch:
        return os.path.dirname(os.path.abspath(scratch).rstrip("/")) or "."
    return os.path.abspath(".zephyr")


def lone_job_record_dir(config: Any) -> str:
    """Where a job outside `zephyr run` and StepRunner records itself: $ZEPHYR_RUNS, else ./.zephyr."""
    return os.environ.get("ZEPHYR_RUNS") or os.path.abspath(".zephyr")


def step_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """docs_in/docs_out/removed/tokens read from a step's summary by the usual names."""
    docs_in = summary.get("documents_in", summary.get("docs_in"))
    docs_out = summary.get("documents_out", summary.get("docs_out"))
    removed: dict[str, int] = {}
    if isinstance(summary.get("removed"), dict):
        removed = {str(k): int(v) for k, v in summary["removed"].items()}
    else:
        for key, value in summary.items():
            if key.endswith("_removed") and isinstance(value, int):
                removed[key[: -len("_removed")]] = value
        if not removed and isinstance(docs_in, int) and isinstance(docs_out, int) and docs_in != docs_out:
            removed["dropped"] = docs_in - docs_out
    tokens = summary.get("tokens") if isinstance(summary.get("tokens"), int) else None
    if tokens is None:  # per split: its tokens and its held-out (validation) tokens, as tokenize/tokens counts them
        nested = [
            v["tokens"] + int(v.get("validation_tokens") or 0)
            for v in summary.values()
            if isinstance(v, dict) and isinstance(v.get("tokens"), int)
        ]
        tokens = sum(nested) if nested else None
    return {
        "docs_in": docs_in if isinstance(docs_in, int) else None,
        "docs_out": docs_out if isinstance(docs_out, int) else None,
        "removed": removed,
        "tokens": tokens,
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


# ----------------------------------------------------------------------------- current run
_current: RunRecorder | None = None


def current_run() -> RunRecorder | None:
    """The run that jobs and steps report to, if one is open."""
    return _current


@contextlib.contextmanager
def open_run(recorder: RunRecorder, *, fallback_dir: str | None = None) -> Iterator[RunRecorder]:
    """Make `recorder` the current run for the block; its final status follows how the block ends."""
    global _current
    previous, _current = _current, recorder
    try:
        yield recorder
    except KeyboardInterrupt as error:
        recorder.finish("interrupted", error, fallback_dir=fallback_dir)
        raise
    except BaseException as error:
        if isinstance(error, SystemExit) and error.code == 2 and not recorder.record["steps"]:
            recorder.write_empty = False  # a usage error (argparse) before any work: nothing ran to record
        if isinstance(error, SystemExit) and not error.code:
            recorder.finish("succeeded", fallback_dir=fallback_dir)
        else:
            recorder.finish("failed", error, fallback_dir=fallback_dir)
        raise
    else:
        recorder.finish("succeeded", fallback_dir=fallback_dir)
    finally:
        _current = previous


@contextlib.contextmanager
def use_run(recorder: RunRecorder) -> Iterator[RunRecorder]:
    """Make `recorder` current for the block without finishing it (a StepRunner's own run, per step)."""
    global _current
    previous, _current = _current, recorder
    try:
        yield recorder
    finally:
        _current = previous


# ------------------------------------------------------------------------------------ reader
def _parse_time(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _process_start(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), from /proc on Linux; None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith(b"btime"))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _alive(pid: int, started_at: float | None) -> bool:
    """Whether the run's own process is alive: the pid exists and (where /proc tells) did not start
    after the run did (a pid reused by a later process is not the run)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    except OSError:
        return True  # cannot tell: assume alive rather than call a live run killed
    begun = _process_start(pid)
    return begun is None or started_at is None or begun <= started_at + 2.0


def observed_status(record: dict[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """`record` as a reader should show it: a "running" record whose process is gone reads "killed"
    (same host, pid checked), one from another host whose heartbeat is older than LOST_AFTER_S reads
    "lost"; its running steps and jobs take the same status and "status_note" says why. Other
    records are returned as they are. The file on disk is not changed (its writer may be alive)."""
    if record.get("status") != "running":
        return record
    now = time.time() if now is None else now
    host, pid = record.get("host"), record.get("pid")
    updated = _parse_time(record.get("updated_at"))
    last = f"last written {record.get('updated_at')}"
    if host == socket.gethostname() and isinstance(pid, int):
        if _alive(pid, _parse_time(record.get("started_at"))):
            return record
        status, note = "killed", f"its process (pid {pid} on {host}) is gone without finishing the record; {last}"
    elif updated is not None and now - updated > LOST_AFTER_S:
        status = "lost"
        note = (
            f"ran on {host} (pid {pid}), whose heartbeat stopped: {last}, {now - updated:.0f} s ago "
            f"(a running record is rewritten every {HEARTBEAT_S:.0f} s)"
        )
    else:
        return record
    shown = dict(record, status=status, status_note=note, recorded_status="running")
    shown["steps"] = [dict(s, status=status) if s.get("status") == "running" else s for s in record.get("steps") or []]
    shown["jobs"] = [dict(j, status=status) if j.get("status") == "running" else j for j in record.get("jobs") or []]
    return shown


def read_run_records(root: str) -> list[dict[str, Any]]:
    """Every run record under `root` (its `_runs/` and those of folders up to two levels down), newest first.

    Files that are not zephyr.run/1 JSON objects (or are being written: names starting with "." or
    "_tmp") are skipped. Each record gets "record_path", where it was read from. A "running" record whose
    process is gone reads "killed" or "lost" (`observed_status`).
    """
    fs, base = url_to_fs(root)
    candidates: list[str] = []
    for pattern in ("_runs/*.json", "*/_runs/*.json", "*/*/_runs/*.json"):
        with contextlib.suppress(FileNotFoundError):
            candidates += fs.glob(f"{base.rstrip('/')}/{pattern}")
    if base.rstrip("/").endswith("_runs"):
        candidates += fs.glob(f"{base.rstrip('/')}/*.json")
    records = []
    for path in sorted(set(candidates)):
        name = path.rsplit("/", 1)[-1]
        if name.startswith((".", "_tmp")):
            continue
        try:
            with fs.open(path, "r") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            continue
        record["record_path"] = path if "://" not in root else f"{root.split('://')[0]}://{path}"
        records.append(observed_status(record))
    records.sort(key=lambda r: (r.get("started_at") or "", r.get("run_id") or ""), reverse=True)
    return records
