"""The polars oracle of `Dataset.aggregate`: the same named outputs as polars expressions, over rows sorted
stably by the sort field (None first), grouped in order of first appearance. Shared by the differential
suite and tests/engine/test_aggregate.py, so each output kind is translated to polars in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

_EXPRESSIONS: dict[str, Callable[[str], pl.Expr]] = {
    "size": lambda field: pl.len(),
    "count": lambda field: pl.col(field).count(),
    "sum": lambda field: pl.col(field).sum(),
    "mean": lambda field: pl.col(field).mean(),
    "min": lambda field: pl.col(field).min(),
    "max": lambda field: pl.col(field).max(),
    "first": lambda field: pl.col(field).first(),
    "last": lambda field: pl.col(field).last(),
}


def polars_aggregate(
    frame: pl.DataFrame, key: str, sort_by: str | None, outputs: dict[str, tuple[str, str]]
) -> dict[Any, dict]:
    """{key value: output row} as polars computes `aggregate(key, sort_by=sort_by, **outputs)`."""
    if sort_by is not None:
        frame = frame.sort(sort_by, nulls_last=False, maintain_order=True)
    expressions = [_EXPRESSIONS[how](field).alias(name) for name, (field, how) in outputs.items()]
    grouped = frame.group_by(key, maintain_order=True).agg(*expressions)
    return {row[key]: row for row in grouped.iter_rows(named=True)}
