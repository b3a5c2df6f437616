"""``zephyr ablate CONFIG.yaml [key=value ...]``: run a mixture ablation and print its report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from zephyr.commands import add_command

__all__ = ["add_cli", "main"]


def add_cli(subparsers: Any) -> None:
    """Register ``zephyr ablate`` on the top-level argparse subparsers."""
    parser = add_command(subparsers, "ablate", main)
    parser.add_argument("config", metavar="CONFIG.yaml", help="ablation YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.steps=50 seeds=[0,1,2]")
    parser.add_argument(
        "--train-backend",
        choices=("local", "ray"),
        help="where the training runs execute: in this process, or as Ray tasks (default: the config's backend)",
    )
    parser.add_argument("--plan", action="store_true", help="print the runs (and which are finished) without training")
    parser.add_argument("--report-only", action="store_true", help="report on finished runs only; train nothing")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="a ladder: also train the target run(s) and report the prediction's error (same as ladder.verify=true)",
    )


def main(args: argparse.Namespace) -> int:
    """train small models on candidate mixtures and compare them against a baseline

    Run every (mixture, seed) training run of an ablation (skipping finished ones), then print and write the
    report (report.csv, report.json, report.png in output_dir). With --plan or --report-only, only print the
    plan or rebuild the report.

    examples:
      zephyr ablate ablation.yaml
      zephyr ablate ablation.yaml seeds=[0,1] train.tokens=100000 --plan
      zephyr ablate ablation.yaml --train-backend ray

    example CONFIG.yaml:
      output_dir: ablations/code_vs_prose
      seeds: [0, 1, 2]
      baseline:
        mixture: {code: [stores/code, 0.75], prose: [stores/prose, 0.25]}
      candidates:
        - {name: prose_heavy, mixture: {code: [stores/code, 0.25], prose: [stores/prose, 0.75]}}
        - add: {dataset: wiki, store: stores/wiki, fraction: 0.2}
        - sweep: {dataset: prose, fractions: [0.5, 0.9]}
        - negative_control: {dataset: prose}
      matched_exposure: {wiki: {production_tokens: 1.0e12}}
      model: {preset: tiny}
      train: {tokens: 200000, seq_len: 64, batch_size: 8}
      eval: {prose: stores/prose/validation}
      primary_eval: prose

    A scaling ladder instead of one size (drop model: and train.tokens):
      ladder:
        widths: [32, 48, 64, 80]
        target_width: 160
        recipe: {seq_len: 128, head_dim: 16, aspect_ratio: 32}
      then `zephyr ablate CONFIG.yaml --verify` also trains the target and reports the error.

    Finished runs are skipped and interrupted ones resume from checkpoints, so the
    same command can be run again after a crash. See zephyr/ablate/config.py.
    """
    from zephyr.config import ConfigError

    from .config import load_ablation_config

    try:
        config = load_ablation_config(args.config, list(args.overrides))
    except ConfigError as exc:
        print(f"zephyr ablate: {exc}", file=sys.stderr)
        return 2
    if args.verify:
        if config.ladder is None:
            print(
                f"zephyr ablate: --verify trains a ladder's target, and {args.config} has no ladder: section.",
                file=sys.stderr,
            )
            return 2
        config = dataclasses.replace(config, ladder=dataclasses.replace(config.ladder, verify=True))
    if args.plan or args.report_only:
        from .report import build_report, format_report, write_report
        from .runner import load_run_result, plan_ablation

        plan = plan_ablation(config)
        done = {r.key: load_run_result(r) for r in plan.runs}
        if args.plan:
            print(json.dumps(plan.to_json(), indent=1))
            for r in plan.runs:
                print(
                    f"{r.mixture:<28} {r.point:<18} seed {r.seed:<4} {'finished' if done[r.key] else 'to run':<9} "
                    f"{r.run_dir}"
                )
            return 0
        missing = [k for k, v in done.items() if v is None]
        if missing:
            print(
                f"zephyr ablate: {len(missing)} run(s) have not finished: {missing}; run without --report-only.",
                file=sys.stderr,
            )
            return 1
        results = tuple(result for r in plan.runs if (result := done[r.key]) is not None)
        if plan.points:
            from .ladder_fit import build_ladder_report
            from .ladder_report import format_ladder_report, write_ladder_report

            ladder = build_ladder_report(plan, results)
            write_ladder_report(ladder, config.output_dir)
            print(format_ladder_report(ladder))
            return 0
        report = build_report(plan, results)
        write_report(report, config.output_dir)
        print(format_report(report))
        return 0
    from .ablation import run_ablation

    try:
        run_ablation(config, backend=args.train_backend)
    except ConfigError as exc:
        print(f"zephyr ablate: {exc}", file=sys.stderr)
        return 2
    return 0
