"""Keys and sort keys order and group by value, as Python does (issue #28 items 1 and 2): numbers in one
numeric order, equal numbers one key, in every wide op and in the Arrow column-wise encoding alike; keys
Python cannot order against each other are an error naming both, the stage and the record."""

from __future__ import annotations

import collections
import datetime as dt
import math
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import Dataset, execution
from zephyr.engine.sortkey import (
    UnorderableKeysError,
    decode,
    decode_key,
    encode,
    encode_keys,
    hint,
)

MIXED = [3, 2.5, -1, -0.5, 10, 0.25]


@pytest.fixture(params=["local", "processes"])
def backend(request, tmp_path):
    with execution(backend=request.param, workers=2, scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        yield request.param


def _numbers(rng: random.Random, n: int) -> list:
    """ints (some beyond 64 bits and beyond float precision), floats (subnormal, huge, -0.0, inf), bools."""
    special = [0, -0.0, 0.0, True, False, 1, 1.0, -1, 2**53 + 1, float(2**53), 2**63, -(2**63) - 1, 2**64]
    special += [2**200, -(2**200), 1e300, -1e300, 5e-324, -5e-324, math.inf, -math.inf, 0.1, -0.9999999999999999]
    values = list(special)
    for _ in range(n):
        choice = rng.randrange(4)
        if choice == 0:
            values.append(rng.randint(-(2**70), 2**70))
        elif choice == 1:
            values.append(rng.uniform(-1e6, 1e6))
        elif choice == 2:
            values.append(rng.randint(-40, 40) / 4)  # integral floats beside the equal ints
        else:
            values.append(rng.randint(-10, 10))
    return values


def test_numbers_encode_in_pythons_order_and_equal_numbers_encode_alike():
    values = _numbers(random.Random(0), 400)
    for a in values[:150]:
        for b in values:
            assert (encode(a) < encode(b)) == (a < b), (a, b)
            assert (encode(a) == encode(b)) == (a == b), (a, b)
    nan = float("nan")
    assert encode(nan) == encode(float("nan")) > encode(math.inf)  # NaN: one key, after inf
    assert encode(None) < encode(-math.inf)  # None first


def test_a_key_decodes_with_its_hint_to_the_value_it_was():
    values = _numbers(random.Random(1), 200) + [None, "s", b"b", (1, 2.0, True), dt.date(2020, 1, 2)]
    values += [dt.datetime(2020, 1, 2, 3, tzinfo=dt.timezone(dt.timedelta(hours=5))), dt.timedelta(days=-2, seconds=5)]
    for value in values:
        back = decode_key(encode(value), hint(value))
        assert back == value and type(back) is type(value), value
        if isinstance(value, float):
            assert math.copysign(1, back) == math.copysign(1, value)  # -0.0 stays -0.0
    assert hint(7) == hint("x") == hint(2.5) == b""  # nearly every key needs no hint


def test_column_wise_encoding_gives_the_bytes_and_hints_of_encode():
    rng = random.Random(2)
    floats = [v for v in _numbers(rng, 300) if isinstance(v, float) and abs(v) < 2**64]
    ints = [v for v in _numbers(rng, 300) if type(v) is int and abs(v) < 2**63]
    columns = [
        pa.array(floats + [None, float("nan")]),
        pa.array(floats, pa.float32()).cast(pa.float64()),
        pa.array(ints + [None]),
        pa.array([0, 2**64 - 1, 5], pa.uint64()),
        pa.array([-3, 3, None], pa.int8()),
        pa.array([True, False, None]),
        pa.array([1e20, -1e300, 3.0]),  # beyond 2**64: one value at a time
        pa.array(["a", None, "b\x00"]),
        pa.array(["x", "y", "x", None]).dictionary_encode(),
        pa.array([None, None]),
        pa.array([dt.datetime(2021, 5, 1, 12), None, dt.datetime(1999, 1, 1)]),
    ]
    for column in columns:
        keys, hints = encode_keys(column)
        items = column.to_pylist()
        assert keys.to_pylist() == [encode(v) for v in items], column.type
        assert hints.to_pylist() == [hint(v) for v in items], column.type


def test_sort_orders_ints_and_floats_as_numbers(backend):
    """Issue fault 1: every int came before every float."""
    records = [{"x": x} for x in MIXED]
    got = [r["x"] for r in Dataset.from_list(records, num_shards=2).sort("x").collect()]
    assert got == sorted(MIXED)
    got = [r["x"] for r in Dataset.from_list(records, num_shards=2).sort(lambda r: r["x"], descending=True).collect()]
    assert got == sorted(MIXED, reverse=True)


def test_secondary_sort_orders_ints_and_floats_as_numbers(backend):
    records = [{"g": i % 3, "s": s} for i, s in enumerate(MIXED * 3)]  # each group holds ints and floats

    def values(key, items):
        return {"g": key, "s": [r["s"] for r in items]}

    for sort_by in ("s", lambda r: r["s"]):
        got = Dataset.from_list(records, num_shards=3).group_by("g", values, sort_by=sort_by).collect()
        for out in got:
            assert out["s"] == sorted(r["s"] for r in records if r["g"] == out["g"])


def test_equal_numbers_are_one_group_key(backend):
    """Issue fault 2: 1, 1.0, 2, 2.0, 2 made four groups; deduplicate kept 1 and 1.0."""
    keys = [1, 1.0, 2, 2.0, 2, True, 0, False, -0.0]
    records = [{"k": k, "i": i} for i, k in enumerate(keys)]
    counts = Dataset.from_list(records, num_shards=3).group_by("k", lambda k, it: (k, len(list(it))), num_shards=2)
    assert sorted(counts.collect()) == sorted(collections.Counter(keys).items())
    kept = Dataset.from_list(records, num_shards=3).deduplicate("k", num_shards=2).collect()
    assert sorted(r["i"] for r in kept) == [0, 2, 6]  # the first record of each key in input order


def test_the_reducer_gets_the_key_of_its_groups_first_record(backend):
    for first, others in ((1.0, [1, True]), (True, [1, 1.0]), (1, [1.0]), (-0.0, [0, False])):
        records = [{"k": first, "i": 0}] + [{"k": k, "i": i + 1} for i, k in enumerate(others)]
        (out,) = Dataset.from_list(records, num_shards=1).group_by("k", lambda k, it: [k]).collect()
        assert out == [first] and type(out[0]) is type(first)
        if isinstance(first, float):
            assert math.copysign(1, out[0]) == math.copysign(1, first)


def test_equal_numbers_go_to_one_shuffle_target_and_match_in_joins(backend):
    # many equal-valued keys of three types over many targets: one group each, whatever the target count
    keys = [v for n in range(40) for v in (n, float(n), n == 1)]
    records = [{"k": k} for k in keys]
    groups = Dataset.from_list(records, num_shards=4).group_by("k", lambda k, it: (k, len(list(it))), num_shards=7)
    assert sorted(groups.collect()) == sorted(collections.Counter(keys).items())
    left = Dataset.from_list([{"id": 1, "l": "a"}, {"id": 2.5, "l": "b"}, {"id": 3, "l": "c"}])
    right = Dataset.from_list([{"id": 1.0, "r": "x"}, {"id": 2.5, "r": "y"}, {"id": True, "r": "z"}])
    joined = left.sorted_merge_join(right, left_key=lambda r: r["id"], right_key=lambda r: r["id"], num_shards=3)
    assert sorted((r["l"], r["r"]) for r in joined.collect()) == [("a", "x"), ("a", "z"), ("b", "y")]


def test_big_ints_beyond_float_precision_order_exactly(backend):
    big = 2**63
    values = [big + 1, float(big), big, big - 1, 2**70, 2.0**70, -(2**64), -(2.0**64) + 4096, 1e300, -1e300]
    got = [r["x"] for r in Dataset.from_list([{"x": v} for v in values], num_shards=2).sort("x").collect()]
    assert got == sorted(values)


def test_nan_inf_none_and_negative_zero_have_fixed_places(backend):
    values = [1.0, None, math.nan, -math.inf, math.inf, -0.0, 0, -1]
    got = [r["x"] for r in Dataset.from_list([{"x": v} for v in values], num_shards=2).sort("x").collect()]
    assert got[0] is None and got[1] == -math.inf and got[2] == -1 and {got[3], got[4]} == {0}
    assert got[5:7] == [1.0, math.inf] and math.isnan(got[7])
    records = Dataset.from_list([{"x": v} for v in values], num_shards=2)
    down = [r["x"] for r in records.sort("x", descending=True).collect()]
    assert math.isnan(down[0]) and down[-1] is None  # descending: the exact reverse


def test_mixed_int_and_float_parquet_columns_group_and_sort_as_numbers(tmp_path, backend):
    """The Arrow column-wise path: one file's score column is int64, the other's float64."""
    pq.write_table(pa.table({"g": [1, 1, 2], "score": [3, 1, 2]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"g": [1.0, 2.0, 2.0], "score": [2.5, 0.5, 2.0]}), tmp_path / "b.parquet")

    def scores(key, items):
        return {"g": key, "scores": [r["score"] for r in items]}

    got = Dataset.from_files(str(tmp_path / "*.parquet")).group_by("g", scores, sort_by="score").collect()
    assert sorted((r["g"], r["scores"]) for r in got) == [(1, [1, 2.5, 3]), (2, [0.5, 2, 2.0])]


def test_datetimes_sort_in_time_order(tmp_path, backend):
    stamps = [dt.datetime(2024, 1, 1) + dt.timedelta(hours=h) for h in (30, -2, 7, 500, 0)]
    pq.write_table(pa.table({"ts": stamps, "i": list(range(5))}), tmp_path / "t.parquet")
    got = [r["ts"] for r in Dataset.from_files(str(tmp_path / "t.parquet")).sort("ts").collect()]
    assert got == sorted(stamps)
    # aware datetimes order by their instant, whatever their zones (earlier, they ordered by local fields)
    zones = [dt.timezone(dt.timedelta(hours=h)) for h in (-8, 0, 9)]
    aware = [dt.datetime(2024, 1, 1, h, tzinfo=zones[h % 3]) for h in range(0, 24, 2)]
    got = [r["ts"] for r in Dataset.from_list([{"ts": t} for t in aware], num_shards=2).sort("ts").collect()]
    assert got == sorted(aware) and [t.tzinfo for t in got] == [t.tzinfo for t in sorted(aware)]


def test_a_sort_over_keys_python_cannot_order_is_an_error_naming_both(backend):
    records = [{"x": 3}, {"x": "a"}, {"x": 2}, {"x": None}]
    with pytest.raises(UnorderableKeysError, match=r"int 3 \(record \{'x': 3\}\) and str 'a' \(record") as error:
        Dataset.from_list(records, num_shards=2).sort("x").collect()
    assert 'sort(key=col("x"))' in str(error.value)


def test_a_secondary_sort_over_keys_python_cannot_order_is_an_error_naming_the_stage(backend):
    records = [{"g": 1, "s": 3}, {"g": 1, "s": "a"}, {"g": 2, "s": "b"}, {"g": 3, "s": 4}]
    with pytest.raises(UnorderableKeysError, match=r"stage 1 .*int 3 and str 'a'.*key 1, at record \{'g': 1"):
        Dataset.from_list(records, num_shards=2).group_by("g", lambda k, it: list(it), sort_by="s").collect()
    # different kinds in different groups are fine: Python never compares them
    fine = Dataset.from_list(records[2:], num_shards=2).group_by("g", lambda k, it: [r["s"] for r in it], sort_by="s")
    assert sorted(fine.collect(), key=str) == [["b"], [4]]


def test_tuples_are_compared_where_they_first_differ():
    ok = [{"g": 0, "s": (1, "a")}, {"g": 0, "s": (2, 3)}, {"g": 0, "s": (None, 5)}]
    with execution(backend="local", progress=False, summary=False):
        got = Dataset.from_list(ok).group_by("g", lambda k, it: [r["s"] for r in it], sort_by="s").collect()
        assert got == [[(None, 5), (1, "a"), (2, 3)]]  # Python sorts these without error
        with pytest.raises(UnorderableKeysError, match=r"int 3 and str 'b'"):
            bad = ok + [{"g": 0, "s": (2, "b")}]
            Dataset.from_list(bad).group_by("g", lambda k, it: list(it), sort_by="s").collect()


def test_sort_keys_without_an_order_are_refused():
    records = [{"g": 0, "s": {"a": 1}}, {"g": 0, "s": {"a": 2}}]
    with execution(backend="local", progress=False, summary=False), pytest.raises(UnorderableKeysError, match="dict"):
        Dataset.from_list(records).group_by("g", lambda k, it: list(it), sort_by="s").collect()


def test_keys_of_kinds_python_cannot_order_still_group():
    """Grouping needs only equality: a str and an int may be keys of one group_by."""
    keys = ["1", 1, 1.0, None, b"1", (1,), "1"]
    with execution(backend="local", progress=False, summary=False):
        got = Dataset.from_list([{"k": k} for k in keys]).group_by("k", lambda k, it: (k, len(list(it)))).collect()
    assert sorted(got, key=repr) == sorted(collections.Counter(keys).items(), key=repr)
    assert decode(encode((1, "a"))) == (1, "a")


def test_runs_record_their_sort_key_kinds_so_one_kind_costs_no_check(tmp_path):
    from zephyr.engine.shuffle import ScatterWriter, ShuffleSpec, order_checked

    def runs(values, name):
        writer = ScatterWriter(
            ShuffleSpec(2, key=lambda r: 0, sort_by=lambda r: r), str(tmp_path / name), shard=0, flush_bytes=1 << 20
        )
        for value in values:
            writer.add(value)
        return writer.close()

    numbers = runs([3, 2.5, None, True], "numbers")
    assert {kind for run in numbers for kind in run.sort_kinds} == {0, 1}  # None and numbers
    assert not order_checked(numbers)
    assert not order_checked(numbers + runs(["x", None], "text")[:0])
    assert order_checked(numbers + runs(["x"], "text"))  # a number and a str may meet: checked
    assert order_checked(runs([(1, "a"), (1, 2)], "tuples"))  # tuples: compared element by element
