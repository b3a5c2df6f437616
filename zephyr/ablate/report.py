"""The ablation report: per eval set loss and bits per byte over seeds, paired differences against the
baseline with t intervals, a verdict per candidate; printed, and written as CSV, JSON and a PNG plot.

The verdict of a candidate is decided on ``config.metric`` (bits per byte by
default, loss when bytes are unknown) averaged per seed over the decision eval
sets (``primary_eval``, default all of them), then paired by seed with the
baseline. Per-eval-set verdicts are shown beside it. No correction for
multiple comparisons is made: with many candidates, expect about
``1 - confidence`` of the true nulls to come out decisive by chance.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zephyr.json_safe import json_safe

from .runner import AblationPlan, RunResult, read_eval_curves
from .stats import PairedDifference, Spread, paired_difference, spread

__all__ = ["ReportRow", "CandidateVerdict", "Report", "build_report", "format_report", "write_report", "plot_report"]


@dataclass(frozen=True)
class ReportRow:
    """One (mixture, eval set, metric): per-seed values, their spread, and the paired difference vs baseline."""

    mixture: str
    eval_set: str  # an eval set name, or "mean(a,b)" for the decision average
    metric: str  # "loss" | "bpb"
    values: dict[int, float]
    spread: Spread
    vs_baseline: PairedDifference | None  # None for the baseline itself


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate mixture against the baseline: its paired difference on the decision eval sets, the verdict
    there and per eval set, and the line the report prints."""

    mixture: str
    derivation: str
    metric: str
    decision_sets: tuple[str, ...]
    difference: PairedDifference
    per_set: dict[str, str]  # eval set -> verdict on that set alone
    line: str


@dataclass(frozen=True)
class Report:
    """An ablation's report: every mixture's figures per eval set over the seeds, and each candidate's verdict
    against the baseline."""

    baseline: str
    mixtures: dict[str, str]  # name -> description
    metric: str
    confidence: float
    seeds: tuple[int, ...]
    steps: int
    tokens_per_run: int
    eval_sets: tuple[str, ...]
    rows: tuple[ReportRow, ...]
    verdicts: tuple[CandidateVerdict, ...]
    curves: dict[str, dict[int, dict[str, dict[str, list[tuple[int, float]]]]]]  # mixture -> seed -> set -> metric
    runs: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]

    def row(self, mixture: str, eval_set: str, metric: str) -> ReportRow:
        for r in self.rows:
            if (r.mixture, r.eval_set, r.metric) == (mixture, eval_set, metric):
                return r
        raise KeyError(f"no report row for mixture {mixture!r}, eval set {eval_set!r}, metric {metric!r}.")

    def verdict(self, mixture: str) -> CandidateVerdict:
        for v in self.verdicts:
            if v.mixture == mixture:
                return v
        raise KeyError(f"no verdict for {mixture!r}; candidates are {[v.mixture for v in self.verdicts]}.")


def _values(results: list[RunResult], mixture: str, eval_set: str, metric: str) -> dict[int, float]:
    out = {}
    for r in results:
        if r.mixture == mixture and eval_set in r.eval and r.eval[eval_set].get(metric) is not None:
            out[r.seed] = float(r.eval[eval_set][metric])
    return out


def _mean_over(per_set: list[dict[int, float]]) -> dict[int, float]:
    seeds = set.intersection(*(set(p) for p in per_set)) if per_set else set()
    return {s: math.fsum(p[s] for p in per_set) / len(per_set) for s in sorted(seeds)}


