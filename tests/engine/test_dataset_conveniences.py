"""take/show/schema/union/sort and map_batches batch formats (issue #19 item 4), on real backends."""

from __future__ import annotations

import itertools
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import Dataset, execution
from zephyr.engine.io import read_records


@pytest.fixture
def processes(scratch):
    with execution(backend="processes", workers=2, scratch=scratch, summary=False, progress=False):
        yield


@pytest.fixture
def local(scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        yield


def _records(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"id": i, "k": rng.randint(-500, 500), "name": rng.choice(["a", "bb", "", "c\x00d", "zz"])} for i in range(n)
    ]


def test_sort_writes_globally_ordered_shards(processes, tmp_path):
    records = _records(3000)
    paths = (
        Dataset.from_list(records, num_shards=6)
        .sort("k", num_shards=4)
        .write_jsonl(str(tmp_path / "sorted" / "part-{shard:05d}.jsonl"))
    )
    shards = [[r["k"] for r in read_records(p)] for p in sorted(paths)]
    assert len(shards) == 4 and sum(map(len, shards)) == 3000
    assert sum(1 for s in shards if s) >= 3, "range partitioning spreads the keys over the shards"
    for shard in shards:
        assert shard == sorted(shard)
    for left, right in itertools.pairwise(shards):
        if left and right:
            assert left[-1] <= right[0]  # shard i's keys all come before shard i+1's
    assert [k for s in shards for k in s] == sorted(r["k"] for r in records)


def test_sort_descending_on_a_composite_key_with_strings(processes):
    records = _records(1000, seed=3)

    def key(r: dict) -> tuple:
        return r["name"], r["k"]

    out = Dataset.from_list(records, num_shards=3).sort(key, descending=True, num_shards=3).collect()
    assert [key(r) for r in out] == sorted(map(key, records), reverse=True)
    assert sorted(r["id"] for r in out) == list(range(1000))


def test_sort_of_an_empty_dataset(local):
    assert Dataset.from_list([]).sort("k").collect() == []


def test_union_keeps_every_record_of_every_input(processes, tmp_path):
    files = tmp_path / "in"
    files.mkdir()
    (files / "a.jsonl").write_text("".join(json.dumps({"id": f"file-{i}"}) + "\n" for i in range(50)))
    left = Dataset.from_list([{"id": f"list-{i}"} for i in range(30)], num_shards=3)
    right = Dataset.from_files(str(files / "*.jsonl")).map(lambda r: {"id": r["id"].upper()})
    third = Dataset.from_list([{"id": "x"}]).group_by("id", lambda key, items: {"id": f"group-{key}"})
    out = left.union(right, third, num_shards=4).collect()
    assert sorted(r["id"] for r in out) == sorted(
        [f"list-{i}" for i in range(30)] + [f"FILE-{i}" for i in range(50)] + ["group-x"]
    )
    assert left.union().collect() == left.collect()


def test_take_show_and_schema(local, tmp_path, capsys):
    records = _records(100)
    ds = Dataset.from_list(records, num_shards=4)
    assert ds.take(3) == records[:3] and ds.take(0) == [] and len(ds.take(1000)) == 100
    ds.show(2)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == records[:2]
    assert ds.schema() == pa.schema([("id", pa.int64()), ("k", pa.int64()), ("name", pa.string())])
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array([1, 2], pa.int32()), "b": ["x", "y"]}), path)
    assert Dataset.from_files(str(path)).schema() == pa.schema([("a", pa.int32()), ("b", pa.string())])
    assert Dataset.from_files(str(path), columns=["b"]).schema() == pa.schema([("b", pa.string())])


@pytest.mark.parametrize("batch_format", ["pandas", "polars"])
def test_map_batches_with_dataframes(processes, tmp_path, batch_format):
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": list(range(500)), "text": [f"doc {i}" for i in range(500)]}), path)
    if batch_format == "pandas":

        def fn(df):
            assert type(df).__module__.startswith("pandas")
            return df.assign(length=df["text"].str.len())
    else:

        def fn(df):
            import polars as pl

            assert isinstance(df, pl.DataFrame)
            return df.with_columns(pl.col("text").str.len_chars().alias("length"))

    out = Dataset.from_files(str(path)).map_batches(fn, batch_size=64, batch_format=batch_format).collect()
    assert [(r["id"], r["length"]) for r in out] == [(i, len(f"doc {i}")) for i in range(500)]


def test_map_batches_rejects_an_unknown_format():
    with pytest.raises(ValueError, match="batch_format must be one of pyarrow, pandas, polars"):
        Dataset.from_list([1]).map_batches(lambda b: b, batch_format="numpy")
