"""Dict records (from a map, a list, an iterable) scattered as Arrow batches: they come back to the reducer
exactly as they went in, and records that Arrow cannot give back exactly are pickled as before."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import Dataset, execution
from zephyr.engine.expr import col
from zephyr.engine.shuffle import ScatterWriter, ShuffleSpec, iter_groups, merged_blocks, records_to_batch
from zephyr.engine.shuffle import scatter as scatter_module

MB = 1 << 20


def _records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "user": rng.choice(["ann", "bob", "c\x00d", "", "émile"]) + str(rng.randrange(40)),
            "ts": rng.randrange(30),  # many ties: ties must keep input order
            "i": i,
            "score": rng.random() if i % 7 else None,
            "blob": bytes([i % 256]) * (i % 5),
            "flag": i % 3 == 0,
            "payload": "p" * rng.randrange(0, 1600),
        }
        for i in range(n)
    ]


def _summary(user, items):
    rows = list(items)
    return {"user": user, "ids": [r["i"] for r in rows], "rows": rows}


def test_records_to_batch_gives_the_records_back_exactly():
    records = _records(500, 1)
    batch = records_to_batch(records)
    assert batch is not None
    back = batch.to_pylist()
    assert back == records
    assert all(list(a) == list(b) for a, b in zip(back, records, strict=True))  # field order kept
    assert all(type(a[k]) is type(b[k]) for a, b in zip(back, records, strict=True) for k in a)  # no int -> float
    # a field that is None throughout takes the type seen before for it, so runs keep one value type
    hinted = records_to_batch([{"a": None}, {"a": None}], {"a": pa.int64()})
    assert hinted is not None and hinted.schema.field("a").type == pa.int64() and hinted.to_pylist()[0] == {"a": None}


class _Dict(dict):
    pass


@pytest.mark.parametrize(
    "records",
    [
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],  # another field order
        [{"a": 1, "b": 2}, {"a": 1}],  # a field missing (Arrow would add it as None)
        [{"a": 1}, {"a": 1, "b": 2}],  # a field more (Arrow would drop it)
        [{"a": 1}, {"a": 2.5}],  # int and float in one field (Arrow would make 1.0)
        [{"a": 1}, {"a": True}],  # int and bool
        [{"a": 1 << 70}],  # beyond 64 bits
        [{"a": (1, 2)}],  # a tuple would come back a list
        [{"a": [1, 2]}],  # nested values: pickled
        [{"a": "\ud800"}],  # a lone surrogate
        [{"a": 1}, _Dict(a=2)],  # a dict subclass
        [{1: "x"}],  # a non-str key
        [{}],
        [("a", 1)],
    ],
)
def test_records_to_batch_refuses_what_would_not_come_back_the_same(records):
    assert records_to_batch(records) is None


def _group_by(records, tmp_path, name, *, fields: bool, budget: int):
    data = Dataset.from_list(records, num_shards=2).map(lambda r: r)
    if fields:
        pipeline = data.group_by("user", _summary, sort_by="ts", num_shards=3)
    else:
        pipeline = data.group_by(lambda r: r["user"], _summary, sort_by=lambda r: r["ts"], num_shards=3)
    with execution(backend="local", scratch=str(tmp_path / name), memory_per_worker=budget, summary=False):
        return pipeline.collect()


@pytest.mark.parametrize("fields", [True, False])
@pytest.mark.parametrize("odd_record", [False, True])
def test_group_by_over_dict_records_equals_the_pickled_path(tmp_path, monkeypatch, fields, odd_record):
    """dicts from a map, scattered as Arrow batches (several flushes: a small budget), against the same
    pipeline with every record pickled (the old path): the same groups, records and order of items. With
    an odd record midway (a nested field), the shard falls back to pickling from there on, still equal."""
    records = _records(12000, 2)  # ~5 MB per source shard: more than one flush (a fourth of the budget)
    if odd_record:
        records[3100] = {**records[3100], "payload": ["not", "flat"]}
    columnar = _group_by(records, tmp_path, "columnar", fields=fields, budget=16 * MB)
    monkeypatch.setattr(scatter_module, "records_to_batch", lambda records, types=None: None)
    pickled = _group_by(records, tmp_path, "pickled", fields=fields, budget=16 * MB)
    assert columnar == pickled
    assert sum(len(g["ids"]) for g in columnar) == len(records)
    assert all(list(r) == list(records[r["i"]]) for g in columnar for r in g["rows"])  # field order


def test_dict_records_make_columnar_runs(tmp_path):
    """The scatter's runs hold the records' fields (an Arrow struct value column), not pickles, and a
    gather gives the dicts back with their types."""
    records = _records(3000, 3)
    writer = ScatterWriter(ShuffleSpec(2, key=col("user"), sort_by=col("ts")), str(tmp_path), shard=0, flush_bytes=MB)
    for record in records:
        writer.add(record)
    runs = writer.close()
    assert runs and all(run.value_type.startswith("struct<") for run in runs)
    got = {}
    for target in range(2):
        blocks = merged_blocks(runs, target, memory_budget=8 * MB, spill_dir=str(tmp_path / "spill"))
        got.update({key: list(items) for key, items in iter_groups(blocks)})
    want: dict[str, list] = {}
    for record in sorted(records, key=lambda r: r["ts"]):
        want.setdefault(record["user"], []).append(record)
    assert got == want


def test_sort_of_a_parquet_input_spreads_the_key_ranges(tmp_path):
    """Dataset.sort over a columnar file (its batches go to the scatter whole) routes each record to its
    key range, as it does for records: before, every record landed in one shard."""
    rng = random.Random(5)
    for part in range(2):
        rows = [{"k": rng.randrange(10**6), "i": i} for i in range(2000)]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"part-{part}.parquet")
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False):
        paths = (
            Dataset.from_files(str(tmp_path / "*.parquet"))
            .sort("k", num_shards=4)
            .write_parquet(str(tmp_path / "out" / "part-{shard:05d}.parquet"))
        )
    shards = [pq.read_table(p)["k"].to_pylist() for p in sorted(paths)]
    assert sum(map(len, shards)) == 4000
    assert all(800 < len(s) < 1200 for s in shards), [len(s) for s in shards]
    flat = [k for s in shards for k in s]
    assert flat == sorted(flat)  # each shard in order, and shard i's keys before shard i+1's
