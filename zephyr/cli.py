"""The `zephyr` command: `zephyr run SCRIPT`, plus the subcommands each package registers.

Conventions every subcommand follows (tested in tests/test_cli.py):
- its help is the docstring of the function that runs it, examples included (`zephyr.commands.add_command`);
- one meaning per flag name: `--backend` is always the engine's execution backend (local, processes, ray);
- `-q/--quiet` and `-v/--verbose` everywhere; every flag has help text and shows its default;
- no abbreviations (`--add` is never `--address`);
- errors are one line naming the fix: exit code 2 for a wrong command line or config, 1 for a run that
  failed; `-v` adds the internal traceback.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from zephyr.commands import add_command
from zephyr.engine.options import ZephyrArgumentParser, add_engine_options, engine_overrides

__all__ = ["build_parser", "main", "run_script", "ZephyrArgumentParser", "add_engine_options", "engine_overrides"]

# Packages that add subcommands through `add_cli(subparsers)` (tokenize, inspect, verify, train, ...).
_SUBCOMMAND_MODULES = (
    "zephyr.tokenize.cli",
    "zephyr.train.cli",
    "zephyr.datashop.cli",
    "zephyr.ablate.cli",
    "zephyr.export_cli",
    "zephyr.ui.cli",
    "zephyr.install_models",
)

_ENGINE_VALUE_FLAGS = (
    "--backend",
    "--workers",
    "--memory-per-worker",
    "--scratch",
    "--address",
    "--worker-cpus",
    "--worker-gpus",
    "--ray-pool-idle",
    "--ray-mode",
)
_ENGINE_SWITCHES = ("--dry-run", "--estimate", "-q", "--quiet", "-v", "--verbose", "-h", "--help", "--ray-dashboard")


# ------------------------------------------------------------------------------------ zephyr run
def run_script(script: str, args: Sequence[str], overrides: dict | None = None) -> int:
    """Run SCRIPT inside an execution context built from the engine options, with `args` as its sys.argv.

    A script with a top-level `def main()` is imported and its main() called; any other script runs as
    `python SCRIPT` would (as `__main__`), so a pipeline written at top level works too.
    """
    from zephyr.engine.context import execution

    path = Path(script)
    problem = _script_problem(path)
    if problem:
        raise _UsageError(problem)
    has_main = _defines_main(path)
    old_argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        with execution(**(overrides or {})):
            if has_main:
                module = _import_script(path)
                result = module.main()
            else:
                sys.path.insert(0, str(path.resolve().parent))
                runpy.run_path(str(path), run_name="__main__")
                result = 0
    except SystemExit as exit_:
        if exit_.code not in (0, None) and isinstance(exit_.code, int) and exit_.code == 2:
            misplaced = [a for a in args if a.split("=", 1)[0] in _ENGINE_VALUE_FLAGS + ("--dry-run",)]
            if misplaced:
                print(
                    f"zephyr run: engine options go before the script path: "
                    f"zephyr run {' '.join(misplaced)} ... {script} (the script got {' '.join(misplaced)})",
                    file=sys.stderr,
                )
        raise
    finally:
        sys.argv = old_argv
    return result if isinstance(result, int) else 0


class _UsageError(Exception):
    """A wrong command line: reported in one line with exit code 2."""


def _script_problem(path: Path) -> str | None:
    if not path.exists():
        return f"no such script {str(path)!r}"
    if path.is_dir():
        return f"{str(path)!r} is a directory: pass a Python file, e.g. recipes/nemotron_cc.py"
    if path.suffix != ".py":
        return f"{str(path)!r} is not a Python script (.py): pass a pipeline file, e.g. recipes/nemotron_cc.py"
    try:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as error:
        return f"{path}:{error.lineno}: not valid Python: {error.msg}"
    except (OSError, UnicodeDecodeError) as error:
        return f"cannot read {path}: {error}"
    return None


def _defines_main(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main" for node in tree.body)


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


def _split_run_argv(
    tokens: Sequence[str], value_flags: Sequence[str] = _ENGINE_VALUE_FLAGS
) -> tuple[list[str], str | None, list[str]]:
    """(engine tokens, script, script args): options before the first positional are the engine's."""
    engine: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            i += 1
            break
        if not token.startswith("-") or token == "-":
            break
        engine.append(token)
        if token in value_flags and i + 1 < len(tokens):
            engine.append(tokens[i + 1])
            i += 1
        i += 1
    if i >= len(tokens):
        return engine, None, []
    return engine, tokens[i], list(tokens[i + 1 :])


