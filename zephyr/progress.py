"""The one live view of a process and plain-line logging, for engine jobs and any other long work.

On a terminal (stdout and stderr both), rows with a bar, counts, rate and ETA are drawn by one rich
Progress; otherwise the same events are plain log lines on stderr. `-q` (verbosity -1) shows nothing,
`-v` (1) adds detail lines. Long non-engine work (labeling, training, verification) reports through
`task_progress(...)`. Nothing here depends on the engine, so every package may use it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Column

__all__ = [
    "LiveView",
    "TaskProgress",
    "format_bytes",
    "format_count",
    "format_duration",
    "live_view",
    "log",
    "set_verbosity",
    "task_progress",
    "terminal",
    "verbosity",
]


# -------------------------------------------------------------------------------- formatting
def format_bytes(n: float) -> str:
    """Bytes with a unit: `512 B`, `3.4 MB` (1024-based)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def format_count(n: float) -> str:
    """A count of things, never mistaken for bytes: `950`, `12.3K`, `1.20M`, `3.40G` (1000-based)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}" if abs(n) < 10 * size else f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def format_duration(seconds: float | None) -> str:
    """Seconds as people read them: `45s`, `3m05s`, `2h14m`; `?` when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# ------------------------------------------------------------------------------- verbosity
def verbosity() -> int:
    """-1 quiet, 0 normal, 1 verbose (from `set_verbosity` or $ZEPHYR_VERBOSITY)."""
    try:
        return int(os.environ.get("ZEPHYR_VERBOSITY", "0"))
    except ValueError:
        return 0


def set_verbosity(level: int) -> None:
    """Set for this process and the workers it starts (they inherit the environment)."""
    os.environ["ZEPHYR_VERBOSITY"] = str(max(-1, min(1, level)))


def terminal() -> bool:
    """True when both stdout and stderr are terminals: draw bars; else plain lines."""
    return bool(sys.stderr and sys.stderr.isatty() and sys.stdout and sys.stdout.isatty())


# ------------------------------------------------------------------------------- live view
class LiveView:
    """The one live display of a process: rows for steps, stages and tasks; plain lines when not a tty."""

    def __init__(self) -> None:
        self.console = Console(stderr=True)
        self._progress: Progress | None = None
        self._rows: set[Any] = set()
        self.forced: bool | None = None

    @property
    def drawing(self) -> bool:
        if verbosity() < 0:
            return False
        return self.forced if self.forced is not None else terminal()

    def _ensure(self) -> Progress | None:
        if not self.drawing:
            return None
        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=2)),
                BarColumn(bar_width=12),
                TextColumn("{task.fields[detail]}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=3)),
                console=self.console,
                transient=True,
                expand=True,
                refresh_per_second=4,
            )
            self._progress.start()
        return self._progress

    def add(self, description: str, *, total: float | None = 1.0, detail: str = "") -> Any:
        progress = self._ensure()
        if progress is None:
            return None
        row = progress.add_task(description, total=total, detail=detail)
        self._rows.add(row)
        return row

    def update(self, row: Any, **fields: Any) -> None:
        if row is not None and self._progress is not None and row in self._rows:
            self._progress.update(row, **fields)

    def remove(self, row: Any) -> None:
        if row is not None and self._progress is not None and row in self._rows:
            self._rows.discard(row)
            self._progress.remove_task(row)

    def log(self, line: str, *, level: int = 0) -> None:
        """A line above the live rows (terminal) or on stderr (plain); shown when verbosity >= level."""
        if verbosity() < level:
            return
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._rows.clear()


_view = LiveView()


def live_view() -> LiveView:
    """The process's one live view (steps and stages on a terminal, log lines otherwise)."""
    return _view


def log(line: str, *, level: int = 0) -> None:
    """A line for the live view or the log, shown at `level` and above (`-v` is 1)."""
    _view.log(line, level=level)


# ------------------------------------------------------------------------- non-engine tasks
class TaskProgress:
    """Progress of one long non-engine task; see `task_progress`."""

    def __init__(self, name: str, total: float | None, unit: str, log_every_s: float, min_log_s: float = 0.0) -> None:
        self.name, self.total, self.unit, self.done = name, total, unit, 0.0
        self.note = ""
        self._started = time.monotonic()
        self._last_log = self._started
        self._log_every_s = log_every_s
        self._min_log_s = min_log_s  # a task shorter than this ends without a line (e.g. a small verify)
        self._row = _view.add(name, total=total, detail=self._detail())

    def _detail(self) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.done / elapsed
        text = f"{format_count(self.done)}"
        if self.total:
            text += f"/{format_count(self.total)}"
        text += f" {self.unit}  {format_count(rate)} {self.unit}/s"
        if self.total and rate > 0:
            text += f"  ETA {format_duration((self.total - self.done) / rate)}"
        if self.note:
            text += f"  {self.note}"
        return text

    def advance(self, n: float = 1) -> None:
        self.set(self.done + n)

    def set(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Progress so far; `note` (e.g. "loss 3.21") is shown after the rate and ETA."""
        self.done = done
        if total is not None:
            self.total = total
        if note is not None:
            self.note = note
        _view.update(self._row, completed=done, total=self.total, detail=self._detail())
        now = time.monotonic()
        if self._row is None and now - self._last_log >= self._log_every_s:
            self._last_log = now
            log(f"{self.name}: {self._detail()}")

    def finish(self, failed: bool = False) -> None:
        _view.remove(self._row)
        seconds = time.monotonic() - self._started
        if seconds < self._min_log_s and not failed:
            return
        state = "failed" if failed else "done"
        log(f"{self.name}: {state}, {format_count(self.done)} {self.unit} in {format_duration(seconds)}")


@contextlib.contextmanager
def task_progress(
    name: str, *, total: float | None = None, unit: str = "items", log_every_s: float = 10.0, min_log_s: float = 0.0
) -> Iterator[TaskProgress]:
    """Show progress of non-engine work: `with task_progress("label", total=n, unit="docs") as p: p.advance()`.

    On a terminal it is a row (bar, rate, ETA) in the run's live view; otherwise a plain line every
    `log_every_s` seconds and one when it ends. Quiet (-q) shows nothing.
    """
    task = TaskProgress(name, total, unit, log_every_s, min_log_s)
    try:
        yield task
    except BaseException:
        task.finish(failed=True)
        raise
    task.finish()
