"""`--estimate`: run on two nested samples of the input, then extrapolate each figure to the full input.

Why two samples: one sample scaled linearly gets whatever does not grow with the input wrong. A
`group_by` over keys that repeat across shards makes as many groups from 2 files as from 8 (scaled
linearly, 50 groups were predicted as 200; a step's fixed costs, such as starting workers or loading a
tokenizer, were multiplied too). With the same pipeline run on a sample and on half of it (every other
one of its shards), each figure gets a growth curve through two points, extrapolated to the whole input:

- counts (records, bytes, scratch bytes): a power law q = a * x^b, so b ~ 1 for records that scale with
  the input and b < 1 for distinct keys (Heaps' law for words; b = 0 when the keys are all there already);
- times: the shards' CPU time per input record (in the larger run, which runs second, on warm workers)
  times the stage's input records at full size, spread over min(shards, workers), plus the stage's fixed
  wall time (set-up, the barrier), which does not grow. `zephyr.step_estimate` refines this for recipes.

x is the sampled share of the input: bytes for files of known size, else shards. Sampling keeps whole
shards (files), spread evenly over each source, at least two when a source has two, so every job runs
with its full structure. Sources the caller exempts (step outputs of the sample run itself) are read
whole. `estimate_plan` does this for one plan (`zephyr run --dry-run --estimate` of a script that runs
plans); `zephyr.step_estimate` does it for a whole recipe of steps.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zephyr.engine.context import ExecutionConfig, InputSample
from zephyr.engine.inputs import FileInput
from zephyr.engine.outputs import Collect, Scatter
from zephyr.engine.plan import Plan
from zephyr.text_table import text_table

__all__ = [
    "DEFAULT_SAMPLE",
    "StageEstimate",
    "estimate_plan",
    "extrapolate_count",
    "extrapolate_time",
    "format_estimate",
    "sample_plan",
    "sampled_share",
    "sampled_shards",
]

DEFAULT_SAMPLE = 0.1  # share of each source's shards in the larger sample (half of it in the smaller)


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


# ------------------------------------------------------------------------------------------ sampling


def sampled_shards(n: int, fraction: float, half: bool) -> list[int]:
    """Indices of the shards a sample keeps of `n`: `fraction` of them, evenly spread, at least two (when
    there are two); with `half`, every other one of those, so the half sample lies inside the sample."""
    if n <= 1:
        return list(range(n))
    k = min(n, max(2, math.ceil(fraction * n)))
    chosen = [i * n // k for i in range(k)]
    return chosen[::2] if half else chosen


def _exempt(path: str | None, exempt: tuple[str, ...]) -> bool:
    return path is not None and any(path == root or path.startswith(root.rstrip("/") + "/") for root in exempt)


def _sampled_input(stage_input: Any, sample: InputSample) -> tuple[Any, tuple[int, int] | None]:
    """(the input reading only its sample of shards, (read, of) in bytes or shards); unchanged inputs: None."""
    if isinstance(stage_input, FileInput):  # data files, or (the `path` format) files an op reads, as WARC's
        shards = stage_input.shards
        if not shards or any(_exempt(s.path, sample.exempt) for s in shards):
            return stage_input, None
        keep = [shards[i] for i in sampled_shards(len(shards), sample.fraction, sample.half)]
        total = sum(s.size for s in shards)
        share = (sum(s.size for s in keep), total) if total else (len(keep), len(shards))
    else:  # in-memory records are data, not file names (an op's own files: the `path` format, a FileInput)
        return stage_input, None
    renumbered = tuple(dataclasses.replace(s, index=i) for i, s in enumerate(keep))
    return dataclasses.replace(stage_input, shards=renumbered), share


def sample_plan(physical: Plan, sample: InputSample) -> Plan:
    """`physical` reading only `sample` of each source (the executor's hook for --estimate's sample runs).

    Run the result with its own scratch space: its stages keep the fingerprints of the full plan.
    """
    stages, shares = [], []
    for stage in physical.stages:
        sampled, share = _sampled_input(stage.input, sample)
        if share is None:
            stages.append(stage)
            continue
        shares.append(share)
        stages.append(dataclasses.replace(stage, input=sampled, num_shards=len(sampled.shards)))
    return dataclasses.replace(physical, stages=tuple(stages), sampled=(*physical.sampled, *shares))


def sampled_share(parts: list[list[int]] | list[tuple[int, int]]) -> float | None:
    """The share of the input a run read, from its plans' `sampled` (read, of) pairs; None: nothing sampled."""
    read = sum(part[0] for part in parts)
    total = sum(part[1] for part in parts)
    return read / total if total else None


# ------------------------------------------------------------------------------------------ growth


