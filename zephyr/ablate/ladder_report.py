"""A ladder report on screen and on disk: ``ladder.txt``, ``ladder.json`` and ``ladder.png`` (loss against
compute with each mixture's fit and its predicted point; isoflop curves and their minima).

``ladder.json`` is what ``zephyr ui`` shows on its training page and what the benchmark reads. The
three files are rendered under a temporary directory and renamed into place together, as the
one-size report's are, so a failed render never leaves a mix of old and new files.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from zephyr.json_safe import json_safe
from zephyr.text_table import text_table

from .ladder_fit import LadderReport, MixtureLadder

__all__ = ["format_ladder_report", "ladder_json", "write_ladder_report", "plot_ladder"]


_AXIS_SYMBOL = {"non_embedding_params": "N_ne", "params": "N", "flops": "C"}


def _law_text(m: MixtureLadder, axis: str) -> str:
    x = _AXIS_SYMBOL.get(axis, axis)
    if m.law is not None:
        form = f"E + A {x}^-alpha" if m.law.floor else f"A {x}^-alpha (no floor: AICc prefers it)"
        text = f"{form}: E {m.law.E:.4f}  A {m.law.A:.4g}  alpha {m.law.alpha:.4f}  rmse {100 * m.law.rmse:.2f}%"
        if m.compute_law is not None and axis != "flops":
            text += f"; in compute: alpha_C {m.compute_law.alpha:.4f}"
        return text
    if m.joint is not None:
        j = m.joint
        return f"E {j.E:.4f}  A {j.A:.4g} N^-{j.alpha:.4f}  B {j.B:.4g} D^-{j.beta:.4f}  rmse {100 * j.rmse:.2f}%"
    return "-"


def _interval(pair: tuple[float, float] | None, digits: int = 4) -> str:
    return "-" if pair is None else f"[{pair[0]:.{digits}f}, {pair[1]:.{digits}f}]"


def format_ladder_report(report: LadderReport) -> str:
    """The terminal view: points, per-mixture fits and predictions, the ranking verdicts."""
    t = report.target
    pct = f"{100 * report.confidence:g}%"
    kinds = {p.kind for p in report.points}
    seeds = len(report.mixtures[0].points[0].values) if report.mixtures and report.mixtures[0].points else 0
    law = (
        f"L({_AXIS_SYMBOL.get(report.axis, report.axis)}) through the ladder widths ({report.axis})"
        if report.mixtures and report.mixtures[0].method == "ladder"
        else "L(N, D) = E + A N^-alpha + B D^-beta through every run"
    )
    lines = [
        f"Scaling ladder: {len(report.mixtures)} mixtures x "
        f"{sum(p.kind in ('ladder', 'isoflop') for p in report.points)} points "
        f"({', '.join(sorted(kinds - {'target', 'transfer'}))}) x {seeds} seed(s); target {t.name}: "
        f"{t.params:,} params, {t.tokens:,} tokens, {t.flops:.3g} FLOPs",
        f"decision value: {report.metric} on {', '.join(report.decision_sets)}; law: {law}; {pct} bootstrap "
        f"({report.bootstrap} draws)",
        f"extrapolation {report.extrapolation:.1f}x the largest ladder run; the ladder (every run, mixture and seed) "
        f"costs {100 * report.ladder_flops_share:.1f}% of the targets' compute ({report.ladder_flops:.3g} / "
        f"{report.target_flops:.3g} FLOPs)",
        "",
        *text_table(
            "point<18|width>5|layers>6|params>10,|tokens>12,|FLOPs>9.3g|steps>6|batch>5|lr>8.2e",
            [
                (p.name, p.width, p.layers, p.params, p.tokens, p.flops, p.steps, p.batch_size, p.learning_rate)
                for p in report.points
            ],
            indent="  ",
            sep=" ",
        ),
    ]
    lines.append("")
    for m in report.mixtures:
        lines.append(f"{m.mixture}: {report.descriptions.get(m.mixture, '')}")
        lines.append(f"  fit: {_law_text(m, report.axis)}")
        if m.holdout is not None:
            h = m.holdout
            lines.append(
                f"  holdout: fitted without {h.point}, predicts it at {h.predicted:.4f} (measured {h.measured:.4f}, "
                f"error {100 * h.error:+.2f}%)"
            )
        if m.optima:
            optima = "; ".join(
                f"{o.flops:.3g}: N* {o.params:,.0f}, D* {o.tokens:,.0f}, {o.tokens_per_param:.1f} tok/param"
                + ("" if o.inside else " (edge)")
                for o in m.optima
            )
            lines.append(f"  isoflop optima: {optima}")
        if m.tokens_per_param is not None:
            lines.append(
                f"  compute-optimal tokens per parameter at the target: {m.tokens_per_param:.1f} "
                f"{_interval(m.tokens_per_param_interval, 1)}"
            )
        if m.optima_law is not None:
            o = m.optima_law
            lines.append(f"  L(C) through the isoflop optima: E {o.E:.4f}  A {o.A:.4g}  alpha {o.alpha:.4f}")
        line = f"  predicted at {t.name}: {m.predicted:.4f} {_interval(m.interval)}"
        if m.measured_mean is not None and m.error is not None:
            inside = "inside" if m.within_interval else "outside"
            line += f"; measured {m.measured_mean:.4f}, error {100 * m.error:+.2f}% ({inside} the interval)"
        lines.append(line)
    lines.append("")
    lines.append(report.verdict())
    for pair in report.pairs:
        lines.append(
            f"  {pair.worse} - {pair.better}: {pair.mean:+.4f} [{pair.low:+.4f}, {pair.high:+.4f}] "
            f"{'decided' if pair.decided else 'undecided'}"
        )
    lines.append(
        f"ranking measured at the ladder's largest run ({report.ladder_point}): {' < '.join(report.ranking_ladder)}"
    )
    if report.ranking_ladder != report.ranking:
        lines.append("  the ranking changes between the ladder's largest run and the target: one size could not tell")
    if report.ranking_measured is not None:
        agree = "agrees with" if report.ranking_measured == report.ranking else "DIFFERS from"
        lines.append(f"ranking measured at the target: {' < '.join(report.ranking_measured)} ({agree} the prediction)")
    if report.transfer:
        verdict = "holds" if report.transfer_holds else "FAILS"
        lines.append("")
        lines.append(
            f"learning-rate transfer ({report.baseline}, {report.transfer_flops:.3g} FLOPs outside the ladder's): "
            f"{verdict}"
        )
        for check in report.transfer:
            losses = ", ".join(f"x{m:g} {v:.4f}" for m, v in sorted(check.losses.items()))
            lines.append(
                f"  width {check.width}: {losses}; best x{check.best:g}, the recipe's rate "
                f"{100 * check.recipe_gap:.2f}% worse (tolerance {100 * check.tolerance:g}%)"
            )
    if report.notes:
        lines.append("")
        lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)


def ladder_json(report: LadderReport) -> dict[str, Any]:
    """Plain data of the report (``ladder.json``); infinities and NaN become null."""
    mixtures = []
    for m in report.mixtures:
        mixtures.append(
            {
                "mixture": m.mixture,
                "description": report.descriptions.get(m.mixture, ""),
                "method": m.method,
                "law": asdict(m.law) if m.law else None,
                "compute_law": asdict(m.compute_law) if m.compute_law else None,
                "curve": [list(p) for p in m.curve],
                "joint": asdict(m.joint) if m.joint else None,
                "points": [
                    {"point": p.point.name, "flops": p.point.flops, "values": p.values, "mean": p.mean}
                    for p in m.points
                ],
                "optima": [{**asdict(o), "tokens_per_param": o.tokens_per_param} for o in m.optima],
                "optima_law": asdict(m.optima_law) if m.optima_law else None,
                "params_fit": asdict(m.params_fit) if m.params_fit else None,
                "tokens_fit": asdict(m.tokens_fit) if m.tokens_fit else None,
                "tokens_per_param": m.tokens_per_param,
                "tokens_per_param_interval": m.tokens_per_param_interval,
                "predicted": m.predicted,
                "interval": m.interval,
                "holdout": {**asdict(m.holdout), "error": m.holdout.error} if m.holdout else None,
                "measured": m.measured,
                "measured_mean": m.measured_mean,
                "error": m.error,
                "within_interval": m.within_interval,
            }
        )
    return json_safe(
        {
            "axis": report.axis,
            "metric": report.metric,
            "decision_sets": list(report.decision_sets),
            "confidence": report.confidence,
            "bootstrap": report.bootstrap,
            "baseline": report.baseline,
            "target": report.target.to_json(),
            "points": [p.to_json() for p in report.points],
            "mixtures": mixtures,
            "ranking": list(report.ranking),
            "pairs": [{**asdict(p), "decided": p.decided} for p in report.pairs],
            "decided": report.decided,
            "verdict": report.verdict(),
            "ranking_ladder": list(report.ranking_ladder),
            "ladder_point": report.ladder_point,
            "ranking_measured": list(report.ranking_measured) if report.ranking_measured else None,
            "ladder_flops": report.ladder_flops,
            "target_flops": report.target_flops,
            "extrapolation": report.extrapolation,
            "ladder_flops_share": report.ladder_flops_share,
            "recipe": report.recipe,
            "notes": list(report.notes),
            "transfer": [
                {
                    "width": t.width,
                    "losses": {f"{m:g}": v for m, v in t.losses.items()},
                    "best_multiplier": t.best,
                    "recipe_gap": t.recipe_gap,
                    "holds": t.holds,
                }
                for t in report.transfer
            ],
            "transfer_holds": report.transfer_holds,
            "transfer_flops": report.transfer_flops,
        },
        infinity="null",
    )


def write_ladder_report(report: LadderReport, output_dir: str | Path) -> dict[str, str]:
    """Write ``ladder.json``, ``ladder.txt`` and ``ladder.png`` into ``output_dir``; returns their paths."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".ladder-", dir=out))
    try:
        plot_ladder(report, staging / "ladder.png")
        (staging / "ladder.txt").write_text(format_ladder_report(report) + "\n")
        (staging / "ladder.json").write_text(json.dumps(ladder_json(report), indent=1) + "\n")
        final = {}
        for kind, name in (("plot", "ladder.png"), ("text", "ladder.txt"), ("json", "ladder.json")):
            os.replace(staging / name, out / name)
            final[kind] = str(out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def plot_ladder(report: LadderReport, path: str | Path) -> str:
    """Loss against compute (log-log) per mixture: runs, fit, predicted target with its interval, measured target;
    beside it, when there are isoflop runs, loss against size per budget with each parabola's minimum."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is part of the train extra
        raise ImportError("the ladder plot needs matplotlib: pip install 'matplotlib>=3.8'") from exc
    isoflop = any(m.optima for m in report.mixtures)
    fig, axes = plt.subplots(1, 2 if isoflop else 1, figsize=(13 if isoflop else 7, 4.8), squeeze=False)
    ax = axes[0][0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    t = report.target
    low_c = min(p.flops for p in report.points)
    grid = np.logspace(math.log10(low_c) - 0.1, math.log10(t.flops) + 0.1, 200)
    for i, m in enumerate(report.mixtures):
        color = colors[i % len(colors)]
        ladder = [p for p in m.points if p.point.kind == "ladder"]
        other = [p for p in m.points if p.point.kind != "ladder"]
        if ladder:
            ax.plot([p.point.flops for p in ladder], [p.mean for p in ladder], "o", color=color, label=m.mixture)
        if other:
            ax.plot(
                [p.point.flops for p in other],
                [p.mean for p in other],
                ".",
                color=color,
                alpha=0.5,
                label=None if ladder else m.mixture,
            )
        if m.curve:
            ax.plot([c for c, _ in m.curve], [v for _, v in m.curve], "-", color=color, lw=1.2, alpha=0.8)
        if m.optima_law is not None:
            ax.plot(grid, m.optima_law.predict(grid), ":", color=color, lw=1.0, alpha=0.8)
        lo, hi = m.interval if m.interval is not None else (m.predicted, m.predicted)
        ax.errorbar(
            [t.flops],
            [m.predicted],
            yerr=[[max(m.predicted - lo, 0.0)], [max(hi - m.predicted, 0.0)]],  # a percentile interval may miss it
            fmt="D",
            color=color,
            mfc="white",
            capsize=4,
        )
        if m.measured_mean is not None:
            ax.plot([t.flops], [m.measured_mean], "*", color=color, ms=13, mec="black", mew=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel(f"eval {report.metric} ({', '.join(report.decision_sets)})")
    ax.set_title(f"ladder -> {t.name} ({report.extrapolation:.0f}x): fit, predicted (diamond), measured (star)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if isoflop:
        ax2 = axes[0][1]
        for i, m in enumerate(report.mixtures):
            color = colors[i % len(colors)]
            for o in m.optima:
                curve = sorted((p for p in m.points if p.point.budget == o.flops), key=lambda p: p.point.params)
                xs = [p.point.params for p in curve]
                ax2.plot(xs, [p.mean for p in curve], "o-", color=color, alpha=0.6, ms=4)
                ax2.plot([o.params], [o.loss], "v" if o.inside else "x", color=color, ms=8)
        ax2.set_xscale("log")
        ax2.set_xlabel("parameters (N)")
        ax2.set_ylabel(f"eval {report.metric}")
        ax2.set_title("isoflop curves and their minima (triangles)")
        ax2.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
