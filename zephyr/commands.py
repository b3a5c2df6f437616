"""How a package registers a `zephyr` subcommand: its help text is the docstring of the function that runs it.

A base module (nothing of Zephyr's below it), so every package's `add_cli` may use it, `zephyr train` included,
which may not import the engine.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["add_command"]


def add_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], int] | None,
    doc: str | None = None,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """Register the command NAME, run by `run`, whose help is `doc` (default: `run`'s docstring).

    The docstring is where a command's text is written, once: its first line is the command's line in the
    list of commands, the paragraphs up to `examples:` its description, and from `examples:` on the text
    after the options (the command lines to copy, then any notes). A command without examples is refused
    here, when the parser is built, rather than found missing by a user.
    """
    text = inspect.cleandoc(doc if doc is not None else (run.__doc__ if run is not None else "") or "")
    summary, _, rest = text.partition("\n\n")
    description, marker, examples = rest.partition("examples:\n  ")
    if not marker:
        raise ValueError(
            f"command {name!r}: its help text has no 'examples:' section with indented command lines; "
            f"add one to the docstring of {getattr(run, '__qualname__', 'the command')}"
        )
    parser = subparsers.add_parser(
        name, help=summary, description=description.strip() or summary, epilog=marker + examples, **kwargs
    )
    if run is not None:
        parser.set_defaults(func=run)
    return parser
