"""The compiled narrow-op pipeline: fused maps/filters/flat_maps/takes keep each op's exact semantics and
pin every user error on its op and record."""

from __future__ import annotations

import pickle

import pytest

from zephyr import Dataset, UserCodeError, col, execution
from zephyr.engine.ops import Filter, FlatMap, Map, Select, TakePerShard
from zephyr.engine.pipeline import Pipeline


@pytest.fixture
def local(scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        yield


def _explodes_after(n: int):
    def shard(index: int):
        yield from range(n)
        raise RuntimeError("the input was read too far")

    return shard


def test_take_stops_reading_upstream_and_counts_after_filters_and_flat_maps(local):
    ds = Dataset.from_iterable(_explodes_after(5), num_shards=1)
    assert ds.flat_map(lambda x: [x, x]).filter(lambda x: x % 3).take_per_shard(3).collect() == [1, 1, 2]
    assert ds.take_per_shard(0).collect() == []
    assert ds.map(lambda x: x * 10).take_per_shard(5).collect() == [0, 10, 20, 30, 40]
    # a take before a filter counts what reaches it, not what the filter keeps
    assert ds.take_per_shard(4).filter(lambda x: x % 2).collect() == [1, 3]


def test_error_is_pinned_on_the_failing_op_and_record(local):
    def boom(x):
        if x == 6:
            raise ValueError("six")
        return x

    ds = Dataset.from_list(range(10), num_shards=1).map(lambda x: x + 1).filter(lambda x: x != 2).map(boom)
    with pytest.raises(UserCodeError) as info:
        ds.collect()
    message = str(info.value)
    assert "map(boom) failed" in message  # the readable name: the function, not its qualname
    assert "record #5" in message and "record: 6" in message and "ValueError: six" in message


def test_generator_error_in_flat_map_names_its_record(local):
    def spread(x):
        yield x
        if x == 3:
            raise KeyError("late")
        yield -x

    ds = Dataset.from_list(range(5), num_shards=1).flat_map(spread).map(abs)
    with pytest.raises(UserCodeError, match=r"flat_map\(.*spread\) failed .* record #3: KeyError"):
        ds.collect()


def test_input_errors_are_not_blamed_on_an_op(local):
    ds = Dataset.from_iterable(_explodes_after(3), num_shards=1).map(lambda x: x).flat_map(lambda x: [x])
    with pytest.raises(UserCodeError) as info:
        ds.collect()
    message = str(info.value)
    assert "failed: RuntimeError: the input was read too far" in message
    assert "map(lambda) failed" not in message and "flat_map(lambda) failed" not in message


def test_long_chains_of_flat_maps_compile(local):
    ds = Dataset.from_list([1, 2], num_shards=1)
    for _ in range(25):  # more nested loops than Python allows in one function: split into parts
        ds = ds.flat_map(lambda x: [x])
    assert ds.collect() == [1, 2]


def test_expression_filter_on_records_is_evaluated_compiled(local):
    records = [{"a": 1}, {"a": None}, {}, {"a": 0}]
    assert Dataset.from_list(records, num_shards=1).map(dict).filter(col("a") >= 1).collect() == [{"a": 1}]
    assert Dataset.from_list(records, num_shards=1).map(dict).select("a").collect() == [
        {"a": 1},
        {"a": None},
        {"a": None},
        {"a": 0},
    ]


def test_pipeline_pickles_and_runs_in_a_fresh_copy():
    pipeline = Pipeline(
        (
            Map(abs),
            Filter(bool),
            FlatMap(range),
            TakePerShard(4),
            Select(("x",)),
        )
    )
    copy = pickle.loads(pickle.dumps(Pipeline(pipeline.steps[:4])))
    assert list(copy(iter([-3, 0, 2]), "test")) == [0, 1, 2, 0]
    with pytest.raises(UserCodeError, match=r"select\(x\) failed in test, on record #0: AttributeError"):
        list(pipeline(iter([-3]), "test"))
