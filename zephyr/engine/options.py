"""The engine's command-line options and the argument parser every `zephyr` command uses.

Here, below `zephyr.cli`, so that the packages' own subcommands (`zephyr tokenize`, `zephyr datashop`, ...)
share the engine flags (same names, meaning and checks) without importing the top-level CLI that
registers them (which imports them: a circle).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn

__all__ = ["ZephyrArgumentParser", "add_engine_options", "engine_overrides", "positive_int"]


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written and appends each option's default (when it has a meaningful one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and "default" not in text
            and action.option_strings
            and default not in (None, False, argparse.SUPPRESS)
            and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
        ):
            text += " (default: %(default)s)"
        return text


class ZephyrArgumentParser(argparse.ArgumentParser):
    """argparse without prefix matching, with one-line errors and the shared help formatter."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        kwargs["formatter_class"] = _Formatter
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1, else an error saying so."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _size(text: str) -> int:
    from zephyr.engine.context import parse_size

    try:
        value = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r} as a size: write e.g. 512MB, 2GiB or a number of bytes"
        ) from None
    if value < 16 << 20:
        raise argparse.ArgumentTypeError(f"{text!r} is below the 16MB minimum")
    return value


def _scratch(text: str) -> str:
    """A local scratch directory must be creatable and writable (a bucket URL is checked when used)."""
    if "://" in text and not text.startswith("file://"):
        return text
    path = Path(text.removeprefix("file://")).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".zephyr-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"cannot use {text!r} as scratch space ({error.strerror or error}): pass a writable directory, "
            "or a bucket URL every worker can reach"
        ) from None
    return str(path)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def add_engine_options(parser: argparse.ArgumentParser, *, with_cluster: bool = True) -> None:
    """The engine options, with the same names, meaning and checks wherever they appear."""
    from zephyr.engine.backend_registry import BACKENDS

    described = [f"{name} ({spec.help})" for name, spec in BACKENDS.items()]
    parser.add_argument(
        "--backend",
        choices=tuple(BACKENDS),
        help=f"where shards run: {', '.join(described[:-1])} or {described[-1]} "
        "(default: $ZEPHYR_BACKEND, else processes)",
    )
    parser.add_argument("--workers", type=positive_int, metavar="N", help="worker processes (default: all cores)")
    if with_cluster:
        parser.add_argument(
            "--memory-per-worker",
            type=_size,
            metavar="SIZE",
            help="shuffle memory budget per worker, e.g. 512MB (default: 1GB)",
        )
        parser.add_argument(
            "--scratch",
            type=_scratch,
            metavar="URL",
            help="shuffle files and checkpoints; on a Ray cluster a path every node can reach "
            "(default: $ZEPHYR_SCRATCH, else ./.zephyr/scratch)",
        )
        parser.add_argument(
            "--address",
            metavar="ADDRESS",
            help="Ray cluster address (ray://host:10001, host:6379 or auto); implies --backend ray "
            "(default: a local Ray)",
        )
        parser.add_argument(
            "--worker-cpus",
            type=_non_negative,
            metavar="N",
            help="CPUs each worker asks of the cluster; a stage may ask for more (default: 1)",
        )
        parser.add_argument(
            "--worker-gpus", type=_non_negative, metavar="N", help="GPUs each worker asks of the cluster (default: 0)"
        )
        parser.add_argument(
            "--ray-pool-idle",
            type=_non_negative,
            metavar="SECONDS",
            help="keep Ray workers up this long after a run for the next one; they hold their CPUs "
            "meanwhile (default: 0, give them back when the run ends)",
        )
        parser.add_argument(
            "--ray-mode",
            choices=("actors", "tasks"),
            help="run shards on a pool of Ray actors (stage functions loaded once per worker) or as one "
            "plain Ray task each (default: actors)",
        )
        parser.add_argument(
            "--ray-dashboard",
            action="store_true",
            default=None,
            help="a local Ray serves its dashboard on http://127.0.0.1:8265",
        )


def add_on_bad_record_option(parser: argparse.ArgumentParser) -> None:
    """`--on-bad-record raise|skip`, read by `engine_overrides`: one definition for the recipes and subcommands."""
    parser.add_argument(
        "--on-bad-record",
        choices=("raise", "skip"),
        default=None,
        help="skip (and count) unreadable input records and files instead of failing (default: raise)",
    )


def engine_overrides(args: argparse.Namespace) -> dict:
    """execution(...) overrides from the engine options that were given."""
    overrides: dict = {}
    for name, key in (
        ("backend", "backend"),
        ("workers", "workers"),
        ("memory_per_worker", "memory_per_worker"),
        ("scratch", "scratch"),
        ("address", "ray_address"),
        ("worker_cpus", "worker_cpus"),
        ("worker_gpus", "worker_gpus"),
        ("ray_pool_idle", "ray_pool_idle_s"),
        ("ray_dashboard", "ray_dashboard"),
        ("ray_mode", "ray_mode"),
        ("on_bad_record", "on_bad_record"),
    ):
        value = getattr(args, name, None)
        if value is not None:
            overrides[key] = value
    if overrides.get("ray_address"):
        overrides.setdefault("backend", "ray")
    if getattr(args, "dry_run", False) or getattr(args, "estimate", False):
        overrides["dry_run"] = True
    if getattr(args, "estimate", False):  # zephyr run --estimate: sample run, full-size figures
        overrides["estimate"] = True
    return overrides
