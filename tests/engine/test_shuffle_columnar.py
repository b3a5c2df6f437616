"""The columnar shuffle: Arrow batches scattered whole stay Arrow through sort, spill and merge, and the
reducer sees the same groups, in the same order, as with pickled dict records."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import Dataset, execution
from zephyr.engine.shuffle import ScatterWriter, ShuffleSpec, iter_groups, merged_blocks

MB = 1 << 20


def _records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "user": rng.choice(["ann", "bob", "c\x00d", "", "émile"]) + str(rng.randrange(60)),
            "ts": rng.randrange(50),  # many ties: ties must keep input order
            "i": i,
            "payload": "p" * rng.randrange(0, 120),
            "score": rng.random() if i % 7 else None,
        }
        for i in range(n)
    ]


def _write_parts(tmp_path, records: list[dict], parts: int) -> str:
    bounds = [len(records) * p // parts for p in range(parts + 1)]
    for p in range(parts):
        chunk = records[bounds[p] : bounds[p + 1]]
        pq.write_table(pa.Table.from_pylist(chunk), tmp_path / f"part-{p}.parquet", row_group_size=300)
    return str(tmp_path / "*.parquet")


def _summary(user, items):
    rows = list(items)
    return {"user": user, "ids": [r["i"] for r in rows], "rows": rows}


@pytest.mark.parametrize("budget", [64 * MB, 16 * MB])
def test_columnar_group_by_equals_the_pickled_dict_path(tmp_path, budget):
    """Field keys over parquet (columnar runs) and over the same dicts from a list (pickled runs), and key
    functions over parquet: the same groups, the same records, the same order of groups and of items."""
    records = _records(6000, 1)
    pattern = _write_parts(tmp_path, records, 3)
    with execution(backend="local", scratch=str(tmp_path / "scratch"), memory_per_worker=budget, summary=False):
        columnar = Dataset.from_files(pattern).group_by("user", _summary, sort_by="ts", num_shards=3).collect()
        by_fns = (
            Dataset.from_files(pattern)
            .group_by(lambda r: r["user"], _summary, sort_by=lambda r: r["ts"], num_shards=3)
            .collect()
        )
        pickled = (
            Dataset.from_list(records, num_shards=3).group_by("user", _summary, sort_by="ts", num_shards=3).collect()
        )
    assert columnar == pickled == by_fns
    assert len(columnar) == len({r["user"] for r in records})
    for group in columnar:  # sort order, ties in input order
        want = sorted((r for r in records if r["user"] == group["user"]), key=lambda r: r["ts"])
        assert group["rows"] == want


def test_columnar_runs_hold_record_fields_not_pickles(tmp_path):
    """The run files of a field-keyed scatter carry the records' own columns (a struct), and a tiny
    memory budget (many runs, intermediate merges on disk) still gives every record back once, in order."""
    records = _records(5000, 2)
    table = pa.Table.from_pylist(records)
    writer = ScatterWriter(
        ShuffleSpec(1, key=_col("user"), sort_by=_col("ts")), str(tmp_path / "runs"), shard=0, flush_bytes=64 << 10
    )
    for batch in table.to_batches(max_chunksize=500):
        writer.add_batch(batch)
    runs = writer.close()
    assert len(runs) > 4 and all(run.value_type.startswith("struct<") for run in runs)
    assert pa.types.is_struct(pa.ipc.open_file(runs[0].url).schema.field("value").type)
    blocks = merged_blocks(runs, 0, memory_budget=1 << 20, spill_dir=str(tmp_path / "spill"))
    groups = {key: list(items) for key, items in iter_groups(blocks)}
    assert any((tmp_path / "spill").iterdir()), "no intermediate merge ran"
    for user, items in groups.items():
        assert items == sorted((r for r in records if r["user"] == user), key=lambda r: r["ts"])
    assert sum(map(len, groups.values())) == len(records)


def test_files_of_different_schemas_keep_their_own_fields(tmp_path):
    """One file lacks a column: its records reach the reducer without that field (as from the dict path),
    not with a None filled in."""
    pq.write_table(pa.table({"k": [1, 2, 1], "a": ["x", "y", "z"]}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"k": [1, 2], "a": ["u", "v"], "extra": [5, 6]}), tmp_path / "part-1.parquet")
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False):
        got = Dataset.from_files(str(tmp_path / "*.parquet")).group_by("k", lambda k, items: (k, list(items))).collect()
    assert sorted(got) == [
        (1, [{"k": 1, "a": "x"}, {"k": 1, "a": "z"}, {"k": 1, "a": "u", "extra": 5}]),
        (2, [{"k": 2, "a": "y"}, {"k": 2, "a": "v", "extra": 6}]),
    ]


def _arrow_summary(user, batches):
    """The batch reducer form: Arrow compute over the group's batches."""
    # from dict records each batch's schema is inferred from its rows (an all-None field: null type)
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    return {"user": user, "ids": table.column("i").to_pylist(), "ts_sum": pa.compute.sum(table.column("ts")).as_py()}


@pytest.mark.parametrize("source", ["parquet", "dicts"])
def test_batch_reducer_gets_the_group_as_arrow_batches(tmp_path, monkeypatch, source):
    """group_by(..., batch=True): the reducer receives RecordBatches holding exactly the group's records
    in sort order, from columnar runs and from pickled dict runs alike; a group larger than a chunk of
    merged rows comes as several batches."""
    from zephyr.engine.shuffle import gather

    monkeypatch.setattr(gather, "_CHUNK_ROWS", 50)
    monkeypatch.setattr(gather, "_CHUNK_BYTES", 4096)
    records = _records(3000, 3)
    pattern = _write_parts(tmp_path, records, 2)
    data = Dataset.from_files(pattern) if source == "parquet" else Dataset.from_list(records, num_shards=2)

    def spy(user, batches):
        batches = list(batches)
        assert all(isinstance(b, pa.RecordBatch) for b in batches)
        return {**_arrow_summary(user, iter(batches)), "batches": len(batches)}

    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False):
        got = data.group_by("user", spy, sort_by="ts", num_shards=2, batch=True).collect()
        want = data.group_by("user", _summary, sort_by="ts", num_shards=2).collect()
    assert [g["ids"] for g in got] == [g["ids"] for g in want]
    assert [g["ts_sum"] for g in got] == [sum(r["ts"] for r in g["rows"]) for g in want]
    assert max(g["batches"] for g in got) > 1


def test_batch_reducer_returning_a_table_emits_its_rows(tmp_path):
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False):
        got = (
            Dataset.from_list([{"k": i % 3, "v": i} for i in range(30)])
            .group_by("k", lambda k, batches: pa.Table.from_batches(list(batches)).slice(0, 2), sort_by="v", batch=True)
            .collect()
        )
    assert sorted((r["k"], r["v"]) for r in got) == [(0, 0), (0, 3), (1, 1), (1, 4), (2, 2), (2, 5)]


def test_batch_reducer_over_non_dict_records_says_what_to_do(tmp_path):
    from zephyr.errors import UserCodeError

    with (
        execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False),
        pytest.raises(UserCodeError, match="needs dict records"),
    ):
        Dataset.from_list([1, 2, 3]).group_by(lambda r: r % 2, lambda k, b: None, batch=True).collect()


def _col(name):
    from zephyr.engine.expr import col

    return col(name)
