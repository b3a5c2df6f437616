"""The `zephyr` command: `zephyr run SCRIPT`, plus the subcommands each package registers."""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "run_script"]

# Packages that add subcommands through `add_cli(subparsers)` (tokenize, inspect, verify, train, ...).
_SUBCOMMAND_MODULES = ("zephyr.tokenize.cli", "zephyr.train.cli", "zephyr.datashop.cli", "zephyr.ablate.cli",
                       "zephyr.ui.cli")

_ENGINE_FLAGS = """engine options (accepted anywhere after SCRIPT):
  --backend {local,processes,ray}   where shards run (default: processes, all cores)
  --workers N                       worker processes (default: all cores)
  --memory-per-worker SIZE          shuffle memory budget per worker, e.g. 512MB (default 1GB)
  --scratch URL                     shuffle files and checkpoints (default ./.zephyr/scratch);
                                    on a Ray cluster, a path every node can reach (gs://, s3://)
  --address ADDRESS                 Ray cluster address (ray://host:10001 or auto); default: local Ray
  --dry-run                         print the plan of every pipeline instead of running it
"""


def _engine_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--backend", choices=("local", "processes", "ray"))
    parser.add_argument("--workers", type=int)
    parser.add_argument("--memory-per-worker")
    parser.add_argument("--scratch")
    parser.add_argument("--address")
    parser.add_argument("--dry-run", action="store_true")
    return parser


def run_script(script: str, args: Sequence[str]) -> int:
    """Import SCRIPT and call its `main()` inside an execution context built from the engine flags.

    Flags the engine knows are taken out of `args`; the rest stay in sys.argv for the script's own parser.
    """
    from zephyr.engine.context import execution, parse_size

    engine_args, script_args = _engine_parser().parse_known_args(list(args))
    path = Path(script)
    if not path.is_file():
        print(f"zephyr run: no such script {script!r}", file=sys.stderr)
        return 2
    overrides = {}
    if engine_args.backend:
        overrides["backend"] = engine_args.backend
    if engine_args.workers:
        overrides["workers"] = engine_args.workers
    if engine_args.memory_per_worker:
        overrides["memory_per_worker"] = parse_size(engine_args.memory_per_worker)
    if engine_args.scratch:
        overrides["scratch"] = engine_args.scratch
    if engine_args.address:
        overrides["ray_address"] = engine_args.address
        overrides.setdefault("backend", "ray")
    if engine_args.dry_run:
        overrides["dry_run"] = True
    module = _import_script(path)
    entry = getattr(module, "main", None)
    if not callable(entry):
        print(f"zephyr run: {script} defines no main() function to run", file=sys.stderr)
        return 2
    old_argv = sys.argv
    sys.argv = [str(path), *script_args]
    try:
        with execution(**overrides):
            result = entry()
    finally:
        sys.argv = old_argv
    return result if isinstance(result, int) else 0


def _import_script(path: Path):
    import cloudpickle

    # a stable name: plan fingerprints include function modules, and resume needs equal fingerprints
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    name = f"zephyr_script_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))  # scripts may import their neighbours
    spec.loader.exec_module(module)
    # workers cannot import the script by name: ship its functions by value
    cloudpickle.register_pickle_by_value(module)
    return module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zephyr",
        description="Raw web data to pretraining token mixtures, tested with small training runs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = subparsers.add_parser(
        "run",
        help="run a pipeline script's main() (e.g. recipes/nemotron_cc.py)",
        description="Import SCRIPT and call its main() inside an engine context.",
        epilog=_ENGINE_FLAGS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("script", help="a Python file defining main()")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script and engine options")
    run.set_defaults(func=lambda a: run_script(a.script, a.args))
    for module_name in _SUBCOMMAND_MODULES:
        if importlib.util.find_spec(module_name.rsplit(".", 1)[0]) is None:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:
                continue  # that package registers no subcommands
            raise
        module.add_cli(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
