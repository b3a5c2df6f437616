"""Output patterns are checked by their real format fields before anything runs (issue #28 item 4): a
`{shard}` that str.format does not fill (doubled braces) made every shard write one file, silently."""

from __future__ import annotations

import pytest

from zephyr import Dataset, execution
from zephyr.engine.outputs import check_output_pattern


def test_escaped_shard_braces_are_refused_before_anything_runs(tmp_path):
    """The issue's case: `part-{{shard:05d}}` (nested f-strings) wrote 10 of 100 records, exit 0."""
    out = tmp_path / "out"
    records = Dataset.from_list([{"i": i} for i in range(100)], num_shards=10)
    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False),
        pytest.raises(ValueError, match=r"no \{shard\} placeholder.*doubled braces are literal text"),
    ):
        records.write_jsonl(str(out) + "/part-{{shard:05d}}.jsonl")
    assert not out.exists() and not (tmp_path / "scratch").exists()


@pytest.mark.parametrize(
    ("pattern", "partition_by", "message"),
    [
        ("out/part.jsonl", None, r"no \{shard\} placeholder"),
        ("out/part-{shrad}.jsonl", None, r"no \{shard\} placeholder"),
        ("out/part-{shard}-{part}.jsonl", None, r"placeholder\(s\) \{part\} that no shard fills"),
        ("out/part-{shard:05q}.jsonl", None, r"does not format: ValueError"),
        ("out/part-{shard.real.x}.jsonl", None, r"does not format: AttributeError"),
        ("out/part-{shard.jsonl", None, r"not a valid format string"),
        ("out/part-{}.jsonl", None, r"no \{shard\} placeholder"),
        ("out/part-{shard}.jsonl", "lang", r"no \{lang\} placeholder for partition_by='lang'"),
        ("out/{lang:>3}/part-{shard}.jsonl", "lang", r"write the partition field plainly as \{lang\}"),
        ("out/{lang}/part-{shard}-{year}.jsonl", "lang", r"\{year\} that no shard fills"),
    ],
)
def test_bad_patterns_are_refused_with_the_fix(pattern, partition_by, message):
    with pytest.raises(ValueError, match=message):
        check_output_pattern(pattern, partition_by)
    with pytest.raises(ValueError, match=message):  # Dataset.write checks it while building, lazily
        Dataset.from_list([{"lang": "en"}]).write(pattern, format="jsonl", partition_by=partition_by)


@pytest.mark.parametrize(
    ("pattern", "partition_by"),
    [
        ("out/part-{shard}.jsonl", None),
        ("out/part-{shard:05d}-of-{total:05d}.jsonl.zst", None),
        ("out/{{literal}}/part-{shard}.jsonl", None),
        ("out/{lang}/part-{shard:03d}.parquet", "lang"),
        ("out/part-{shard!r}.jsonl", None),
    ],
)
def test_good_patterns_pass(pattern, partition_by):
    check_output_pattern(pattern, partition_by)


def test_a_literal_brace_beside_a_real_shard_field_writes_one_file_per_shard(tmp_path):
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        paths = Dataset.from_list([{"i": i} for i in range(6)], num_shards=3).write_jsonl(
            str(tmp_path) + "/{{x}}-{shard}.jsonl"
        )
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["{x}-0.jsonl", "{x}-1.jsonl", "{x}-2.jsonl"]
