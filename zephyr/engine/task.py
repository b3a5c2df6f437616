"""One shard of one stage: what the driver sends a worker (`ShardTask`) and what comes back (`ShardResult`).

Kept apart from `worker` so that stage inputs and outputs, which read tasks and fill results, need not
import the worker that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zephyr.engine.shuffle import ReducePiece, RunFile

__all__ = ["Figures", "ShardContext", "ShardTask", "ShardResult"]


@dataclass(frozen=True)
class ShardContext:
    """Which shard a stage's narrow ops are running on: what `map_shard(fn, with_context=True)` passes to `fn`
    as its second argument, and (as text) how errors name the place (`str(context)`).

    With the record's index within the shard, `shard` names a record's position deterministically, so a
    decision computed in one pass can be looked up in a second pass over the same dataset (exact dedup does).
    """

    shard: int  # the source shard, shuffle target or reduce task
    num_shards: int  # the stage's shard (task) count
    stage: int
    attempt: int
    where: str  # "stage 0 (read(...) -> ...), shard 3 (data/part-3.jsonl)"

    def __str__(self) -> str:
        return self.where


@dataclass(frozen=True)
class ShardTask:
    """One attempt at one shard of one stage, as the driver sends it to a worker."""

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


@dataclass(kw_only=True)
class Figures:
    """What is measured of a shard (`ShardResult`) and, summed, of a stage (`executor.StageStats`)."""

    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the worker process's CPU time during the shard, a stage's summed (--estimate reads it)
    peak_rss: int = 0


@dataclass
class ShardResult(Figures):
    """What one attempt at a shard produced: its outputs (shuffle runs, written paths or collected records),
    its figures and counters."""

    shard: int
    attempt: int
    runs: list[RunFile] = field(default_factory=list)  # shuffle output
    paths: list[str] = field(default_factory=list)  # sink output
    result_url: str | None = None  # collected records
    counters: dict[str, int] = field(default_factory=dict)
    skipped_existing: bool = False
