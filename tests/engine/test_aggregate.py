"""`Dataset.aggregate` beyond the differential suite: a real-sized input folded a key-hash range at a time in
worker processes (against polars), files whose column types differ, what follows an aggregate (a map, a
second shuffle, a parquet sink without state columns), and the errors it raises."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars_aggregate import polars_aggregate

from zephyr import Dataset, execution
from zephyr.engine.shuffle.aggregate import Aggregation, fold_columnar, fold_python, raw_rows, unit_partials
from zephyr.errors import BadInputError, UserCodeError

OUTPUTS = dict(
    n=("ts", "size"),
    first_ts=("ts", "first"),
    last_ts=("ts", "last"),
    first_text=("text", "first"),
    total=("ts", "sum"),
    average=("ts", "mean"),
    low=("text", "min"),
    high=("ts", "max"),
)


def _write_input(folder: Path, rows: int, files: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "user": pa.array(rng.integers(0, rows // 5, rows), pa.int64()),
            "ts": pa.array(rng.integers(0, 1 << 40, rows), pa.int64()),
            "text": pa.array([f"t{v}" + "x" * 40 for v in rng.integers(0, 1000, rows)], pa.string()),
        }
    )
    step = -(-rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i:03d}.parquet")
    return table


def test_a_large_input_in_worker_processes_folds_range_by_range_and_matches_polars(tmp_path):
    """400k rows, 80k keys, in 8 files over 2 worker processes with 16 MB per worker: each reduce task's
    share (~14 MB) is several times its fold budget (4 MB), so it folds one key-hash range after another."""
    (tmp_path / "in").mkdir()
    table = _write_input(tmp_path / "in", 400_000, 8)
    with execution(backend="processes", workers=2, memory_per_worker="16MB", scratch=str(tmp_path / "s")):
        ds = Dataset.from_files(str(tmp_path / "in" / "*.parquet")).aggregate(
            "user", sort_by="ts", num_shards=2, **OUTPUTS
        )
        run = ds.write(str(tmp_path / "out" / "part-{shard:05d}.parquet")).execute()
    got = pq.read_table(tmp_path / "out")
    assert got.column_names == ["user", *OUTPUTS]  # no state columns
    want = polars_aggregate(pl.from_arrow(table), "user", "ts", OUTPUTS)
    assert got.num_rows == len(want)
    for row in got.to_pylist():
        assert row == want[row["user"]]
    assert run.stages[1].records_out == len(want)


def test_files_whose_column_types_differ_fold_in_python(tmp_path):
    """An int32 value column in one file and int64 in another: the runs' types differ, the fold goes Python."""
    pq.write_table(
        pa.table({"k": pa.array([1, 2, 1], pa.int64()), "v": pa.array([5, 6, 7], pa.int32())}), tmp_path / "a.parquet"
    )
    pq.write_table(
        pa.table({"k": pa.array([2, 1], pa.int64()), "v": pa.array([1, 9], pa.int64())}), tmp_path / "b.parquet"
    )
    with execution(backend="local", scratch=str(tmp_path / "s")):
        got = Dataset.from_files(str(tmp_path / "*.parquet")).aggregate(
            "k", total=("v", "sum"), first=("v", "first"), last=("v", "last")
        )
        records = sorted(got.collect(), key=lambda r: r["k"])
    assert records == [{"k": 1, "total": 21, "first": 5, "last": 9}, {"k": 2, "total": 7, "first": 6, "last": 1}]


def test_what_follows_an_aggregate_gets_records():
    rows = [{"domain": d, "words": w} for d, w in [("a", 3), ("b", 4), ("a", 5), ("c", 1), ("b", 2)]]
    with execution(backend="local"):
        counted = Dataset.from_list(rows, num_shards=2).aggregate(
            "domain", docs=("words", "size"), words=("words", "sum")
        )
        labelled = counted.map(lambda r: {**r, "big": r["words"] > 5}).collect()
        by_size = counted.aggregate("docs", domains=("domain", "size")).collect()
    assert sorted(labelled, key=lambda r: r["domain"]) == [
        {"domain": "a", "docs": 2, "words": 8, "big": True},
        {"domain": "b", "docs": 2, "words": 6, "big": True},
        {"domain": "c", "docs": 1, "words": 1, "big": False},
    ]
    assert sorted(by_size, key=lambda r: r["docs"]) == [{"docs": 1, "domains": 1}, {"docs": 2, "domains": 2}]


def test_a_python_folded_aggregate_feeds_a_shuffle_on_a_field():
    """Keys Arrow cannot hold (a float and a str) take the Python fold, whose records come among the
    aggregate's Arrow batches; a group_by or aggregate on a field after it read them as batches and failed
    ("'dict' object has no attribute 'num_rows'")."""
    rows = [{"k": 1.5, "x": 1}, {"k": "a", "x": 2}, {"k": 1.5, "x": 3}]
    with execution(backend="local"):
        sized = Dataset.from_list(rows, num_shards=2).aggregate("k", n=("x", "size"))
        regrouped = sized.group_by("n", lambda n, items: {"n": n, "keys": len(list(items))}).collect()
        reaggregated = sized.aggregate("n", keys=("k", "size")).collect()
    want = [{"n": 1, "keys": 1}, {"n": 2, "keys": 1}]
    assert sorted(regrouped, key=lambda r: r["n"]) == want
    assert sorted(reaggregated, key=lambda r: r["n"]) == want


