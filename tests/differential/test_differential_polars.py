"""Differential tests against polars (issue #28 item 5), where polars has the op: grouped counts and sums,
a secondary sort within groups, a global sort (both directions), first-per-key deduplication, and inner
and left joins. The records the engine gets hold ints, floats and bools mixed in one field, as JSON gives
them; polars gets the same values in typed columns (its supertype, Float64), so a key compares by value
in both. Polars matches null join keys only with nulls_equal=True, which is the engine's rule (None ==
None as in Python); NaN is one key and sorts after inf in both.

The same bounded, repeatable profile as the chains in `make test`, a longer one in `make test-slow`."""

from __future__ import annotations

import math
import tempfile
from collections import Counter

import polars as pl
import pytest
from chain_model import norm
from differential_harness import FAST, SLOW, tiny_buffers
from hypothesis import given
from hypothesis import strategies as st

from zephyr import Dataset, execution

_NUMBERS = st.one_of(
    st.integers(-4, 4),
    st.integers(-4, 4).map(float),
    st.booleans(),
    st.sampled_from([0.5, -0.0, 2.5, -1.5, math.inf, -math.inf, math.nan, 2.0**52 + 1, -(2**52) - 1]),
    st.floats(-1e6, 1e6, allow_nan=False),
)


@st.composite
def tables(draw):
    """Rows (Python records, fields possibly None) and how they run: shards, a memory budget, small buffers."""
    text_keys = draw(st.booleans())
    key = st.one_of(st.none(), st.text(alphabet="abé", max_size=2) if text_keys else _NUMBERS)
    n = draw(st.integers(0, 40))
    rows = [
        {"i": i, "k": draw(key), "s": draw(st.one_of(st.none(), _NUMBERS)), "x": draw(st.integers(-9, 9))}
        for i in range(n)
    ]
    right = [{"j": j, "k": draw(key), "y": draw(st.integers(0, 5))} for j in range(draw(st.integers(0, 12)))]
    run = dict(shards=draw(st.integers(1, 4)), memory=draw(st.sampled_from(["16MB", "1GB"])), tiny=draw(st.booleans()))
    return rows, right, text_keys, run


def _frame(rows: list[dict], text_keys: bool, fields: dict) -> pl.DataFrame:
    """The rows as polars columns: numbers as Float64 (ints, floats and bools alike), text keys as Utf8."""
    schema = {name: (pl.Utf8 if name == "k" and text_keys else dtype) for name, dtype in fields.items()}
    columns = {}
    for name, dtype in schema.items():
        values = [r[name] for r in rows]
        columns[name] = [None if v is None else float(v) for v in values] if dtype is pl.Float64 else values
    return pl.DataFrame(columns, schema=schema)


def _summary(key, items):
    items = list(items)
    return {"k": norm(key), "n": len(items), "x": sum(r["x"] for r in items), "s": [norm(r["s"]) for r in items]}


def check(table) -> None:
    rows, right, text_keys, run = table
    fields = {"i": pl.Int64, "k": pl.Float64, "s": pl.Float64, "x": pl.Int64}
    df = _frame(rows, text_keys, fields)
    rf = _frame(right, text_keys, {"j": pl.Int64, "k": pl.Float64, "y": pl.Int64})
    with (
        tempfile.TemporaryDirectory(prefix="zephyr-differential-") as scratch,
        tiny_buffers(run["tiny"]),
        execution(backend="local", scratch=scratch, memory_per_worker=run["memory"], progress=False, summary=False),
    ):
        ds = Dataset.from_list(rows, num_shards=run["shards"])
        grouped = ds.group_by("k", _summary, sort_by="s", num_shards=3).collect()
        ascending = [r["s"] for r in ds.sort("s", num_shards=2).collect()]
        descending = [r["s"] for r in ds.sort(lambda r: r["s"], descending=True, num_shards=3).collect()]
        kept = [r["i"] for r in ds.deduplicate("k", num_shards=2).collect()]
        other = Dataset.from_list(right, num_shards=2)
        inner = ds.sorted_merge_join(other, left_key=lambda r: r["k"], right_key=lambda r: r["k"], num_shards=2)
        left = ds.sorted_merge_join(other, left_key=lambda r: r["k"], right_key=lambda r: r["k"], how="left")
        inner_pairs = Counter((r["i"], r["j"]) for r in inner.collect())
        left_pairs = Counter((r["i"], r.get("j")) for r in left.collect())

    want = (
        df.sort("s", nulls_last=False)
        .group_by("k", maintain_order=True)
        .agg(pl.len().alias("n"), pl.col("x").sum().alias("x"), pl.col("s").alias("sorts"))
    )
    expected = {norm(k): (n, x, [norm(s) for s in sorts]) for k, n, x, sorts in want.iter_rows()}
    assert {g["k"]: (g["n"], g["x"], g["s"]) for g in grouped} == expected
    assert list(map(norm, ascending)) == list(map(norm, df.sort("s", nulls_last=False)["s"].to_list()))
    down = df.sort("s", descending=True, nulls_last=True)["s"].to_list()
    assert list(map(norm, descending)) == list(map(norm, down))
    assert sorted(kept) == sorted(df.unique(subset="k", keep="first", maintain_order=True)["i"].to_list())
    joined = df.join(rf, on="k", how="inner", nulls_equal=True)
    assert inner_pairs == Counter(zip(joined["i"].to_list(), joined["j"].to_list(), strict=True))
    joined = df.join(rf, on="k", how="left", nulls_equal=True)
    assert left_pairs == Counter(zip(joined["i"].to_list(), joined["j"].to_list(), strict=True))


@FAST
@given(tables())
def test_wide_ops_on_mixed_number_fields_match_polars(table):
    check(table)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@SLOW
@given(tables())
def test_wide_ops_match_polars_longer(table):
    check(table)
