"""The command line every recipe shares: its engine options and its `main`.

A recipe (`recipes/*.py`) runs under `zephyr run`, which takes the engine options (`--backend`, `--workers`,
...) before the script, or as a plain `python recipes/NAME.py`, which must take them itself. Each recipe used
to declare those options and write the same `main` (parse, run under `execution(...)`, print the summary, turn
an expected error into one line); they are here once.

    def main(argv=None) -> int:
        return recipe_main("zephyr run recipes/common_crawl.py", parse_args, run_recipe, format_summary, argv)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from zephyr.engine.backend_registry import backend_names
from zephyr.engine.options import add_on_bad_record_option, positive_int

__all__ = ["add_recipe_engine_options", "recipe_main"]


def add_recipe_engine_options(parser: argparse.ArgumentParser) -> None:
    """`--on-bad-record`, and the hidden `--backend` and `--workers` for `python recipes/NAME.py` (under `zephyr
    run` the engine takes them before the script); `engine_overrides(args)` reads them."""
    add_on_bad_record_option(parser)
    parser.add_argument("--backend", choices=backend_names(), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=positive_int, default=None, help=argparse.SUPPRESS)


def recipe_main(
    prog: str,
    parse_args: Callable[[Sequence[str] | None], tuple[Any, dict[str, Any]]],
    run: Callable[[Any], Any],
    format_summary: Callable[[Any], str],
    argv: Sequence[str] | None = None,
    *,
    check: Callable[[Any], None] | None = None,
    expected: tuple[type[Exception], ...] = (),
) -> int:
    """A recipe's `main`: `parse_args(argv)` -> (config, engine overrides); `check(config)` may refuse the config
    with a ValueError (one line, exit 2); then `run(config)` under `execution(**overrides)` and its
    `format_summary` printed (exit 0). An error of an `expected` type prints as one line (exit 1)."""
    from zephyr.engine.context import execution

    config, engine = parse_args(argv)
    if check is not None:
        try:
            check(config)
        except ValueError as error:
            print(f"{prog}: {error}", file=sys.stderr)
            return 2
    try:
        with execution(**engine):
            result = run(config)
    except expected as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    print(format_summary(result))
    return 0
