"""Every counterexample the differential suite found, shrunk, kept as an explicit test (issue #28 item 5).

What it found, by the engine it ran on:

1. On the engine before issue #28's fixes (its bounded profile, run against that code), shrunk:
   a. `group_by` over keys 0 and 0.0 made two groups (reference and polars: one);
   b. `sort` of [0, -1.0] gave [0, -1.0]: every int before every float;
   c. `sort` of [-1, None, False] gave [None, False, -1]: bools before ints;
   d. `sort(..., num_shards=2)` of an empty dataset raised IndexError (no samples to pick range
      boundaries from).
2. On the fixed engine, while the suite was written: 1d again (it was still there); nothing else.
"""

from __future__ import annotations

import pytest

from zephyr import Dataset, execution


@pytest.fixture
def local(tmp_path):
    with execution(backend="local", scratch=str(tmp_path), progress=False, summary=False):
        yield


def test_zero_and_zero_point_zero_are_one_group(local):
    records = [{"i": 0, "k": 0}, {"i": 1, "k": 0.0}]
    groups = Dataset.from_list(records, num_shards=1).group_by(lambda r: r["k"], lambda k, it: (k, len(list(it))))
    assert groups.collect() == [(0, 2)]


def test_an_int_and_a_float_sort_by_value(local):
    records = [{"s": 0}, {"s": -1.0}]
    assert [r["s"] for r in Dataset.from_list(records, num_shards=1).sort("s", num_shards=2).collect()] == [-1.0, 0]


def test_a_bool_sorts_as_the_number_it_is(local):
    records = [{"s": -1}, {"s": None}, {"s": False}]
    assert [r["s"] for r in Dataset.from_list(records, num_shards=1).sort("s", num_shards=2).collect()] == [
        None,
        -1,
        False,
    ]


def test_sorting_an_empty_dataset_into_several_shards(local):
    assert Dataset.from_list([], num_shards=1).sort(lambda r: r["s"], num_shards=2).collect() == []
    assert Dataset.from_list([{"s": 1}], num_shards=1).filter(lambda r: False).sort("s", num_shards=3).collect() == []
