"""`zephyr run --estimate RECIPE`: every step of a recipe run on a sample of its input, grown to full size.

Why: a dry run cannot estimate a recipe's steps from their plans alone, because every step after the first
reads what an earlier step would write (the plans said "no estimate: the plan reads the output of ..."
for every plan of nemotron_cc.py). So the estimate runs the recipe for real, twice, into a throw-away
folder: once on a sample of the shards of its input (`DEFAULT_SAMPLE` of each source's files, at least
two) and once on half of that sample (every other of those files); each step reads the outputs its
predecessor wrote in the same run. Each step's figures are then grown to the full input by
`zephyr.engine.estimate`'s curves: counts (records, bytes, scratch) on a power law through the two
runs, so distinct keys and duplicates are not scaled as if linear; times as fixed costs (what does not
grow: a stage's set-up, the step's own code) plus work: CPU time per input record (the median of both runs'
shards), times the stage's input records at full size, turned into wall time at the CPU share busy
workers got over the whole estimate and spread over the workers a full-size stage keeps busy. (A line
through both runs' wall times was tried first: on a loaded machine a lone shard runs faster than two
side by side, the first run pays for starting workers, and a 10% sample magnifies such noise 16 times:
steps came out 22-51% off. Each step's own busy time was next: a load spike in a step's few seconds of
sample decided its figure. Then the summed CPU time: a cold worker's first shard (imports, a tokenizer's
tables) was multiplied by nine, 80% over on a quiet machine.)
Core-hours are wall time x workers, as a data team pays for them.

What it writes: nothing under `--output`, except a recipe's own input sample when the recipe builds one
and it is missing (the input it estimates from). The throw-away folder is removed afterwards.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zephyr.engine.context import InputSample, current_config, execution
from zephyr.engine.estimate import DEFAULT_SAMPLE, extrapolate_count, sampled_share
from zephyr.engine.run.record import RunRecorder, use_run
from zephyr.fs import join
from zephyr.progress import format_duration, log
from zephyr.text_table import text_table

__all__ = ["StepEstimator", "StepFigures"]

_LEVELS = ("half", "sample")
_SOURCES = ("read(", "from_list(")  # stage names of sources, which the sample runs sample


@dataclass(frozen=True)
class StepFigures:
    """One step at full size: what the estimate prints."""

    name: str
    documents_in: int | None  # from the step's summary ("documents_in"), when the step reports it
    documents_out: int | None
    bytes_read: int  # its plans' first stages
    bytes_written: int  # its plans' last stages
    scratch_bytes: int  # what its shuffles scatter
    peak_rss: int  # the largest worker task of the larger sample run (memory follows the budget, not size)
    seconds: float  # wall time on the configured workers


@dataclass
class _Measured:
    seconds: float
    jobs: list[dict[str, Any]]
    summary: dict[str, Any]


@dataclass
class StepEstimator:
    """Held by a StepRunner in estimate mode: runs each step at both sample levels and keeps the figures."""

    fraction: float = DEFAULT_SAMPLE
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="zephyr-estimate-"))
    paths: dict[str, dict[str, str]] = field(default_factory=lambda: {level: {} for level in _LEVELS})
    measured: dict[str, dict[str, _Measured]] = field(default_factory=dict)

    def run(
        self, name: str, fn: Callable[..., Mapping[str, Any] | None], config: Any, inputs: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any], float]:
        """Run `fn` on both samples; return (the larger run's output path, its summary, its seconds).
        `inputs` name earlier steps by their step name (`("step", name)`) or are plain paths and globs."""
        engine = current_config()
        for level in _LEVELS:
            base = join(self.workdir, level)
            path = join(base, name)
            args = {
                key: self.paths[level][value[1]] if isinstance(value, tuple) and value[:1] == ("step",) else value
                for key, value in inputs.items()
            }
            sample = InputSample(self.fraction, half=level == "half", exempt=(self.workdir,))
            recorder = RunRecorder()
            started = time.perf_counter()
            with (
                use_run(recorder),
                execution(
                    engine,
                    dry_run=False,
                    estimate=False,
                    sample=sample,
                    scratch=join(base, "_scratch"),
                    summary=False,
                    progress=False,
                ),
            ):
                summary = dict(fn(path, config=config, **args) or {})
            log(f"[estimate] step {name}: {level} run done in {format_duration(time.perf_counter() - started)}")
            self.paths[level][name] = path
            self.measured.setdefault(name, {})[level] = _Measured(
                time.perf_counter() - started, recorder.record["jobs"], summary
            )
        larger = self.measured[name]["sample"]
        return self.paths["sample"][name], larger.summary, larger.seconds

    def share(self, level: str) -> float:
        """The share of the recipe's input a level read (1.0: nothing could be sampled)."""
        parts = [
            p
            for steps in self.measured.values()
            if level in steps
            for j in steps[level].jobs
            for p in j.get("sampled", ())
        ]
        return sampled_share(parts) or 1.0

    def cpu_share(self) -> float:
        """CPU seconds a busy worker got per second in the larger run, over every step: on a machine others
        load too, how fast work went. One figure for the whole estimate, not one per step: a step's sample
        runs for seconds, and a load spike in them would otherwise decide its estimate."""
        stages = [s for steps in self.measured.values() for j in steps["sample"].jobs for s in j["stages"]]
        busy = sum(s.get("busy_seconds", 0.0) for s in stages)
        cpu = sum(s.get("cpu_seconds", 0.0) for s in stages)
        return min(1.0, cpu / busy) if busy > 0 and cpu > 0 else 1.0

    def figures(self) -> list[StepFigures]:
        x1, x2 = self.share("half"), self.share("sample")
        workers, share = current_config().num_workers, self.cpu_share()
        return [
            self._step(name, runs["half"], runs["sample"], x1, x2, workers, share)
            for name, runs in self.measured.items()
        ]

    def _step(
        self, name: str, small: _Measured, large: _Measured, x1: float, x2: float, workers: int, share: float
    ) -> StepFigures:
        def grown(q1: float, q2: float) -> int:
            return round(extrapolate_count(x1, q1, x2, q2))

        def total(run: _Measured, pick: Callable[[list[dict]], list[dict]], key: str) -> float:
            return sum(stage[key] for job in run.jobs for stage in pick(job["stages"]) if stage)

        first = lambda stages: stages[:1]  # noqa: E731 - one-line selectors
        last = lambda stages: stages[-1:]  # noqa: E731
        scatters = lambda stages: [s for s in stages if s["name"].endswith("scatter")]  # noqa: E731
        every = lambda stages: stages  # noqa: E731
        # wall time: the step's own code (fixed) + per stage its fixed part + its work spread over workers.
        # The work is CPU time per input record, times the stage's input records at full size, at the CPU
        # share the whole estimate saw. CPU per input record: the (lower) median over the shards of both runs
        # and of every job of the step that does the same work (the jobs of a recipe's sources differ only in
        # their paths), so that the shards paying for a cold worker (imports, a tokenizer's tables: the first
        # job's, 3 of its 3 shards) do not set the rate of a million records. Per job alone, the first job's
        # median was a cold shard and normalize came out 39% over on a quiet machine.
        pooled: dict[tuple[int, str], list[float]] = {}
        for job in [*small.jobs, *large.jobs]:
            for s, stage in enumerate(job["stages"]):
                pairs = stage.get("shard_cpu") or [(stage["records_in"], stage.get("cpu_seconds", 0.0))]
                pooled.setdefault((s, _shape(stage["name"])), []).extend(cpu / n for n, cpu in pairs if n and cpu)
        for rates in pooled.values():
            rates.sort()
        stage_wall = total(large, every, "seconds")
        seconds = max(0.0, large.seconds - stage_wall)
        for j, job in enumerate(large.jobs):
            other = small.jobs[j] if j < len(small.jobs) else None
            for s, stage in enumerate(job["stages"]):
                before = other["stages"][s] if other is not None and s < len(other["stages"]) else None
                busy2, records2 = stage.get("busy_seconds", 0.0), stage["records_in"]
                records1 = before["records_in"] if before else 0
                growth = extrapolate_count(x1, records1, x2, records2) / records2 if records1 and records2 else 1 / x2
                rates = pooled.get((s, _shape(stage["name"])), [])
                if rates:
                    work2 = rates[(len(rates) - 1) // 2] * records2 / share
                else:
                    work2 = stage["cpu_seconds"] / share if stage.get("cpu_seconds") else busy2
                ran_on = max(1, min(stage["shards"], workers))
                # a sampled source stage gets its full file count at full size: all workers busy
                full_on = workers if job.get("sampled") and stage["name"].startswith(_SOURCES) else ran_on
                seconds += max(0.0, stage["seconds"] - busy2 / ran_on) + work2 * growth / full_on

        def documents(key: str) -> int | None:
            q1, q2 = small.summary.get(key), large.summary.get(key)
            return grown(q1, q2) if isinstance(q1, int) and isinstance(q2, int) else None

        return StepFigures(
            name=name,
            documents_in=documents("documents_in"),
            documents_out=documents("documents_out"),
            bytes_read=grown(total(small, first, "bytes_in"), total(large, first, "bytes_in")),
            bytes_written=grown(total(small, last, "bytes_out"), total(large, last, "bytes_out")),
            scratch_bytes=grown(total(small, scatters, "bytes_out"), total(large, scatters, "bytes_out")),
            peak_rss=int(max((st["peak_rss"] for job in large.jobs for st in job["stages"]), default=0)),
            seconds=seconds,
        )

    def report(self) -> str:
        """The table `zephyr run --estimate` prints."""
        config = current_config()
        workers, budget = config.num_workers, config.memory_per_worker
        x1, x2 = self.share("half"), self.share("sample")
        steps = self.figures()

        def row(f: StepFigures) -> tuple[Any, ...]:
            read, written, scratch = (size / 1e6 for size in (f.bytes_read, f.bytes_written, f.scratch_bytes))
            core_hours = f.seconds * workers / 3600
            return (
                f.name,
                f.documents_in,
                f.documents_out,
                read,
                written,
                scratch,
                f.peak_rss >> 20,
                f.seconds,
                core_hours,
            )

        lines = [
            f"estimate at full size on {workers} worker(s) ({budget >> 20} MiB each): every step ran on {x2:.1%} of "
            f"the input and on {x1:.1%}, each figure grown to 100% (zephyr.step_estimate)",
            *text_table(
                "step<14|docs in>13,|docs out>13,|MB read>10,.0f|MB written>12,.0f|scratch MB>12,.0f|peak RSS MiB>13,"
                "|wall s>10,.0f|core-h>9,.2f",
                map(row, steps),
                indent="  ",
            ),
        ]
        wall = sum(f.seconds for f in steps)
        lines.append(
            f"  total: ~{wall:,.0f} s wall, {wall * workers / 3600:,.2f} core-hours, scratch ~"
            f"{sum(f.scratch_bytes for f in steps) / 1e6:,.0f} MB; peak RSS per worker "
            f"{max((f.peak_rss for f in steps), default=0) >> 20:,} MiB of {budget >> 20:,}"
        )
        if x2 >= 1.0:
            lines.append(
                "  (the sample is the whole input: its sources have too few shards to sample, at least two are "
                "kept; the figures are those of a full run)"
            )
        return "\n".join(lines)

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


_PATH_ARGUMENTS = re.compile(r"\([^()]*/[^()]*\)")


def _shape(stage_name: str) -> str:
    """A stage's name without the arguments that hold paths: the same work on another source's files."""
    return _PATH_ARGUMENTS.sub("(...)", stage_name)