def build_report(plan: AblationPlan, results: tuple[RunResult, ...] | list[RunResult]) -> Report:
    """Statistics over ``results`` (one per (mixture, seed) of ``plan``)."""
    cfg = plan.config
    results = list(results)
    base = cfg.baseline.name
    sets = tuple(cfg.eval)
    notes = list(plan.notes)
    have_bpb = all(r.eval.get(s, {}).get("bpb") is not None for r in results for s in sets)
    metrics = ("loss", "bpb") if have_bpb else ("loss",)
    metric = cfg.metric if cfg.metric in metrics else "loss"
    if metric != cfg.metric:
        notes.append(
            f"verdicts use loss: bits per byte is unknown for some eval set (asked for {cfg.metric}); "
            "the stores' tokenizer could not be loaded to count bytes"
        )
    decision = cfg.decision_sets
    decision_name = decision[0] if len(decision) == 1 else f"mean({','.join(decision)})"
    rows: list[ReportRow] = []
    for m in plan.mixtures:
        for s in sets + ((decision_name,) if len(decision) > 1 else ()):
            for k in metrics:
                if s == decision_name and len(decision) > 1:
                    vals = _mean_over([_values(results, m.name, d, k) for d in decision])
                    base_vals = _mean_over([_values(results, base, d, k) for d in decision])
                else:
                    vals, base_vals = _values(results, m.name, s, k), _values(results, base, s, k)
                diff = None if m.name == base else paired_difference(vals, base_vals, confidence=cfg.confidence)
                rows.append(ReportRow(m.name, s, k, vals, spread(list(vals.values())), diff))
    lookup = {(r.mixture, r.eval_set, r.metric): r for r in rows}
    verdicts = []
    pct = f"{100 * cfg.confidence:g}%"
    for m in plan.mixtures[1:]:
        diff = lookup[(m.name, decision_name, metric)].vs_baseline
        per_set = {s: lookup[(m.name, s, metric)].vs_baseline.verdict for s in sets}
        n = len(diff.seeds)
        detail = (
            f"{metric} on {decision_name}: {diff.mean:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}] ({pct} CI, "
            f"n={n} seed{'s' if n != 1 else ''}, p={diff.p_value:.3g})"
        )
        sets_text = ", ".join(f"{s} {v}" for s, v in per_set.items())
        line = f"{m.name} vs {base}: {diff.verdict.upper()}, {detail}; per eval set: {sets_text}"
        verdicts.append(CandidateVerdict(m.name, m.derivation, metric, decision, diff, per_set, line))
    curves: dict[str, dict[int, Any]] = {}
    for r in results:
        curves.setdefault(r.mixture, {})[r.seed] = read_eval_curves(r)
    runs = tuple(
        {
            "mixture": r.mixture,
            "seed": r.seed,
            "status": r.status,
            "steps": r.steps,
            "final_train_loss": r.final_loss,
            "wall_s": r.wall_s,
            "tokens_per_second": r.tokens_per_second,
            "run_dir": r.run_dir,
            "eval": r.eval,
        }
        for r in results
    )
    mixtures = {
        m.name: (m.derivation + ": " if m.derivation != "explicit" else "")
        + ", ".join(
            f"{d}{' (shuffled)' if d in m.shuffled else ''} {100 * w:.1f}%" for d, (_, w) in m.components.items()
        )
        for m in plan.mixtures
    }
    return Report(
        base,
        mixtures,
        metric,
        cfg.confidence,
        cfg.seeds,
        plan.steps,
        plan.tokens_per_run,
        sets,
        tuple(rows),
        tuple(verdicts),
        curves,
        runs,
        tuple(notes),
    )


def _fmt(x: float, digits: int = 4) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def format_report(report: Report) -> str:
    """The terminal table and the verdict lines."""
    pct = f"{100 * report.confidence:g}%"
    metrics = sorted({r.metric for r in report.rows}, key=["loss", "bpb"].index)
    lines = [
        f"Mixture ablation: {len(report.mixtures)} mixtures x {len(report.seeds)} seeds, {report.steps} steps "
        f"({report.tokens_per_run:,} tokens) per run; differences are candidate - {report.baseline}, paired by seed, "
        f"with {pct} t intervals (lower is better)",
        "",
    ]
    width = max(24, *(len(n) + 1 for n in report.mixtures))
    set_width = max(16, *(len(r.eval_set) + 1 for r in report.rows))
    for name, desc in report.mixtures.items():
        lines.append(f"  {name:<{width}} {desc}")
    lines.append("")
    header = f"{'mixture':<{width}} {'eval set':<{set_width}}"
    for k in metrics:
        header += f" {k + ' mean ± sd':>20}"
    header += f" {'Δ' + report.metric + ' vs baseline [' + pct + ' CI]':>36} {'p':>7}  verdict"
    lines.append(header)
    lines.append("-" * len(header))
    for mixture in report.mixtures:
        for s in dict.fromkeys(r.eval_set for r in report.rows if r.mixture == mixture):
            text = f"{mixture:<{width}} {s:<{set_width}}"
            for k in metrics:
                sp = report.row(mixture, s, k).spread
                text += f" {_fmt(sp.mean) + ' ± ' + _fmt(sp.std):>20}"
            diff = report.row(mixture, s, report.metric).vs_baseline
            if diff is None:
                text += f" {'(baseline)':>36} {'':>7}"
            else:
                interval = f"{diff.mean:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}]"
                text += f" {interval:>36} {diff.p_value:>7.3g}  {diff.verdict}"
            lines.append(text)
    lines.append("")
    lines.append(f"Verdicts ({report.metric}, {pct} confidence):")
    lines.extend(f"  {v.line}" for v in report.verdicts)
    if report.notes:
        lines.append("")
        lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)