def _run_command(args: argparse.Namespace) -> int:
    """run a pipeline script (e.g. recipes/nemotron_cc.py) with engine options

    Run SCRIPT (its main(), or its top-level code) inside an engine context.

    examples:
      zephyr run recipes/nemotron_cc.py                               # the embedded sample, end to end
      zephyr run --backend ray --scratch gs://b/scratch recipes/nemotron_cc.py --input 'gs://b/cc/*.zst'
      zephyr run --workers 4 --memory-per-worker 2GB my_pipeline.py --my-flag 3

    Engine options go BEFORE the script path; everything after it belongs to the script (its own --workers,
    --dry-run, ... are never taken by the engine). SCRIPT defines main() (called inside the engine context),
    or runs its pipeline at top level (executed like `python SCRIPT`, with the engine options applied).
    Every run writes a run record to <output>/_runs/<run_id>.json (see `zephyr ui`).
    """
    from zephyr.engine.run.progress import print_run_summary
    from zephyr.engine.run.record import RunRecorder, open_run

    overrides = engine_overrides(args)
    recorder = RunRecorder(
        command=["zephyr", "run", *getattr(args, "raw_argv", [])],
        script=args.script,
        backend=overrides.get("backend"),
        workers=overrides.get("workers"),
        write_empty=not overrides.get("dry_run"),
    )  # a dry run leaves no record
    recorder.summary_at_end = not overrides.get("dry_run")
    scratch = overrides.get("scratch")
    from zephyr.engine.run.record import default_record_dir

    try:
        with open_run(recorder, fallback_dir=default_record_dir(scratch)):
            code = run_script(args.script, args.args, overrides)
    finally:
        if not overrides.get("dry_run") and (
            recorder.record["jobs"] or recorder.record["steps"] or recorder.record.get("results")
        ):
            print_run_summary(recorder.record)
            if recorder.path and getattr(args, "verbose", False):
                print(f"run record: {recorder.path}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------------------- parser
def _version() -> str:
    from zephyr import __version__

    return __version__


def _add_verbosity(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    default = False if top else argparse.SUPPRESS
    existing = {s for a in parser._actions for s in a.option_strings}
    if "-q" not in existing:
        parser.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            default=default,
            help="print only errors and final results: no progress, no summary table",
        )
    if "-v" not in existing:
        parser.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=default,
            help="also print every engine job's table and tracebacks of errors",
        )


