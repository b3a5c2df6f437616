"""`--dry-run --estimate`: run a plan on a small sample of its source shards and scale the figures up.

The sample run is a real run of the same stages (same ops, same shuffles) on the first few shards of
every source, in a private scratch directory, with the final output collected and thrown away instead of
written: nothing the real run would write is touched. Figures are scaled by the sampled fraction of the
input (bytes where the shards' sizes are known, else shards): records and bytes in and out per stage, the
scratch bytes a stage's scatter writes, and the wall time at full size on the configured worker count
(the sample's busy time, which ran on min(sample shards, workers) workers, spread over all workers).
Estimates assume the sample is representative: pick inputs whose first shards look like the rest; a
group_by's output (distinct keys) is scaled linearly too, which overstates it when keys repeat across shards.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zephyr.engine.context import ExecutionConfig
from zephyr.engine.outputs import Collect, Scatter
from zephyr.engine.plan import Plan, Stage

__all__ = ["StageEstimate", "estimate_plan", "format_estimate"]


@dataclass(frozen=True)
class StageEstimate:
    """One stage's figures at full size, scaled from a run on a sample of the input shards (`--dry-run
    --estimate`)."""

    index: int
    name: str
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    scratch_bytes: int
    seconds: float


def _sampled_input(stage_input: Any, shards: int) -> tuple[Any, int, int, int]:
    """(input reading only its first `shards` shards, sampled shards, sampled bytes, total bytes)."""
    source_shards = getattr(stage_input, "shards", None)
    if source_shards:
        keep = source_shards[:shards]
        sampled = dataclasses.replace(stage_input, shards=tuple(keep))
        return sampled, len(keep), sum(s.size for s in keep), sum(s.size for s in source_shards)
    total = getattr(stage_input, "num_shards", None)
    if total:  # from_iterable: shard_fn(0..n-1)
        keep = min(shards, total)
        return dataclasses.replace(stage_input, num_shards=keep), keep, keep, total
    return stage_input, 0, 0, 0


def estimate_plan(
    physical: Plan,
    config: ExecutionConfig,
    execute_plan: Callable[[Plan, ExecutionConfig], Any],
    *,
    sample_shards: int = 2,
) -> list[StageEstimate]:
    """Per stage, the expected figures at full size, from a run on `sample_shards` shards per source
    (`execute_plan` is the executor's, passed in: the executor calls this module, not the reverse)."""
    stages: list[Stage] = []
    sampled_bytes = total_bytes = sampled_count = total_count = 0
    for stage in physical.stages:
        stage_input, kept, part, whole = _sampled_input(stage.input, sample_shards)
        num_shards = stage.num_shards
        if kept:
            num_shards = kept
            sampled_count += kept
            total_count += stage.num_shards
            sampled_bytes += part
            total_bytes += whole
        output = stage.output if isinstance(stage.output, Scatter) else Collect()
        stages.append(dataclasses.replace(stage, input=stage_input, output=output, num_shards=num_shards))
    fraction = sampled_bytes / total_bytes if total_bytes and sampled_bytes else (sampled_count / max(1, total_count))
    scratch = tempfile.mkdtemp(prefix="zephyr-estimate-")
    try:
        sample_config = dataclasses.replace(
            config, dry_run=False, scratch=scratch, summary=False, progress=False, keep_scratch=False
        )
        run = execute_plan(Plan(tuple(stages)), sample_config)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    scale = 1 / fraction if fraction else 0.0
    workers = config.num_workers
    estimates = []
    for stage, stats in zip(physical.stages, run.stages, strict=False):
        ran_on = max(1, min(stages[stage.index].num_shards, workers))
        estimates.append(
            StageEstimate(
                stage.index,
                stage.name,
                round(stats.records_in * scale),
                round(stats.records_out * scale),
                round(stats.bytes_in * scale),
                round(stats.bytes_out * scale),
                round(stats.bytes_out * scale) if isinstance(stage.output, Scatter) else 0,
                stats.seconds * ran_on * scale / workers,
            )
        )
    return estimates


def format_estimate(estimates: list[StageEstimate], workers: int) -> str:
    """The estimates as the table `zephyr run --dry-run --estimate` prints."""
    lines = [
        f"estimate at full size on {workers} worker(s), from a run on a sample of the input shards:",
        f"  {'stage':<6}{'records in':>14}{'records out':>14}{'MB in':>10}{'MB out':>10}"
        f"{'scratch MB':>12}{'wall s':>10}",
    ]
    for e in estimates:
        lines.append(
            f"  {e.index:<6}{e.records_in:>14,}{e.records_out:>14,}"
            f"{e.bytes_in / 1e6:>10,.1f}{e.bytes_out / 1e6:>10,.1f}"
            f"{e.scratch_bytes / 1e6:>12,.1f}{e.seconds:>10,.1f}  {e.name}"
        )
    total = sum(e.seconds for e in estimates)
    lines.append(f"  total wall time ~{total:,.0f} s; scratch ~{sum(e.scratch_bytes for e in estimates) / 1e6:,.0f} MB")
    return "\n".join(lines)