def write_report(report: Report, output_dir: str | Path) -> dict[str, str]:
    """Write ``report.csv``, ``report.json``, ``report.png`` and ``report.txt``; returns their paths.

    All four are rendered under a temporary directory first and renamed into place only once every
    one of them is complete, so a report that fails to render (or a killed process) leaves the
    previous report as it was, never a mix of old and new files or a cut one.
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".report-", dir=out))
    try:
        rendered = _render_report(report, staging)
        final = {}
        # The tables, which hold the verdicts, move last: a failing rename leaves them as they were.
        for kind in ("plot", "text", "json", "csv"):
            target = out / Path(rendered[kind]).name
            os.replace(rendered[kind], target)
            final[kind] = str(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {kind: final[kind] for kind in ("csv", "json", "text", "plot")}


def _render_report(report: Report, out: Path) -> dict[str, str]:
    csv_path = out / "report.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "mixture",
                "description",
                "eval_set",
                "metric",
                "n_seeds",
                "mean",
                "std",
                "min",
                "max",
                "diff_mean",
                "diff_low",
                "diff_high",
                "p_value",
                "verdict",
                "values_by_seed",
            ]
        )
        for r in report.rows:
            d = r.vs_baseline
            writer.writerow(
                [
                    r.mixture,
                    report.mixtures[r.mixture],
                    r.eval_set,
                    r.metric,
                    r.spread.n,
                    r.spread.mean,
                    r.spread.std,
                    r.spread.min,
                    r.spread.max,
                    d.mean if d else "",
                    d.low if d else "",
                    d.high if d else "",
                    d.p_value if d else "",
                    d.verdict if d else "baseline",
                    ";".join(f"{s}:{v!r}" for s, v in sorted(r.values.items())),
                ]
            )
    json_path = out / "report.json"
    payload = {
        "baseline": report.baseline,
        "mixtures": report.mixtures,
        "metric": report.metric,
        "confidence": report.confidence,
        "seeds": list(report.seeds),
        "steps": report.steps,
        "tokens_per_run": report.tokens_per_run,
        "eval_sets": list(report.eval_sets),
        "rows": [
            {**asdict(r), "spread": asdict(r.spread), "vs_baseline": asdict(r.vs_baseline) if r.vs_baseline else None}
            for r in report.rows
        ],
        "verdicts": [
            {
                "mixture": v.mixture,
                "derivation": v.derivation,
                "metric": v.metric,
                "decision_sets": list(v.decision_sets),
                "verdict": v.difference.verdict,
                "difference": asdict(v.difference),
                "per_set": v.per_set,
                "line": v.line,
            }
            for v in report.verdicts
        ],
        "curves": report.curves,
        "runs": list(report.runs),
        "notes": list(report.notes),
    }
    json_path.write_text(json.dumps(json_safe(payload), indent=1) + "\n")
    txt_path = out / "report.txt"
    txt_path.write_text(format_report(report) + "\n")
    png_path = plot_report(report, out / "report.png")
    return {"csv": str(csv_path), "json": str(json_path), "text": str(txt_path), "plot": str(png_path)}


def plot_report(report: Report, path: str | Path) -> str:
    """Eval curves (mean over seeds, min-max band) per eval set, and final differences with their intervals."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is part of the train extra
        raise ImportError("the ablation plot needs matplotlib: pip install 'matplotlib>=3.8'") from exc
    metric = report.metric
    sets = list(report.eval_sets)
    fig, axes = plt.subplots(1, len(sets) + 1, figsize=(5 * (len(sets) + 1), 4.2), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, s in zip(axes[0], sets, strict=False):  # the last axis holds the differences
        for i, mixture in enumerate(report.mixtures):
            per_seed = [c.get(s, {}).get(metric, []) for c in report.curves.get(mixture, {}).values()]
            per_seed = [dict(points) for points in per_seed if points]
            if not per_seed:
                continue
            steps = sorted(set.intersection(*(set(p) for p in per_seed)))
            mean = [sum(p[t] for p in per_seed) / len(per_seed) for t in steps]
            low = [min(p[t] for p in per_seed) for t in steps]
            high = [max(p[t] for p in per_seed) for t in steps]
            color = colors[i % len(colors)]
            ax.plot(
                steps,
                mean,
                color=color,
                label=mixture,
                lw=1.8 if mixture == report.baseline else 1.3,
                ls="--" if mixture == report.baseline else "-",
            )
            ax.fill_between(steps, low, high, color=color, alpha=0.15)
        ax.set_title(f"eval {metric}: {s}")
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    ax = axes[0][-1]
    labels, means, lows, highs, verdicts = [], [], [], [], []
    for r in report.rows:
        if r.vs_baseline is None or r.metric != metric:
            continue
        d = r.vs_baseline
        labels.append(f"{r.mixture} | {r.eval_set}")
        means.append(d.mean)
        lows.append(d.low)
        highs.append(d.high)
        verdicts.append(d.verdict)
    finite = [v for v in lows + highs + means if v is not None and math.isfinite(v)]
    span = max((abs(v) for v in finite), default=1.0) * 1.2 or 1.0
    for y, (m, lo, hi, v) in enumerate(zip(means, lows, highs, verdicts, strict=True)):
        color = {"better": "tab:green", "worse": "tab:red"}.get(v, "tab:gray")
        lo_c, hi_c = max(lo, -span), min(hi, span)
        ax.plot([lo_c, hi_c], [y, y], color=color, lw=2)
        ax.plot([m], [y], "o", color=color)
        if not math.isfinite(lo) or not math.isfinite(hi):
            ax.annotate("interval unbounded (1 seed)", (m, y), textcoords="offset points", xytext=(4, 5), fontsize=7)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(-span, span)
    ax.invert_yaxis()
    ax.set_title(f"Δ{metric} vs {report.baseline} ({100 * report.confidence:g}% CI)")
    ax.set_xlabel(f"candidate - baseline ({metric}; < 0 is better)")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