def build_parser() -> argparse.ArgumentParser:
    """The `zephyr` command line: the top-level options and one subcommand per package (run, tokenize, datashop,
    train, ablate, export, ui, ...)."""
    parser = ZephyrArgumentParser(
        prog="zephyr",
        description="Raw web data to pretraining token mixtures, tested with small training runs.",
        epilog="Run 'zephyr COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument(
        "--version", action="version", version=f"zephyr {_version()}", help="print the version and exit"
    )
    _add_verbosity(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = add_command(
        subparsers, "run", _run_command, usage="zephyr run [engine options] SCRIPT [script arguments ...]"
    )
    add_engine_options(run)
    run.add_argument("--dry-run", action="store_true", help="print the plan of every pipeline instead of running it")
    run.add_argument(
        "--estimate",
        action="store_true",
        help="run every recipe step (a plain script: every plan) on a sample of the input shards and on half "
        "of it, in a throw-away folder, and print per step the records, bytes, scratch, memory and wall time "
        "expected at full size on the chosen workers, and core-hours (implies --dry-run for the rest)",
    )
    run.add_argument("script", metavar="SCRIPT", help="a Python file: defines main(), or runs a pipeline at top level")
    run.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="...", help="arguments for the script (everything after SCRIPT)"
    )
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
    for sub in subparsers.choices.values():
        _add_verbosity(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    # `zephyr [-q|-v] run [engine options] SCRIPT ...`: split by hand so the script's flags stay its own
    position = next((i for i, token in enumerate(argv) if not token.startswith("-")), None)
    if position is None or argv[position] != "run":
        return parser.parse_args(argv)
    # the run parser's own options decide which take a value: a new engine option needs no list here
    run_parser = parser._subparsers._group_actions[0].choices["run"]
    options = [a for a in run_parser._actions if a.option_strings]
    value_flags = tuple(s for a in options if a.nargs != 0 for s in a.option_strings)
    known = value_flags + tuple(s for a in options if a.nargs == 0 for s in a.option_strings)
    engine, script, script_args = _split_run_argv(argv[position + 1 :], value_flags)
    unknown = [  # a value (`--workers -1`) is not an option
        t
        for i, t in enumerate(engine)
        if t.startswith("-") and t.split("=", 1)[0] not in known and not (i and engine[i - 1] in value_flags)
    ]
    if unknown:
        run_parser.error(
            f"unknown engine option {unknown[0]!r} before the script path; the script's own options go after "
            "SCRIPT (zephyr run [engine options] SCRIPT [script options])"
        )
    args = parser.parse_args([*argv[: position + 1], *engine, *([script] if script is not None else [])])
    args.args = script_args
    args.raw_argv = argv[position + 1 :]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """`zephyr ...`: parse the command line, set the verbosity and run the subcommand; returns the exit code (1: an
    error Zephyr raised on purpose, printed as one line; 2: a wrong command line)."""
    from zephyr.progress import set_verbosity, verbosity

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = _parse(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    verbose, quiet = getattr(args, "verbose", False), getattr(args, "quiet", False)
    set_verbosity(1 if verbose else -1 if quiet else verbosity())  # without -v/-q: $ZEPHYR_VERBOSITY
    prog = f"zephyr {args.command}"
    try:
        if args.command == "run":
            return int(args.func(args) or 0)
        return _run_subcommand(args, argv)
    except _UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001
        return _report(prog, error, verbose=verbose)


def _run_subcommand(args: argparse.Namespace, argv: list[str]) -> int:
    """A subcommand as one run: its engine jobs share one record and one summary table at the end."""
    from zephyr.engine.run.progress import print_run_summary
    from zephyr.engine.run.record import RunRecorder, open_run

    recorder = RunRecorder(command=["zephyr", *argv], write_empty=False)
    recorder.summary_at_end = True
    try:
        with open_run(recorder):
            code = int(args.func(args) or 0)
            if code:  # the command printed its error and chose its exit code: the run failed, not "succeeded"
                raise _CommandFailed(code)
        return 0
    except _CommandFailed as failed:
        return failed.code
    finally:
        if recorder.record["jobs"] or recorder.record.get("results"):
            print_run_summary(recorder.record)


class _CommandFailed(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"the command exited with code {code} (its error is printed above)")
        self.code = code


def _report(prog: str, error: Exception, *, verbose: bool) -> int:
    """Errors Zephyr raises on purpose: their message, no internal traceback (unless -v). Others: as Python does."""
    from zephyr.errors import ZephyrError, storage_error

    # read-only, full or forbidden storage met by a script's own code (a recipe building its sample) is the
    # machine's, not a bug: one line naming the path, as the engine reports it for its own reads and writes
    original, error = error, storage_error(error, "a file the command reads or writes") or error
    known = isinstance(error, ZephyrError) or type(error).__name__ in (
        "ConfigError",
        "AblationConfigError",
        "CheckpointError",
    )
    if not known:
        raise error
    if verbose:
        traceback.print_exception(original)
    # a UserCodeError's message carries the user's own traceback (the useful part); the engine's frames
    # around it are left out
    print(f"{prog}: error: {type(error).__name__}: {str(error).strip()}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
