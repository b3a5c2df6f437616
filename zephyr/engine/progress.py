"""Live progress (one bar per stage) and the summary table printed at the end of every run."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = ["ProgressDisplay", "format_bytes", "format_count"]


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def format_count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


class ProgressDisplay:
    """Shard-level progress bars on stderr when it is a terminal (or when forced on)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.console = Console(stderr=True)
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self._progress = (
            Progress(
                TextColumn("[bold]stage {task.fields[index]}[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("shards  {task.fields[records]} records"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            if self.enabled
            else None
        )
        self._tasks: dict[int, Any] = {}
        self._records: dict[int, int] = {}

    def __enter__(self) -> ProgressDisplay:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start_stage(self, stage: Any, *, resumed: int) -> None:
        self._records[stage.index] = 0
        if self._progress is None:
            return
        name = stage.name if len(stage.name) <= 60 else stage.name[:57] + "..."
        self._tasks[stage.index] = self._progress.add_task(
            name, total=stage.num_shards, completed=resumed, index=stage.index, records="0"
        )

    def shard_done(self, stage: Any, result: Any) -> None:
        self._records[stage.index] += result.records_out
        if self._progress is None:
            return
        self._progress.update(
            self._tasks[stage.index], advance=1, records=format_count(self._records[stage.index])
        )

    def stop_stage(self, stage: Any, *, failed: bool) -> None:
        if self._progress is not None and failed:
            self._progress.update(self._tasks[stage.index], description="[red]failed[/]")

    def summary(self, run: Any) -> None:
        """Print the per-stage table, retries and counters of a finished run (to stderr)."""
        table = Table(title=f"zephyr run summary ({run.seconds:.1f} s)", title_justify="left")
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
        console = self.console if self.enabled else Console(stderr=True, force_terminal=False, width=160)
        if not sys.stderr:
            return
        console.print(table)
        retries = [r for s in run.stages for r in s.retries]
        if retries:
            console.print(f"[yellow]{len(retries)} retried shard attempt(s):[/]")
            for reason in retries:
                console.print(f"  - {reason}")
        if run.counters:
            counters = Table(title="counters", title_justify="left")
            counters.add_column("name")
            counters.add_column("value", justify="right")
            for name, value in sorted(run.counters.items()):
                counters.add_row(name, f"{value:,}")
            console.print(counters)
