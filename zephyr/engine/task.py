"""One shard of one stage: what the driver sends a worker (`ShardTask`) and what comes back (`ShardResult`).

Kept apart from `worker` so that stage inputs and outputs, which read tasks and fill results, need not
import the worker that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zephyr.engine.shuffle import ReducePiece, RunFile

__all__ = ["ShardTask", "ShardResult"]


@dataclass(frozen=True)
class ShardTask:
    stage_url: str  # the pickled Stage, written once by the driver and cached per worker
    stage_index: int
    shard: int
    attempt: int
    out_dir: str  # this attempt's private directory: fenced outputs
    upstream_runs: tuple[tuple[RunFile, ...], ...] = ()  # per upstream stage, all of its run files
    memory_per_worker: int = 1 << 30
    stage_name: str = ""  # for dashboards and logs
    # a reduce task of a split or packed plan: the targets (and key-hash ranges) it gathers, in order;
    # () means target `shard`, whole
    pieces: tuple[ReducePiece, ...] = ()
    # how many tasks the stage runs: its shard count, or what the reduce plan made of it (a sink's {total})
    num_tasks: int | None = None


@dataclass
class ShardResult:
    shard: int
    attempt: int
    runs: list[RunFile] = field(default_factory=list)  # shuffle output
    paths: list[str] = field(default_factory=list)  # sink output
    result_url: str | None = None  # collected records
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the worker process's CPU time during the shard (--estimate reads it)
    peak_rss: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    skipped_existing: bool = False
