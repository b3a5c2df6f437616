"""`zephyr datashop CONFIG.yaml`: run a Datashop config and print the stage table.

Registered by `zephyr/cli.py` through `add_cli(subparsers)`; imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from zephyr.commands import add_command
from zephyr.engine.options import add_engine_options

__all__ = ["add_cli", "run_cli"]


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Register `zephyr datashop CONFIG.yaml` and its options (the engine's --backend/--workers among them)."""
    parser = add_command(subparsers, "datashop", run_cli)
    parser.add_argument(
        "config", metavar="CONFIG.yaml", help="YAML config (see zephyr/datashop/config.py for the keys)"
    )
    parser.add_argument("--output-dir", help="override the config's output_dir (default: the config's)")
    add_engine_options(parser, with_cluster=False)  # --backend/--workers override engine_backend/workers
    from zephyr.engine.backend_registry import backend_names

    parser.add_argument(
        "--engine-backend", dest="backend", choices=backend_names(), help=argparse.SUPPRESS
    )  # the old name of --backend
    parser.add_argument("--json", action="store_true", help="print the full report as JSON instead of the table")


def run_cli(args: argparse.Namespace) -> int:
    """prompt -> LM labels -> classifier -> filtered dataset (see zephyr.datashop.config)

    Run a Datashop config: sample a pool, label it with an LM, train a classifier, score and filter the
    corpus, stage after stage. Writes OUTPUT_DIR/report.json and prints the stage table (or, with --json,
    the whole report).

    examples:
      zephyr datashop datashop.yaml
      zephyr datashop datashop.yaml --output-dir out/edu --backend processes --workers 8 --json
    """
    from zephyr.datashop.config import load_config
    from zephyr.datashop.pipeline import run_datashop

    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING, format="%(message)s"
    )
    try:
        config = load_config(args.config)
    except (FileNotFoundError, ValueError) as exc:
        print(f"zephyr datashop: {exc}", file=sys.stderr)
        return 2
    overrides = {}
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    if args.backend:
        overrides["engine_backend"] = args.backend
    if args.workers:
        overrides["workers"] = args.workers
    config = dataclasses.replace(config, **overrides)
    report = run_datashop(config)
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.summary())
    return 0
