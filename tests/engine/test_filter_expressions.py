"""Expression filters after any op and on any source (issue #17 item 3)."""

from __future__ import annotations

import pytest

from zephyr import Dataset, col, execution
from zephyr.errors import BadInputError


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
    with pytest.raises(
        BadInputError, match=r"filter\(\(col\(\"b\"\) > 2\)\)\): no record has field 'b', which a filter"
    ):
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
    with pytest.raises(
        BadInputError, match=r"filter=\(col\(\"b\"\) > 2\)\)\): no record has field 'b', which a filter"
    ):
        Dataset.from_files(files).filter(col("b") > 2).collect()


@pytest.mark.parametrize("ext", ["jsonl.zst", "parquet"])
def test_a_field_some_files_lack_is_read_as_null_not_an_error(scratch, tmp_path, ext):
    """A field absent from one file only (a source without `lang`) is ordinary: judged file by file, the
    filter failed on that file although the others have the field."""
    Dataset.from_list([{"text": "a", "lang": "en"}, {"text": "b", "lang": "fr"}], num_shards=1).write(
        str(tmp_path / f"a-{{shard}}.{ext}")
    ).execute()
    Dataset.from_list([{"text": "c"}], num_shards=1).write(str(tmp_path / f"b-{{shard}}.{ext}")).execute()
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        run = Dataset.from_files(str(tmp_path / f"*.{ext}")).filter(col("lang") == "en").execute()
    assert [r["text"] for r in run.outputs] == ["a"]
    assert run.counters["fields/parts_without:lang"] == 1  # counted, and shown in the summary
    assert not [k for k in run.counters if "_parts_checked" in k]


def test_a_field_some_shards_lack_after_a_map_is_read_as_null_not_an_error(local):
    records = [{"id": i, **({"filter_reason": "short"} if i < 3 else {})} for i in range(8)]
    ds = Dataset.from_list(records, num_shards=2).map(_same).filter(col("filter_reason") == "short")
    assert sorted(r["id"] for r in ds.collect()) == [0, 1, 2]  # shard 1 (ids 4-7) has no filter_reason at all


def test_sort_with_a_minus_prefix_is_refused_with_the_descending_fix():
    """`sort("-ts")` read an absent field "-ts" (None for every record) and returned the input unsorted."""
    with pytest.raises(ValueError, match=r"key='-ts': a '-' prefix .* sort\('ts', descending=True\)"):
        Dataset.from_list([{"ts": 3}, {"ts": 1}, {"ts": 2}]).sort("-ts")


@pytest.mark.parametrize("how", ["sort", "group_by key", "group_by sort_by"])
def test_a_key_or_sort_key_field_no_record_has_is_an_error(local, how):
    """A key field no record has gave one group (None) or an unsorted result, silently."""
    ds = Dataset.from_list([{"ts": 3, "k": 1}, {"ts": 1, "k": 2}, {"ts": 2, "k": 1}], num_shards=2)
    if how == "sort":
        ds = ds.sort("nope")
    elif how == "group_by key":
        ds = ds.group_by("nope", lambda key, items: {"n": sum(1 for _ in items)})
    else:
        ds = ds.group_by("k", lambda key, items: {"n": sum(1 for _ in items)}, sort_by="nope")
    with pytest.raises(BadInputError, match=r"no record has field 'nope', which a filter, key or sort key "):
        ds.collect()


def test_a_key_field_some_records_lack_groups_them_under_none(local):
    records = [{"k": 1}, {"k": 1}, {"other": 5}]
    got = Dataset.from_list(records, num_shards=2).group_by("k", lambda key, items: {"k": key, "n": len(list(items))})
    assert sorted(got.collect(), key=lambda r: str(r["k"])) == [{"k": 1, "n": 2}, {"k": None, "n": 1}]
    assert [
        r["ts"] for r in Dataset.from_list([{"ts": 3}, {"ts": 1}, {"ts": 2}]).sort("ts", descending=True).collect()
    ] == [3, 2, 1]
