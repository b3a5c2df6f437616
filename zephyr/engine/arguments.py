"""Checks of `Dataset` method arguments, made when the plan is built rather than inside a worker.

A wrong argument used to plan fine and fail in the first shard: `sorted_merge_join(b, left_key="k",
...)` called the string "k" in the worker (`'str' object is not callable`), was retried once and was
then reported as the user's code, with a traceback from inside the engine. Here each argument is
checked where the method is called: a key is a field name, an expression or a function of a record;
a function must accept the positional arguments the engine passes (a reducer gets `(key, items)`).
The message names the method, the argument, what came, and the call that was probably meant.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["check_function", "key_function"]


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def check_function(method: str, name: str, value: Any, arity: int, example: str) -> None:
    """Raise TypeError unless `value` is callable with `arity` positional arguments.

    Callables whose signature Python cannot tell (some builtins, C extensions) pass: they are called
    as they are and fail, if at all, with their own error.
    """
    if not callable(value):
        raise TypeError(f"{method}: {name} must be a function, got {_shown(value)}. For example: {example}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(arity))
    except TypeError:
        args = "one argument" if arity == 1 else f"{arity} positional arguments"
        raise TypeError(
            f"{method}: {name} is called with {args}, but {_callable_name(value)}{signature} cannot take "
            f"{'it' if arity == 1 else 'them'}. For example: {example}"
        ) from None


def key_function(method: str, name: str, value: Any, *, optional: bool = False) -> Any:
    """A key argument as the engine uses it: a field name becomes `col(name)`; an expression or a
    function of one record is kept; None only where `optional`. Anything else raises TypeError.
    (A '-' prefix on a field name is refused by the caller, whose fix depends on the method.)"""
    from zephyr.engine.expr import Expr, col

    if value is None and optional:
        return None
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{method}: {name} is an empty field name; give the field to use, e.g. {name}='id'")
        return col(value)
    if isinstance(value, Expr):
        return value
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        reads = ", ".join(f"r[{v!r}]" for v in value) + ("," if len(value) == 1 else "")
        raise TypeError(
            f"{method}: {name} takes one field name or a function, got the list {list(value)!r}. For a key of "
            f"several fields pass a function returning a tuple: {name}=lambda r: ({reads})"
        )
    check_function(method, name, value, 1, f"{name}='id' (a field name) or {name}=lambda record: record['id']")
    return value


def _callable_name(value: Any) -> str:
    return getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__
