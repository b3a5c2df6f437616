"""Expression filters after any op and on any source (issue #17 item 3)."""

from __future__ import annotations

import pytest

from zephyr import Dataset, col, execution
from zephyr.engine.errors import BadInputError


@pytest.fixture
def local(scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        yield


def _same(record):
    return record


def test_expression_filter_after_a_map(local):
    ds = Dataset.from_list([{"a": 1}, {"a": 5}]).map(_same).filter(col("a") > 2)
    assert ds.collect() == [{"a": 5}]
    assert 'filter((col("a") > 2))' in repr(ds)


def test_expression_filter_after_flat_map_and_group_by(local):
    ds = Dataset.from_list([{"a": i % 4} for i in range(12)], num_shards=3)
    grouped = ds.group_by("a", lambda key, items: {"a": key, "n": sum(1 for _ in items)}).filter(col("n") >= 3)
    assert sorted(r["a"] for r in grouped.collect()) == [0, 1, 2, 3]
    assert Dataset.from_list([[{"a": 1}, {"a": 3}]]).flat_map(_same).filter(col("a") == 3).collect() == [{"a": 3}]


def test_expression_over_a_field_no_record_has_is_an_error(local):
    ds = Dataset.from_list([{"a": 1}, {"a": 5}]).map(_same).filter(col("b") > 2)
    with pytest.raises(BadInputError, match=r"no record has field\(s\) 'b'; the first record has a\."):
        ds.collect()


def test_is_null_of_an_absent_optional_field_is_allowed(local):
    assert Dataset.from_list([{"a": 1}]).map(_same).filter(col("dup").is_null()).collect() == [{"a": 1}]


def test_descending_sort_prefix_is_refused():
    with pytest.raises(ValueError, match=r"sort_by='-ts': a '-' prefix \(descending order\) is not supported"):
        Dataset.from_list([{"k": 1, "ts": 2}]).group_by("k", lambda k, items: list(items), sort_by="-ts")


@pytest.mark.parametrize("ext", ["jsonl.zst", "parquet", "vortex"])
def test_a_pushed_down_filter_over_an_absent_field_is_an_error(local, tmp_path, ext):
    Dataset.from_list([{"a": 1}, {"a": 5}], num_shards=1).write(str(tmp_path / f"part-{{shard}}.{ext}")).execute()
    files = str(tmp_path / f"*.{ext}")
    assert Dataset.from_files(files).filter(col("a") > 2).collect() == [{"a": 5}]
    assert Dataset.from_files(files).filter(col("b").is_null()).count() == 2
    with pytest.raises(BadInputError, match=r"the filter \(col\(\"b\"\) > 2\) reads field\(s\) 'b'"):
        Dataset.from_files(files).filter(col("b") > 2).collect()