def extrapolate_count(x1: float, q1: float, x2: float, q2: float) -> float:
    """q at x = 1 on the power law through (x1, q1) and (x2, q2), its exponent kept in [0, 2].

    Equal samples (x1 == x2: nothing to fit) or a zero count scale linearly from the larger sample.
    """
    if x2 >= 1.0:
        return q2
    if x1 <= 0 or q1 <= 0 or q2 <= 0 or abs(x2 - x1) < 1e-9:
        return q2 / x2 if x2 > 0 else q2
    exponent = min(2.0, max(0.0, math.log(q2 / q1) / math.log(x2 / x1)))
    return q2 * (1.0 / x2) ** exponent


def extrapolate_time(x1: float, t1: float, x2: float, t2: float) -> float:
    """t at x = 1 on the line through (x1, t1) and (x2, t2); a falling line (noise) counts as flat, and
    equal samples scale proportionally from the larger one."""
    if x2 >= 1.0:
        return t2
    if abs(x2 - x1) < 1e-9:
        return t2 / x2 if x2 > 0 else t2
    slope = max(0.0, (t2 - t1) / (x2 - x1))
    return t2 + slope * (1.0 - x2)


# ------------------------------------------------------------------------------------------ one plan


def estimate_plan(
    physical: Plan,
    config: ExecutionConfig,
    execute_plan: Callable[[Plan, ExecutionConfig], Any],
    *,
    fraction: float = DEFAULT_SAMPLE,
) -> list[StageEstimate]:
    """Per stage, the expected figures at full size, from runs on a sample of each source's shards and on
    half of it (`execute_plan` is the executor's, passed in: the executor calls this module, not the
    reverse). The final output is collected and thrown away; each run has its own scratch space."""
    stages = tuple(
        dataclasses.replace(stage, output=stage.output if isinstance(stage.output, Scatter) else Collect())
        for stage in physical.stages
    )
    collecting = dataclasses.replace(physical, stages=stages)
    runs, shares = [], []
    for half in (True, False):
        scratch = tempfile.mkdtemp(prefix="zephyr-estimate-")
        try:
            sample = InputSample(fraction, half)
            run_config = dataclasses.replace(
                config, dry_run=False, estimate=False, sample=sample, scratch=scratch, summary=False, progress=False
            )
            runs.append(execute_plan(collecting, run_config))
            shares.append(sampled_share(list(sample_plan(collecting, sample).sampled)) or 1.0)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    (x1, x2), (small, large) = shares, runs
    workers = config.num_workers
    cpu, busy = sum(s.cpu_seconds for s in large.stages), sum(s.busy_seconds for s in large.stages)
    share = min(1.0, cpu / busy) if cpu > 0 and busy > 0 else 1.0  # CPU a busy worker got per second
    estimates = []
    for stage, s1, s2 in zip(physical.stages, small.stages, large.stages, strict=False):

        def count(name: str, s1: Any = s1, s2: Any = s2) -> int:
            return round(extrapolate_count(x1, getattr(s1, name), x2, getattr(s2, name)))

        # work: the larger run's CPU per input record (it ran second, on warm workers) times the records at
        # full size; the stage's time beyond its shards' work (set-up, the barrier) as measured
        records = extrapolate_count(x1, s1.records_in, x2, s2.records_in)
        if s2.records_in and s2.cpu_seconds:
            work = s2.cpu_seconds / s2.records_in * records / share
        else:
            work = extrapolate_time(x1, s1.busy_seconds, x2, s2.busy_seconds)
        fixed = max(0.0, s2.seconds - s2.busy_seconds / max(1, min(s2.shards, workers)))
        full_shards = stage.num_shards or s2.shards
        seconds = work / max(1, min(full_shards, workers)) + fixed
        bytes_out = count("bytes_out")
        estimates.append(
            StageEstimate(
                stage.index,
                stage.name,
                count("records_in"),
                count("records_out"),
                count("bytes_in"),
                bytes_out,
                bytes_out if isinstance(stage.output, Scatter) else 0,
                seconds,
            )
        )
    return estimates


def format_estimate(estimates: list[StageEstimate], workers: int) -> str:
    """The estimates as the table `zephyr run --dry-run --estimate` prints."""

    def row(e: StageEstimate) -> tuple[Any, ...]:
        mb_in, mb_out, scratch = (size / 1e6 for size in (e.bytes_in, e.bytes_out, e.scratch_bytes))
        return e.index, e.records_in, e.records_out, mb_in, mb_out, scratch, e.seconds, f"  {e.name}"

    lines = [
        f"estimate at full size on {workers} worker(s), grown from runs on a sample of the input shards and on "
        "half of it:",
        *text_table(
            "stage<6|records in>14,|records out>14,|MB in>10,.1f|MB out>10,.1f|scratch MB>12,.1f|wall s>10,.1f|<",
            map(row, estimates),
            indent="  ",
        ),
    ]
    total = sum(e.seconds for e in estimates)
    scratch = sum(e.scratch_bytes for e in estimates) / 1e6
    lines.append(
        f"  total wall time ~{total:,.0f} s ({total * workers / 3600:,.2f} core-hours); scratch ~{scratch:,.0f} MB"
    )
    return "\n".join(lines)