@pytest.mark.parametrize(
    ("kwargs", "missing"),
    [({"key": "usr"}, "usr"), ({"sort_by": "tss"}, "tss"), ({"total": ("tss", "sum")}, "tss")],
)
def test_a_field_no_record_has_is_refused_as_a_typo(kwargs, missing):
    """A misspelled key made one group of None, and a misspelled value field outputs of None, silently."""
    args = {"key": "user", "n": ("ts", "size"), **kwargs}
    with execution(backend="local"), pytest.raises(BadInputError, match=f"no record has field '{missing}'"):
        Dataset.from_list([{"user": 1, "ts": 2}, {"user": 2, "ts": 3}]).aggregate(**args).collect()


def test_keys_equal_in_python_are_one_key_and_values_keep_python_semantics():
    rows = [
        {"k": 1, "v": 2.5, "s": 3},
        {"k": 1.0, "v": None, "s": None},
        {"k": True, "v": math.nan, "s": 1},
        {"k": (1, "x"), "v": 1, "s": 0},
        {"k": None, "v": -1, "s": 2},
    ]
    with execution(backend="local"):
        got = Dataset.from_list(rows, num_shards=3).aggregate(
            "k",
            sort_by="s",
            n=("v", "size"),
            count=("v", "count"),
            low=("v", "min"),
            high=("v", "max"),
            first=("v", "first"),
        )
        records = {repr(r["k"]): r for r in got.collect()}
    one = records["1"]  # 1, 1.0 and True: one key, as the first record had it
    assert (one["n"], one["count"], one["low"], one["first"]) == (3, 2, 2.5, None)  # None sorts first
    assert math.isnan(one["high"])  # NaN above every number
    assert records["(1, 'x')"]["n"] == 1 and records["None"]["low"] == -1


def test_folds_agree_on_the_same_partial_rows():
    spec = Aggregation("k", (("n", "size", "v"), ("s", "sum", "v"), ("f", "first", "v"), ("l", "last", "v")), "t")
    table = pa.table({"k": [3, 1, 3, 2, 1, 3], "v": [10, 20, 30, 40, 50, 60], "t": [2, 1, 2, 5, 0, 1]})
    partials = unit_partials(raw_rows(table, spec, 0), spec)
    columnar = fold_columnar(partials, spec)
    assert columnar is not None
    assert columnar.to_pylist() == fold_python(partials.to_pylist(), spec)
    assert columnar.select(["k", "n", "s", "f", "l"]).to_pylist() == [
        {"k": 3, "n": 3, "s": 100, "f": 60, "l": 30},  # sort 2, 2 tie: the later input row is last
        {"k": 1, "n": 2, "s": 70, "f": 50, "l": 20},
        {"k": 2, "n": 1, "s": 40, "f": 40, "l": 40},
    ]


def test_an_int_sum_beyond_64_bits_is_exact_rather_than_wrapped(tmp_path):
    """int64 columns whose sum leaves 64 bits: summed in Python, exactly (NumPy's int64 would wrap)."""
    values = pa.array([2**62, 2**62, 2**62 - 1, -5], pa.int64())
    pq.write_table(pa.table({"k": [1, 1, 2, 2], "v": values}), tmp_path / "a.parquet")
    with execution(backend="local", scratch=str(tmp_path / "s")):
        got = Dataset.from_files(str(tmp_path / "a.parquet")).aggregate("k", total=("v", "sum"), n=("v", "size"))
        records = sorted(got.collect(), key=lambda r: r["k"])
    assert records == [{"k": 1, "total": 2**63, "n": 2}, {"k": 2, "total": 2**62 - 6, "n": 2}]


def test_uint64_values_above_int64_keep_their_value(tmp_path):
    values = pa.array([2**64 - 1, 5, 2**63], pa.uint64())
    pq.write_table(pa.table({"k": [1, 1, 1], "v": values}), tmp_path / "a.parquet")
    with execution(backend="local", scratch=str(tmp_path / "s")):
        ds = Dataset.from_files(str(tmp_path / "a.parquet"))
        ordered = ds.aggregate("k", sort_by="v", low=("v", "min"), high=("v", "max"), first=("v", "first"))
        summed = ds.aggregate("k", total=("v", "sum"))
        assert ordered.collect() == [{"k": 1, "low": 5, "high": 2**64 - 1, "first": 5}]
        assert summed.collect() == [{"k": 1, "total": 2**64 - 1 + 5 + 2**63}]


def test_a_sum_of_values_that_are_not_numbers_is_refused_by_name():
    rows = [{"k": 1, "v": "a"}, {"k": 1, "v": "b"}]
    with execution(backend="local", max_user_retries=0), pytest.raises(UserCodeError) as caught:
        Dataset.from_list(rows).aggregate("k", words=("v", "sum")).collect()
    assert "'words' sums 'a' (str) and 'b' (str)" in str(caught.value)


def test_values_python_cannot_order_within_a_key_are_named():
    rows = [{"k": 1, "v": "a"}, {"k": 1, "v": 2}]
    with execution(backend="local", max_user_retries=0), pytest.raises(UserCodeError) as caught:
        Dataset.from_list(rows).aggregate("k", low=("v", "min")).collect()
    assert "'low' compares" in str(caught.value) and "give the field one type" in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(n=("v", "median")), ValueError, "how must be one of size, count, sum, mean, min, max, first, last"),
        (dict(n="v"), TypeError, "takes (field, how)"),
        (dict(k=("v", "sum")), ValueError, "is the key field"),
        ({}, ValueError, "at least one output"),
    ],
)
def test_bad_outputs_are_refused_when_planned(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        Dataset.from_list([{"k": 1, "v": 2}]).aggregate("k", **kwargs)
