"""Differential tests of `Dataset.aggregate` against two oracles: plain Python (group by value with `==`,
Python's stable `sorted` with None first and NaN last, `sum`/`min`/`max` over the values that are not None)
on records of mixed types, as JSON gives them, and polars (`sort(maintain_order=True).group_by().agg()`) on
the same rows as typed parquet files. Both routes of the engine are covered: Arrow columns folded with NumPy
(parquet input, and dict records that convert to Arrow exactly) and the Python fold (mixed types), with
buffers cut small so that tiny inputs still make many runs and folds, and with a memory budget so small that
the reduce side folds a target one key-hash range at a time."""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chain_model import norm
from differential_harness import FAST, SLOW
from hypothesis import given
from hypothesis import strategies as st
from polars_aggregate import polars_aggregate

from zephyr import Dataset, execution
from zephyr.engine import outputs
from zephyr.engine.shuffle.aggregate_runs import AggregateWriter

OUTPUTS = {
    "size": ("x", "size"),
    "count": ("x", "count"),
    "total": ("x", "sum"),
    "average": ("x", "mean"),
    "low": ("x", "min"),
    "high": ("x", "max"),
    "first_x": ("x", "first"),
    "last_x": ("x", "last"),
    "first_p": ("p", "first"),
    "last_s": ("s", "last"),
    "low_s": ("s", "min"),
    "high_s": ("s", "max"),
}
_NUMBERS = st.one_of(
    st.integers(-3, 3),
    st.integers(-3, 3).map(float),
    st.booleans(),
    st.sampled_from([0.5, -0.0, math.inf, -math.inf, math.nan, 2.0**53 + 2]),
)


def _rank(value):
    return (0,) if value is None else (2,) if isinstance(value, float) and math.isnan(value) else (1, value)


def _python_output(how: str, values: list):
    present = [v for v in values if v is not None]
    if how == "size":
        return len(values)
    if how == "count":
        return len(present)
    if how in ("first", "last"):
        return values[0] if how == "first" else values[-1]
    if not present:
        return None
    if how == "mean":
        return sum(present) / len(present)
    return sum(present) if how == "sum" else min(present, key=_rank) if how == "min" else max(present, key=_rank)


