"""Semantics of every Dataset operation, on the local and the processes backend."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from zephyr import Dataset, UserCodeError, counters, execution


@pytest.fixture(params=["local", "processes"])
def backend(request, scratch):
    with execution(backend=request.param, workers=2, scratch=scratch, summary=False, progress=False):
        yield request.param


@pytest.fixture
def local(scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        yield


def test_narrow_ops_keep_order(backend):
    ds = Dataset.from_list(range(20), num_shards=3)
    out = ds.map(lambda x: x * 2).filter(lambda x: x % 3 != 0).flat_map(lambda x: [x, -x]).collect()
    expected = [y for x in range(20) for y in ([2 * x, -2 * x] if (2 * x) % 3 else [])]
    assert out == expected


def test_select_take_per_shard_and_map_shard(local):
    records = [{"id": i, "text": f"t{i}", "junk": i} for i in range(10)]
    ds = Dataset.from_list(records, num_shards=2)
    assert ds.select("id", "text").take_per_shard(2).collect() == [
        {"id": 0, "text": "t0"},
        {"id": 1, "text": "t1"},
        {"id": 5, "text": "t5"},
        {"id": 6, "text": "t6"},
    ]

    def running_total(items):
        total = 0
        for r in items:
            total += r["id"]
            yield total

    assert ds.map_shard(running_total).collect() == [0, 1, 3, 6, 10, 5, 11, 18, 26, 35]


def test_map_batches_round_trips_arrow(local):
    ds = Dataset.from_list([{"x": i} for i in range(2500)], num_shards=2)

    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"x": batch.column("x"), "y": pa.compute.multiply(batch.column("x"), 2)})

    out = ds.map_batches(double, batch_size=1000).collect()
    assert out == [{"x": i, "y": 2 * i} for i in range(2500)]


def test_map_batches_rejects_non_arrow_output(local):
    ds = Dataset.from_list([{"x": 1}])
    with pytest.raises(UserCodeError, match="must return a pyarrow.RecordBatch"):
        ds.map_batches(lambda b: b.to_pylist()).collect()


def test_group_by_secondary_sort_generator_reducer(backend):
    records = [{"user": i % 7, "ts": (i * 37) % 101, "i": i} for i in range(300)]

    def sessions(user, items):
        previous = None
        for r in items:
            assert previous is None or previous <= r["ts"], "items must arrive sorted by ts"
            previous = r["ts"]
            yield {"user": user, "ts": r["ts"]}

    out = (
        Dataset.from_list(records, num_shards=4)
        .group_by(lambda r: r["user"], sessions, sort_by=lambda r: r["ts"], num_shards=3)
        .collect()
    )
    assert len(out) == 300
    by_user: dict[int, list[int]] = {}
    for r in out:
        by_user.setdefault(r["user"], []).append(r["ts"])
    for user, stamps in by_user.items():
        assert stamps == sorted(r["ts"] for r in records if r["user"] == user)


def test_group_by_descending_sort_tuple_keys_and_ties_keep_input_order(local):
    records = [{"k": ("a", i % 2), "score": i % 3, "i": i} for i in range(30)]
    out = (
        Dataset.from_list(records, num_shards=3)
        .group_by(lambda r: r["k"], lambda k, items: (k, [r["i"] for r in items]), sort_by=lambda r: -r["score"])
        .collect()
    )
    got = dict(out)
    for key in (("a", 0), ("a", 1)):
        expected = sorted((r for r in records if r["k"] == key), key=lambda r: -r["score"])  # stable sort
        assert got[key] == [r["i"] for r in expected]


def test_group_by_reducer_returning_value_or_none(local):
    ds = Dataset.from_list(range(50), num_shards=2)
    out = ds.group_by(lambda x: x % 5, lambda k, items: None if k == 0 else (k, sum(items))).collect()
    assert sorted(out) == [(k, sum(x for x in range(50) if x % 5 == k)) for k in range(1, 5)]


def test_combiner_pre_aggregates_on_map_side(backend):
    words = ["a", "b", "a", "c", "a", "b"] * 500
    seen_by_reducer = []

    def add(word, pairs):
        return word, sum(c for _, c in pairs)

    def reducer(word, pairs):
        pairs = list(pairs)
        seen_by_reducer.append(len(pairs))
        return word, sum(c for _, c in pairs)

    out = (
        Dataset.from_list(words, num_shards=3)
        .map(lambda w: (w, 1))
        .group_by(lambda p: p[0], reducer, combiner=add)
        .collect()
    )
    assert dict(out) == {"a": 1500, "b": 1000, "c": 500}


def test_combiner_really_reduces_shuffled_rows(local):
    ds = Dataset.from_list([("k", 1)] * 1000, num_shards=2)
    run = ds.group_by(
        lambda p: p[0], lambda k, ps: (k, sum(c for _, c in ps)), combiner=lambda k, ps: (k, sum(c for _, c in ps))
    ).execute()
    assert run.outputs == [("k", 1000)]
    assert run.stages[0].records_out == 1000 and run.stages[1].records_in == 2  # one row per shard


def test_deduplicate_keeps_first_in_input_order(backend):
    records = [{"h": i % 10, "i": i} for i in range(100)]
    out = Dataset.from_list(records, num_shards=4).deduplicate(lambda r: r["h"]).collect()
    assert sorted(r["i"] for r in out) == list(range(10))


def test_sorted_merge_join_inner_left_and_many_to_many(backend):
    left = Dataset.from_list([{"id": i % 4, "l": i} for i in range(8)], num_shards=2)
    right = Dataset.from_list([{"id": i, "r": i * 10} for i in (1, 2, 2, 9)], num_shards=3)
    inner = left.sorted_merge_join(right, left_key=lambda r: r["id"], right_key=lambda r: r["id"]).collect()
    expected = sorted((lv, rv) for lv in range(8) for rid, rv in ((1, 10), (2, 20), (2, 20), (9, 90)) if lv % 4 == rid)
    assert sorted((r["l"], r["r"]) for r in inner) == expected
    outer = left.sorted_merge_join(
        right,
        left_key=lambda r: r["id"],
        right_key=lambda r: r["id"],
        how="left",
        combine=lambda lrec, rrec: (lrec["l"], None if rrec is None else rrec["r"]),
    ).collect()
    assert sorted(outer, key=lambda t: (t[0], t[1] or 0)) == sorted(
        [(lv, rv) for lv, rv in expected] + [(lv, None) for lv in range(8) if lv % 4 in (0, 3)],
        key=lambda t: (t[0], t[1] or 0),
    )


def test_reshard_count_reduce(backend):
    ds = Dataset.from_list(range(1000), num_shards=3)
    assert ds.reshard(7).count() == 1000
    assert sorted(ds.reshard(7).collect()) == list(range(1000))
    assert ds.reduce(lambda a, b: a + b) == sum(range(1000))
    with pytest.raises(ValueError, match="empty"):
        Dataset.from_list([], num_shards=1).reduce(lambda a, b: a + b)


def test_counters_summed_across_workers(backend):
    def tick(x):
        counters.increment("seen")
        if x % 2:
            counters.increment("odd", 2)
        return x

    run = Dataset.from_list(range(101), num_shards=5).map(tick).execute()
    assert run.counters == {"seen": 101, "odd": 100}
    assert run.stages[0].records_out == 101


def test_from_iterable_runs_in_workers(backend):
    ds = Dataset.from_iterable(lambda shard: ({"shard": shard, "i": i} for i in range(shard + 1)), num_shards=4)
    assert ds.count() == 10
    with pytest.raises(TypeError, match="function shard_index"):
        Dataset.from_iterable([1, 2, 3])


def test_workers_follow_the_drivers_environment(monkeypatch, tmp_path):
    """A variable set or removed between runs (credentials, an emulator host) reaches the warm pool's workers,
    which were forked from a forkserver holding an older environment."""

    def read_setting(shard):
        return [{"pid": os.getpid(), "setting": os.environ.get("ZEPHYR_TEST_SETTING", "<unset>")}]

    def run(name):  # a scratch per run: the same plan again would be resumed from its checkpoints, not rerun
        with execution(backend="processes", workers=2, scratch=str(tmp_path / name), summary=False, progress=False):
            records = Dataset.from_iterable(read_setting, num_shards=4).collect()
        return {r["setting"] for r in records}, {r["pid"] for r in records}

    monkeypatch.setenv("ZEPHYR_TEST_SETTING", "first")
    settings, first_pids = run("a")
    assert settings == {"first"}
    monkeypatch.setenv("ZEPHYR_TEST_SETTING", "second")
    settings, pids = run("b")
    assert settings == {"second"} and pids <= first_pids  # the same warm workers, the new value
    monkeypatch.delenv("ZEPHYR_TEST_SETTING")
    assert run("c")[0] == {"<unset>"}


def test_user_error_names_op_shard_and_record(backend):
    def explode(record):
        if record["id"] == 13:
            raise ValueError("bad value")
        return record

    ds = Dataset.from_list([{"id": i} for i in range(20)], num_shards=2).map(explode)
    with pytest.raises(UserCodeError) as info:
        ds.collect()
    message = str(info.value)
    assert "map(explode)" in message
    assert "shard 1" in message and "record #3" in message and "{'id': 13}" in message
    assert "ValueError: bad value" in message and "Traceback" in message


def test_reducer_error_names_key(local):
    ds = Dataset.from_list(range(10)).group_by(lambda x: x % 2, lambda k, items: 1 / k)
    with pytest.raises(UserCodeError, match="for key 0: ZeroDivisionError"):
        ds.collect()


def test_flaky_user_code_is_retried_once(local, tmp_path):
    marker = tmp_path / "failed-once"

    def flaky(x):
        if x == 3 and not marker.exists():
            marker.write_text("x")
            raise RuntimeError("transient")
        return x

    run = Dataset.from_list(range(6), num_shards=2).map(flaky).execute()
    assert run.outputs == list(range(6))
    assert len(run.stages[0].retries) == 1 and "transient" in run.stages[0].retries[0]


def test_write_pattern_must_have_shard_placeholder(local, tmp_path):
    with pytest.raises(ValueError, match="no {shard} placeholder"):
        Dataset.from_list([{"a": 1}]).write_jsonl(str(tmp_path / "out.jsonl"))


def test_explain_and_dry_run(scratch, capsys):
    ds = Dataset.from_list(range(10), num_shards=2).map(abs).group_by(lambda x: x, lambda k, v: k).map(str)
    with execution(backend="local", scratch=scratch, dry_run=True):
        assert ds.collect() == []
        text = ds.explain()
    printed = capsys.readouterr().out
    assert "2 stage(s)" in printed and "stage 0 [2 shards] from_list(10) -> map(abs) -> scatter" in text
    assert "stage 1 [2 shards] group_by(" in text and "map(str)" in text


def test_plan_fingerprint_changes_with_code():
    from zephyr.engine.context import ExecutionConfig
    from zephyr.engine.plan import plan

    config = ExecutionConfig(backend="local")
    a = plan(Dataset.from_list(range(5)).map(lambda x: x + 1), config).fingerprint
    b = plan(Dataset.from_list(range(5)).map(lambda x: x + 1), config).fingerprint
    c = plan(Dataset.from_list(range(5)).map(lambda x: x + 2), config).fingerprint
    d = plan(Dataset.from_list(range(6)).map(lambda x: x + 1), config).fingerprint
    assert a == b and len({a, c, d}) == 3


def test_map_batches_unions_fields_of_all_records(local):
    out = Dataset.from_list([{"a": 1}, {"b": 2}], num_shards=1).map_batches(lambda b: b).collect()
    assert out == [{"a": 1, "b": None}, {"a": None, "b": 2}]


def test_parquet_batches_flow_straight_into_map_batches(local, tmp_path):
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": list(range(5000)), "s": [str(i) for i in range(5000)]}), tmp_path / "a.parquet")

    def inc(batch):
        assert isinstance(batch, pa.RecordBatch)
        return batch.set_column(0, "x", pa.compute.add(batch.column("x"), 1))

    def halve(batch):
        return batch.filter(pa.compute.equal(pa.compute.bit_wise_and(batch.column("x"), 1), 0))

    run = Dataset.from_files(str(tmp_path / "*.parquet")).map_batches(inc, batch_size=1000).map_batches(halve).execute()
    assert [r["x"] for r in run.outputs] == list(range(2, 5001, 2))
    assert run.stages[0].records_in == 5000 and run.stages[0].records_out == 2500
    written = (
        Dataset.from_files(str(tmp_path / "*.parquet"))
        .map_batches(inc, batch_size=1000)
        .write_parquet(str(tmp_path / "out" / "p-{shard}.parquet"))
    )
    assert pq.read_table(written[0]).column("x").to_pylist() == list(range(1, 5001))


def test_partitioned_write_splits_each_shard_by_field_in_one_pass(local, tmp_path, monkeypatch):
    import zephyr.engine.io.partitioned as partitioned

    monkeypatch.setattr(partitioned, "_PARTITION_BUFFER", 7)  # spill to disk many times over
    langs = ["en", "de", "fr", "en", "en", "de"]
    records = [{"id": i, "lang": langs[i % len(langs)], "text": f"doc {i}"} for i in range(100)]
    run = (
        Dataset.from_list(records, num_shards=3)
        .write(str(tmp_path / "{lang}" / "part-{shard:05d}.jsonl.zst"), partition_by="lang")
        .execute()
    )
    assert sorted(run.outputs) == sorted(str(p) for p in tmp_path.glob("*/part-*.jsonl.zst"))
    assert {p.parent.name for p in tmp_path.glob("*/*")} == {"en", "de", "fr"} and len(run.outputs) == 9
    for lang in ("en", "de", "fr"):
        got = Dataset.from_files(str(tmp_path / lang / "*.jsonl.zst")).collect()
        assert got == [r for r in records if r["lang"] == lang]  # shard order, then input order
    assert run.stages[-1].records_out == 100


def test_partitioned_parquet_write_from_arrow_batches(local, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": list(range(50)), "split": ["high" if i % 3 else "low" for i in range(50)]})
    pq.write_table(table, tmp_path / "in.parquet")
    out = tmp_path / "out"
    Dataset.from_files(str(tmp_path / "in.parquet")).write(
        str(out / "split={split}" / "{shard}.parquet"), partition_by="split"
    ).execute()
    high, low = pq.read_table(out / "split=high" / "0.parquet"), pq.read_table(out / "split=low" / "0.parquet")
    assert high.column("id").to_pylist() == [i for i in range(50) if i % 3] and set(
        high.column("split").to_pylist()
    ) == {"high"}
    assert low.column("id").to_pylist() == list(range(0, 50, 3))


def test_partitioned_write_errors_name_the_record(local, tmp_path):
    pattern = str(tmp_path / "{lang}" / "part-{shard}.jsonl")
    with pytest.raises(ValueError, match=r"no \{lang\} placeholder"):
        Dataset.from_list([{"lang": "en"}]).write(str(tmp_path / "part-{shard}.jsonl"), partition_by="lang")
    with pytest.raises(UserCodeError, match=r"record 2: partition_by='lang' but the record has no 'lang' field"):
        Dataset.from_list([{"lang": "en"}, {"text": "x"}]).write(pattern, partition_by="lang").execute()
    with pytest.raises(
        UserCodeError, match=r"record 1: partition_by='lang' needs a non-empty string or int without '/'"
    ):
        Dataset.from_list([{"lang": "../etc"}]).write(pattern, partition_by="lang").execute()
    assert not list(tmp_path.rglob("*.jsonl"))  # nothing half-written
