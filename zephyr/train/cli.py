"""``zephyr train CONFIG.yaml [key=value ...]``: registered on the ``zephyr`` command by :func:`add_cli`."""

from __future__ import annotations

import argparse
import json
import sys

from zephyr.commands import add_command

__all__ = ["add_cli"]


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Register ``zephyr train`` on the ``zephyr`` argparse parser."""
    p = add_command(subparsers, "train", _run_train)
    p.add_argument("config", metavar="CONFIG.yaml", help="training config (see zephyr.train.config.TrainConfig)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="override config values, e.g. steps=100")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")


def _missing_stores(config) -> list[str]:
    """Token stores the config names that do not exist (local paths only; URLs are fetched later)."""
    from pathlib import Path

    named = [(f"data.train.{name}", path) for name, (path, _) in config.data.train.items()]
    named += [(f"data.eval.{name}", path) for name, path in config.data.eval.items()]
    problems = []
    for key, path in named:
        if "://" in str(path):
            continue
        if not (Path(path) / "manifest.json").is_file():
            problems.append(
                f"{key}: {path} is not a token store (no manifest.json there); write one with "
                f"`zephyr tokenize 'INPUT_GLOB' {path}` or fix the path in the config"
            )
    return problems


def _run_train(args: argparse.Namespace) -> int:
    """train a Llama-style model on token-store mixtures (JAX)

    Train (or resume) the model described by CONFIG.yaml; metrics go to OUTPUT_DIR/metrics.jsonl.

    examples:
      zephyr train zephyr/train/example.yaml
      zephyr train run.yaml steps=200 optimizer.learning_rate=1e-3 output_dir=runs/lr1e-3
      zephyr train run.yaml 'data.train={web: [stores/web, 0.7], code: [stores/code, 0.3]}'

    Overrides are dotted keys into the YAML with YAML values. The run resumes from the newest
    complete checkpoint in OUTPUT_DIR/checkpoints unless resume=false.
    """
    from zephyr.train.config import ConfigError, config_to_dict, load_config

    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"zephyr train: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(config_to_dict(config), indent=2))
        return 0
    missing = _missing_stores(config)
    if missing:
        print(f"zephyr train: error: {missing[0]}", file=sys.stderr)
        return 2
    from zephyr.train.trainer import train

    result = train(config)
    summary = {
        "steps": result.steps,
        "final_loss": result.final_loss,
        "eval": result.eval,
        "tokens_per_second": result.tokens_per_second,
        "mfu": result.mfu,
        "metrics": result.metrics_path,
        "checkpoint": result.checkpoint,
    }
    print(json.dumps(summary))
    return 0
