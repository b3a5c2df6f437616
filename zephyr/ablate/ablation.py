"""Run a whole ablation: plan it, train every pending (mixture, seed) run, then report.

Planning and one run live in `zephyr.ablate.runner`, the statistics and the report in
`zephyr.ablate.report`; this module sits above both (the report reads runs, and running them all
ends with a report), so neither imports the other's caller.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zephyr.config import ConfigError

from .config import AblationConfig
from .ladder_fit import LadderReport, build_ladder_report
from .ladder_report import format_ladder_report, write_ladder_report
from .report import Report, build_report, format_report, write_report
from .runner import (
    AblationPlan,
    RunResult,
    RunSpec,
    config_drift,
    execute_run,
    load_run_result,
    plan_ablation,
    write_json,
)

__all__ = ["AblationOutcome", "run_ablation"]


# ----------------------------------------------------------------------------- running them all


def _name(spec: RunSpec) -> str:
    return f"{spec.mixture}{' ' + spec.point if spec.point else ''} seed {spec.seed}"


def _run_local(pending: list[RunSpec], log: Callable[[str], None], total: int, done_before: int) -> list[RunResult]:
    results = []
    for i, spec in enumerate(pending, start=done_before + 1):
        log(f"[{i}/{total}] {_name(spec)}: training ({spec.run_dir})")
        result = execute_run(spec)
        log(
            f"[{i}/{total}] {_name(spec)}: {result.status} in {result.wall_s:.1f}s, "
            + ", ".join(f"{n} loss {v['loss']:.4f}" for n, v in result.eval.items())
        )
        results.append(result)
    return results


def _run_ray(
    pending: list[RunSpec], config: AblationConfig, log: Callable[[str], None], total: int, done_before: int
) -> list[RunResult]:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs Ray: pip install 'ray[data]>=2.40,<3'") from exc
    from zephyr.engine.backends.ray import connect

    started = connect(config.ray_address)
    try:
        task = ray.remote(
            num_cpus=config.cpus_per_run, num_gpus=config.gpus_per_run, max_retries=2, retry_exceptions=False
        )(execute_run)
        refs = {task.remote(spec): spec for spec in pending}
        log(f"submitted {len(refs)} run(s) to Ray ({config.gpus_per_run:g} GPU, {config.cpus_per_run:g} CPU each)")
        results, waiting, finished = [], list(refs), done_before
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            spec = refs[ready[0]]
            result = ray.get(ready[0])
            finished += 1
            log(f"[{finished}/{total}] {_name(spec)}: {result.status} in {result.wall_s:.1f}s")
            results.append(result)
        return results
    finally:
        if started:
            ray.shutdown()


@dataclass(frozen=True)
class AblationOutcome:
    """What an ablation produced: its plan, every run's result, the report (None when not asked for) and the files
    written."""

    plan: AblationPlan
    results: tuple[RunResult, ...]
    report: Report | None  # the one-size report (None for a ladder)
    files: dict[str, str]
    ladder: LadderReport | None = None  # a ladder's fits, predictions and ranking


def run_ablation(
    config: AblationConfig, *, backend: str | None = None, report: bool = True, log: Callable[[str], None] | None = None
) -> AblationOutcome:
    """Plan, run every pending (mixture, seed) pair (or (mixture, ladder point, seed) triple), then write and
    print the report (a ladder's: `zephyr.ablate.ladder_fit`).

    Finished runs are read back from their done markers; ``backend``
    overrides ``config.backend``. Returns the plan, every run's result (in
    plan order) and the report with the paths of the files written.
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    plan = plan_ablation(config)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "plan.json", plan.to_json())
    for note in plan.notes:
        log(f"note: {note}")
    cached = {r.key: res for r in plan.runs if (res := load_run_result(r)) is not None}
    pending = [r for r in plan.runs if r.key not in cached]
    drift = sorted({d for r in plan.runs if r.key in cached for d in config_drift(r)})
    if drift:
        note = (
            "finished runs were trained with other trainer defaults than this code would use ("
            + "; ".join(drift)
            + "); delete their run directories to retrain them"
        )
        plan = dataclasses.replace(plan, notes=(*plan.notes, note))
        log(f"note: {note}")
    if plan.points:
        fitted = sum(p.kind in ("ladder", "isoflop") for p in plan.points)
        transfer = sum(p.kind == "transfer" for p in plan.points)
        sizes = f"{fitted} ladder points (+ target {plan.points[-1].name}" + (
            f", {transfer} transfer-check runs)" if transfer else ")"
        )
        log(
            f"ladder {out}: {len(plan.mixtures)} mixtures x {sizes} x {len(config.seeds)} seeds = {len(plan.runs)} "
            f"runs; {len(cached)} finished, {len(pending)} to run"
        )
    else:
        log(
            f"ablation {out}: {len(plan.mixtures)} mixtures x {len(config.seeds)} seeds = {len(plan.runs)} runs of "
            f"{plan.steps} steps ({plan.tokens_per_run:,} tokens); {len(cached)} finished, {len(pending)} to run"
        )
    chosen = backend or config.backend
    if chosen not in ("local", "ray"):
        raise ConfigError(f"backend must be 'local' or 'ray', got {chosen!r}.")
    if pending:
        fresh = (
            _run_ray(pending, config, log, len(plan.runs), len(cached))
            if chosen == "ray"
            else _run_local(pending, log, len(plan.runs), len(cached))
        )
        for result in fresh:
            cached[result.key] = result
    results = tuple(cached[r.key] for r in plan.runs)
    if not report:
        return AblationOutcome(plan, results, None, {})
    if plan.points:
        ladder = build_ladder_report(plan, results)
        files = write_ladder_report(ladder, out)
        print(format_ladder_report(ladder))
        for kind, path in files.items():
            log(f"wrote {kind}: {path}")
        return AblationOutcome(plan, results, None, files, ladder)
    rep = build_report(plan, results)
    files = write_report(rep, out)
    print(format_report(rep))
    for kind, path in files.items():
        log(f"wrote {kind}: {path}")
    return AblationOutcome(plan, results, rep, files)
