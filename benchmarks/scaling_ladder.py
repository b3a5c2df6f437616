"""Scaling-ladder predictions checked by training the target: small runs on real text predict a larger run's loss.

    .venv/bin/python benchmarks/scaling_ladder.py [--quick] [--output DIR] [--transfer]

1. Real offline text (zephyr.ablate.sample_text.write_sample_stores): English prose (the aeb-dev news
   articles when ../shared/data has them, the installed packages' READMEs, the Python reference,
   docstrings) and Python code (the standard library, then the installed packages' sources),
   tokenized with a 1024-entry BPE trained on them, each with a held-out validation split.
2. Mixtures of the two stores (quick: prose-heavy and code-heavy; full: a balanced one too), evaluated
   on both validation splits (mean eval loss in nats per token decides).
3. A scaling ladder per mixture (`zephyr ablate` with `ladder:`): every width trained with one
   ScalingRecipe at 20 tokens per parameter, L(N) = E + A N^-alpha fitted per mixture on
   non-embedding parameters (the floor kept only when AICc wants it; L(C)'s exponent reported too),
   bootstrap intervals, the loss predicted at the target; `verify` then trains each target.
   Quick: widths 10-24 (two layers) predicting width 48 (three layers), 12x past the largest ladder
   run; full: widths 12-28 predicting width 64, 31x, two seeds per ladder width.
4. Full run only: isoflop sweeps of the prose- and code-heavy mixtures (5e10, 1.5e11 and 4.5e11
   FLOPs, widths 8-40, one seed, their own output folder and compute): each budget's
   compute-optimal size from a parabola in log N, the data's compute-optimal tokens per parameter
   at the target, and L(N, D) fitted through every isoflop run predicting the same target (a
   second, independent prediction).
5. ``--transfer`` (on in the full run): the ladder's learning-rate transfer check (``ladder.transfer``):
   the recipe's rate times 0.5, 1 and 2 at the smallest and the largest ladder width, on the first
   mixture; transfer holds when the recipe's own rate is within 0.5% of the best at both. Its runs
   are reported apart from the ladder's compute.

No other tool predicts a run's loss from smaller ones (Marin's Delphi fits were done by hand), so
the reference each figure stands beside is the target's measured loss. The `uptime` load is
printed with the wall time: the machine is shared and the times move with it, the losses do not.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED_DATA = REPO.parent / "shared" / "data"

# The recipe both runs use; every value is the result of a measurement described in docs/ladder.md.
RECIPE = {
    "seq_len": 64,
    "head_dim": 8,
    "aspect_ratio": 16.0,
    "mlp_multiple": 4,
    "base_batch_size": 16,
    "tokens_per_param": 20.0,
    "base_lr": 0.0072,
    "base_width": 32,
    "base_tokens": 1.0e6,
    "lr_width_exponent": 0.5,
    "lr_tokens_exponent": 0.2,
    "warmup_fraction": 0.1,
    "decay_fraction": 0.2,
    "min_steps": 50,
}
SETTINGS = {
    "quick": {
        "chars": 7_000_000,
        "widths": [10, 12, 16, 20, 24],
        "target": 48,
        "seeds": [0],
        "mixtures": {"prose_heavy": 0.75, "code_heavy": 0.25},
    },
    "full": {
        "chars": 14_000_000,
        "widths": [12, 16, 20, 24, 28],
        "target": 64,
        "seeds": [0, 1],
        "mixtures": {"prose_heavy": 0.75, "balanced": 0.5, "code_heavy": 0.25},
        "isoflop": {
            "budgets": [5e10, 1.5e11, 4.5e11],
            "widths": [8, 12, 16, 20, 24, 32, 40],
            "mixtures": ["prose_heavy", "code_heavy"],
        },
    },
}
GOALS = {"quick": (10.0, 0.25, 0.03), "full": (30.0, 0.25, 0.02)}  # extrapolation >=, ladder share <=, |error| <


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def ladder_config(stores: dict[str, str], out: Path, setting: dict, recipe: dict, *, transfer: bool) -> dict:
    mixtures = [
        {"name": name, "mixture": {"prose": [stores["prose"], share], "code": [stores["code"], 1 - share]}}
        for name, share in setting["mixtures"].items()
    ]
    return {
        "output_dir": str(out),
        "seeds": setting["seeds"],
        "metric": "loss",
        "baseline": mixtures[0],
        "candidates": mixtures[1:],
        "train": {"eval_batches": 32, "eval_batch_size": 32},
        "eval": {"prose": stores["prose"] + "/validation", "code": stores["code"] + "/validation"},
        "ladder": {
            "widths": setting["widths"],
            "target_width": setting["target"],
            "recipe": recipe,
            "bootstrap": 2000,
            "verify": True,
            "target_seeds": setting["seeds"][:1],
            **({"transfer": {"widths": [setting["widths"][0], setting["widths"][-1]]}} if transfer else {}),
        },
    }


def isoflop_config(stores: dict[str, str], out: Path, setting: dict, recipe: dict, target_flops: float) -> dict:
    """The same mixtures' isoflop sweeps (one seed), predicting the same target's compute with L(N, D)."""
    iso = setting["isoflop"]
    mixtures = {name: share for name, share in setting["mixtures"].items() if name in iso["mixtures"]}
    config = ladder_config(stores, out, {**setting, "seeds": [0], "mixtures": mixtures}, recipe, transfer=False)
    config["ladder"] = {
        "isoflop": {"budgets": iso["budgets"], "widths": iso["widths"]},
        "target_flops": target_flops,
        "recipe": recipe,
        "bootstrap": 500,
        "law": "joint",
    }
    return config


def isoflop_summary(outcome_ladder, measured: dict[str, float | None]) -> dict:
    """Tokens per parameter at the target per mixture, and the joint law's prediction against the measured target."""
    out = {}
    for m in outcome_ladder.mixtures:
        truth = measured.get(m.mixture)
        out[m.mixture] = {
            "tokens_per_param": m.tokens_per_param,
            "tokens_per_param_interval": m.tokens_per_param_interval,
            "optima": [(o.flops, o.params, o.tokens, o.inside) for o in m.optima],
            "joint_prediction": m.predicted,
            "joint_error": (m.predicted - truth) / truth if truth else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two mixtures, widths 10-24 -> 48 (about 10 minutes)")
    parser.add_argument("--output", default=None, help="work directory (default: out/bench_scaling_ladder[_quick])")
    parser.add_argument("--transfer", action="store_true", help="also run the learning-rate transfer check (full: on)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    setting = SETTINGS[mode]
    out = Path(args.output or REPO / "out" / f"bench_scaling_ladder{'_quick' if args.quick else ''}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from zephyr import execution
    from zephyr.ablate import ablation_config_from_dict, run_ablation
    from zephyr.ablate.sample_text import write_sample_stores

    load_start, t0 = _load(), time.perf_counter()
    print(f"[{mode}] load average at start: {load_start}", flush=True)
    with execution(backend="local", summary=False):
        stores = write_sample_stores(out / "data", chars=setting["chars"], shared_data=SHARED_DATA, extended=True)
    stores_s = time.perf_counter() - t0
    print(f"stores built in {stores_s:.0f}s: {stores}", flush=True)
    config = ladder_config(stores, out / "ladder", setting, RECIPE, transfer=args.transfer or not args.quick)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    outcome = run_ablation(ablation_config_from_dict(config), log=log)
    report = outcome.ladder
    assert report is not None
    isoflop = None
    if "isoflop" in setting:
        iso_config = isoflop_config(stores, out / "isoflop", setting, RECIPE, report.target.flops)
        iso = run_ablation(ablation_config_from_dict(iso_config), log=log).ladder
        assert iso is not None
        isoflop = isoflop_summary(iso, {m.mixture: m.measured_mean for m in report.mixtures})
        for name, row in isoflop.items():
            print(
                f"isoflop {name}: compute-optimal tokens per parameter at the target {row['tokens_per_param']:.1f} "
                f"{row['tokens_per_param_interval']}; L(N, D) predicts the target at {row['joint_prediction']:.4f} "
                f"(error {100 * (row['joint_error'] or float('nan')):+.2f}%)",
                flush=True,
            )
    wall = time.perf_counter() - t0
    load_end = _load()
    errors = {m.mixture: m.error for m in report.mixtures}
    worst = max(abs(e) for e in errors.values() if e is not None)
    extrapolation_goal, share_goal, error_goal = GOALS[mode]
    goals = {
        "extrapolation": report.extrapolation >= extrapolation_goal,
        "ladder_flops_share": report.ladder_flops_share <= share_goal,
        "prediction_error": worst < error_goal,
    }
    print()
    print(
        f"{'mixture':<14} {'predicted':>10} {'interval':>20} {'measured':>10} {'error':>8} {'holdout':>8} "
        f"{'alpha_N':>8} {'alpha_C':>8} {'E':>6}"
    )
    nan = float("nan")
    for m in report.mixtures:
        interval = f"[{m.interval[0]:.4f}, {m.interval[1]:.4f}]" if m.interval else "-"
        print(
            f"{m.mixture:<14} {m.predicted:>10.4f} {interval:>20} {m.measured_mean or nan:>10.4f} "
            f"{100 * (m.error or nan):>+7.2f}% {100 * (m.holdout.error if m.holdout else nan):>+7.2f}% "
            f"{m.law.alpha if m.law else nan:>8.4f} {m.compute_law.alpha if m.compute_law else nan:>8.4f} "
            f"{m.law.E if m.law else nan:>6.3f}"
        )
    print(
        f"extrapolation {report.extrapolation:.1f}x (goal >= {extrapolation_goal:g}x), ladder FLOPs "
        f"{100 * report.ladder_flops_share:.1f}% of the targets' (goal <= {100 * share_goal:g}%), worst |error| "
        f"{100 * worst:.2f}% (goal < {100 * error_goal:g}%)"
    )
    print(f"ranking predicted: {' < '.join(report.ranking)} ({report.verdict()})")
    print(f"ranking measured:  {' < '.join(report.ranking_measured or ())}")
    print(f"wall {wall:.0f}s (stores {stores_s:.0f}s); load average start {load_start}, end {load_end}")
    result = {
        "bench": "scaling_ladder",
        "mode": mode,
        "prediction_error": worst,
        "prediction_errors": errors,
        "predicted": {m.mixture: m.predicted for m in report.mixtures},
        "intervals": {m.mixture: m.interval for m in report.mixtures},
        "measured": {m.mixture: m.measured_mean for m in report.mixtures},
        "within_interval": {m.mixture: m.within_interval for m in report.mixtures},
        "holdout_errors": {m.mixture: m.holdout.error if m.holdout else None for m in report.mixtures},
        "extrapolation": report.extrapolation,
        "ladder_flops_share": report.ladder_flops_share,
        "ladder_flops": report.ladder_flops,
        "target_flops": report.target_flops,
        "law_axis": report.axis,
        "exponents": {m.mixture: m.law.alpha if m.law else None for m in report.mixtures},
        "compute_exponents": {m.mixture: m.compute_law.alpha if m.compute_law else None for m in report.mixtures},
        "floors": {m.mixture: m.law.E if m.law else None for m in report.mixtures},
        "ranking_predicted": list(report.ranking),
        "ranking_measured": list(report.ranking_measured) if report.ranking_measured else None,
        "ranking_decided": report.decided,
        "ranking_verdict": report.verdict(),
        "ranking_agrees": report.ranking_measured == report.ranking,
        "isoflop": isoflop,
        "transfer": {
            "holds": report.transfer_holds,
            "flops": report.transfer_flops,
            "widths": {
                t.width: {"losses": t.losses, "best_multiplier": t.best, "recipe_gap": t.recipe_gap}
                for t in report.transfer
            },
        }
        if report.transfer
        else None,
        "goals_met": goals,
        "wall_s": round(wall, 1),
        "load_start": load_start,
        "load_end": load_end,
        "report": str(Path(config["output_dir"]) / "ladder.txt"),
    }
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