def oracle(rows: list[dict], sort_by: str | None) -> dict[str, dict]:
    """Per key (type-blind text), the outputs as plain Python computes them."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(norm(row.get("k")), []).append(row)
    out = {}
    for key, items in groups.items():
        if sort_by is not None:
            items = sorted(items, key=lambda r: _rank(r.get(sort_by)))
        record = {}
        for name, (field, how) in OUTPUTS.items():
            values = [r.get(field) for r in items]
            record[name] = _python_output(how, values)
        out[key] = record
    return out


def same(got: dict[str, dict], want: dict[str, dict]) -> None:
    assert set(got) == set(want)
    for key, record in want.items():
        for name, value in record.items():
            mine = got[key][name]
            if name in ("total", "average") and isinstance(value, float) and math.isfinite(value):
                assert math.isclose(mine, value, rel_tol=1e-9, abs_tol=1e-9), (key, name, mine, value)
            else:
                assert norm(mine) == norm(value), (key, name, mine, value)


def aggregated(ds: Dataset, sort_by: str | None) -> dict[str, dict]:
    records = ds.aggregate("k", sort_by=sort_by, num_shards=3, **OUTPUTS).collect()
    assert len({norm(r["k"]) for r in records}) == len(records)  # one record per key
    return {norm(r["k"]): r for r in records}


def small_writer(spec, num_targets, out_dir, *, shard, flush_bytes):
    return AggregateWriter(spec, num_targets, out_dir, shard=shard, flush_bytes=200)


@contextlib.contextmanager
def running(memory: str, tiny: bool) -> Iterator[None]:
    """The local backend with `memory` per worker; `tiny`: the map side flushes every 200 bytes (a run
    per few rows, and a fold of every flush)."""
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="zephyr-differential-aggregate-"))
        if tiny:
            stack.enter_context(mock.patch.object(outputs, "AggregateWriter", small_writer))
        stack.enter_context(
            execution(backend="local", scratch=scratch, memory_per_worker=memory, progress=False, summary=False)
        )
        yield


@st.composite
def mixed_rows(draw):
    """Records whose fields mix ints, floats and bools (and None, NaN), keys text or numbers."""
    text_keys = draw(st.booleans())
    key = st.one_of(st.none(), st.text(alphabet="abé", max_size=2) if text_keys else _NUMBERS)
    rows = [
        {
            "k": draw(key),
            "s": draw(st.one_of(st.none(), _NUMBERS)),
            "x": draw(st.one_of(st.none(), st.integers(-9, 9), _NUMBERS)),
            "p": draw(st.one_of(st.none(), st.text(alphabet="xyz", max_size=3))),
        }
        for _ in range(draw(st.integers(0, 40)))
    ]
    return rows, draw(st.sampled_from([None, "s"])), draw(st.integers(1, 4)), draw(st.booleans())


def check_mixed(case) -> None:
    rows, sort_by, shards, tiny = case
    with running("16MB", tiny):
        got = aggregated(Dataset.from_list(rows, num_shards=shards), sort_by)
    same(got, oracle(rows, sort_by))


@FAST
@given(mixed_rows())
def test_aggregate_of_mixed_records_matches_python(case):
    check_mixed(case)


@st.composite
def typed_rows(draw):
    """Rows with one type per field (what parquet holds): int or text keys with None, float sort keys
    with None and NaN (ties common), int values, text with None."""
    text_keys = draw(st.booleans())
    key = st.one_of(st.none(), st.text(alphabet="ab", max_size=2) if text_keys else st.integers(-3, 3))
    sort = st.one_of(st.none(), st.sampled_from([0.0, 1.0, -1.0, math.nan, math.inf, 2.5]))
    n = draw(st.integers(1, 60))
    rows = [
        {
            "k": draw(key),
            "s": draw(sort),
            "x": draw(st.integers(-(2**40), 2**40)),
            "p": draw(st.one_of(st.none(), st.text(alphabet="xyzé", max_size=3))),
        }
        for _ in range(n)
    ]
    return rows, text_keys, draw(st.integers(1, 4)), draw(st.booleans())


def _table(rows: list[dict], text_keys: bool) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r["k"] for r in rows], pa.string() if text_keys else pa.int64()),
            "s": pa.array([r["s"] for r in rows], pa.float64()),
            "x": pa.array([r["x"] for r in rows], pa.int64()),
            "p": pa.array([r["p"] for r in rows], pa.string()),
        }
    )


def polars_oracle(rows: list[dict], text_keys: bool) -> dict[str, dict]:
    # min and max of s stay out: polars orders NaN below every number, the engine (as Python) above
    outputs = {name: spec for name, spec in OUTPUTS.items() if name not in ("low_s", "high_s")}
    want = polars_aggregate(pl.from_arrow(_table(rows, text_keys)), "k", "s", outputs)
    return {norm(key): row for key, row in want.items()}


def check_typed(case) -> None:
    rows, text_keys, files, tiny = case
    with tempfile.TemporaryDirectory(prefix="zephyr-differential-aggregate-in-") as folder:
        table = _table(rows, text_keys)
        step = -(-len(rows) // files)
        for i in range(files):
            pq.write_table(table.slice(i * step, step), Path(folder) / f"part-{i:03d}.parquet")
        with running("16MB", tiny):
            got = aggregated(Dataset.from_files(f"{folder}/*.parquet"), "s")
    want = polars_oracle(rows, text_keys)
    assert set(got) == set(want)
    for key, record in want.items():
        for name, value in record.items():
            assert norm(got[key][name]) == norm(value), (key, name, got[key][name], value)
    same(got, oracle(rows, "s"))  # and min/max of s, NaN above every number, which polars orders otherwise


@FAST
@given(typed_rows())
def test_aggregate_of_parquet_matches_polars(case):
    check_typed(case)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@SLOW
@given(mixed_rows())
def test_aggregate_of_mixed_records_matches_python_longer(case):
    check_mixed(case)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@SLOW
@given(typed_rows())
def test_aggregate_of_parquet_matches_polars_longer(case):
    check_typed(case)
