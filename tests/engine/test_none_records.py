"""`None` is a record like any other: it must survive every wide op, wherever it sits in a shard.

These guard against code that reads `next(records, None)` as "end of stream" (a shard whose first
record was None lost all of its records at a shuffle) or a reducer's `None` as "nothing".
"""

from __future__ import annotations

from collections import Counter

import pytest

from zephyr import Dataset, execution


@pytest.fixture(params=["local", "processes"])
def backend(request, scratch):
    with execution(backend=request.param, workers=2, scratch=scratch, summary=False, progress=False):
        yield request.param


def test_reshard_keeps_a_shard_that_starts_with_none(backend):
    assert sorted(Dataset.from_list([None, 1, 2], num_shards=1).reshard(1).collect(), key=repr) == [1, 2, None]
    assert Dataset.from_list([None, None, 3, None], num_shards=2).reshard(3).count() == 4


def test_group_by_counts_none_records(backend):
    records = [None, 1, None, 2, 1, None]
    out = Dataset.from_list(records, num_shards=2).group_by(lambda r: r, lambda k, items: (k, sum(1 for _ in items)))
    assert sorted(out.collect(), key=repr) == sorted(Counter(records).items(), key=repr)


def test_group_by_with_combiner_and_sort_by_over_none_records(backend):
    records = [None, 3, None, 1]
    out = Dataset.from_list(records, num_shards=2).group_by(
        lambda r: r is None,
        lambda k, items: (k, list(items)),
        sort_by=lambda r: -1 if r is None else r,
        combiner=lambda k, items: iter(list(items)),
    )
    assert sorted(out.collect(), key=repr) == [(False, [1, 3]), (True, [None, None])]


def test_deduplicate_keeps_one_none(backend):
    out = Dataset.from_list([None, None, "a", None, "a", "b"], num_shards=2).deduplicate(lambda r: r).collect()
    assert sorted(out, key=repr) == sorted(["a", "b", None], key=repr)


def test_join_with_none_records_on_both_sides(backend):
    left = Dataset.from_list([None, 1, 2], num_shards=1)
    right = Dataset.from_list([None, 2], num_shards=1)
    joined = left.sorted_merge_join(
        right, left_key=lambda r: r, right_key=lambda r: r, combine=lambda a, b: (a, b), how="left"
    )
    assert sorted(joined.collect(), key=repr) == sorted([(None, None), (1, None), (2, 2)], key=repr)


def test_count_and_reduce_after_a_shuffle_of_none_records(backend):
    ds = Dataset.from_list([None, None, 3, None], num_shards=2).reshard(3)
    assert ds.count() == 4
    assert ds.map(lambda r: 0 if r is None else r).reduce(lambda a, b: a + b) == 3
    assert Dataset.from_list([None], num_shards=1).reshard(2).reduce(lambda a, b: a) is None
