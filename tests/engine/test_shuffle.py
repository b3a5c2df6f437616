"""The shuffle: sorted runs, external merge, and memory bounded by the budget, not the input size."""

from __future__ import annotations

import os
import random

import pytest

from zephyr import Dataset, execution
from zephyr.engine.shuffle import ScatterWriter, ShuffleSpec, iter_groups, merged_blocks
from zephyr.engine.sortkey import decode, encode

MB = 1 << 20


def test_sortkey_order_matches_python_order():
    rng = random.Random(0)
    ints = [rng.randint(-(2**63), 2**63 - 1) for _ in range(500)] + [0, -1, 1]
    floats = [rng.uniform(-1e12, 1e12) for _ in range(500)] + [0.0, -0.0, float("inf"), float("-inf")]
    strings = ["".join(rng.choice("ab\x00é😀") for _ in range(rng.randint(0, 6))) for _ in range(500)]
    tuples = [(rng.randint(0, 3), rng.choice(["x", "xy", ""])) for _ in range(300)]
    for values in (ints, floats, strings, tuples):
        assert sorted(values, key=encode) == sorted(values)
        assert [decode(encode(v)) for v in values] == values


def test_external_merge_when_runs_exceed_fan_in(tmp_path):
    # tiny flushes make many runs; a tiny budget forces intermediate merges on disk
    rng = random.Random(1)
    records = [(rng.randint(0, 50), rng.randint(0, 10_000), "x" * 200) for _ in range(5000)]
    writer = ScatterWriter(
        ShuffleSpec(1, key=lambda r: r[0], sort_by=lambda r: r[1]),
        str(tmp_path / "runs"),
        shard=0,
        flush_bytes=64 << 10,
    )
    for r in records:
        writer.add(r)
    runs = writer.close()
    assert len(runs) > 10
    blocks = merged_blocks(runs, 0, memory_budget=2 << 20, spill_dir=str(tmp_path / "spill"))
    groups = {key: [r[1] for r in items] for key, items in iter_groups(blocks)}
    assert any(p.name.startswith("merge-") for p in (tmp_path / "spill").iterdir()), "no intermediate merge ran"
    expected: dict[int, list[int]] = {}
    for r in records:
        expected.setdefault(r[0], []).append(r[1])
    assert groups == {k: sorted(v) for k, v in expected.items()}


def _payload_records(shard: int):
    rng = random.Random(shard)
    for i in range(60_000):
        yield {"key": rng.randint(0, 999), "seq": i, "shard": shard, "payload": f"{i:08d}" * 70}


def _summarize(key, items):
    count = 0
    last = -1
    for r in items:
        assert r["seq"] >= last
        last = r["seq"]
        count += 1
    return {"key": key, "count": count}


@pytest.mark.timeout(300)
def test_group_by_larger_than_budget_stays_within_memory(scratch):
    budget = 32 * MB
    with execution(backend="processes", workers=2, scratch=scratch, memory_per_worker=budget, summary=False):
        baseline = (
            Dataset.from_iterable(lambda s: iter(range(10)), num_shards=2)
            .group_by(lambda x: x, lambda k, v: k)
            .execute()
        )
        base_rss = max(s.peak_rss for s in baseline.stages)
        # 4 shards x 60k records x ~600 bytes: ~150 MB through the shuffle, several times the budget
        run = (
            Dataset.from_iterable(_payload_records, num_shards=4)
            .group_by(lambda r: r["key"], _summarize, sort_by=lambda r: r["seq"], num_shards=2)
            .execute()
        )
    assert sum(r["count"] for r in run.outputs) == 240_000
    assert len(run.outputs) == 1000
    shuffled = run.stages[0].bytes_out
    assert shuffled > 3 * budget, f"test data too small to prove anything: {shuffled / MB:.0f} MB"
    peak = max(s.peak_rss for s in run.stages)
    assert peak < base_rss + budget + 48 * MB, (
        f"peak RSS {peak / MB:.0f} MB exceeds baseline {base_rss / MB:.0f} MB + budget {budget / MB:.0f} MB"
    )


def test_encode_column_gives_the_bytes_of_encode():
    import pyarrow as pa

    from zephyr.engine.sortkey import encode_column

    columns = [
        pa.array([0, -1, 7, 2**63 - 1, -(2**63)], pa.int64()),
        pa.array([3, -3], pa.int8()),
        pa.array([0, 2**32 - 1], pa.uint32()),
        pa.array([2**64 - 1, 1], pa.uint64()),  # beyond int64: the generic path
        pa.array(["", "a", "b\x00c", "héllo", "z" * 40]),
        pa.array(["x"], pa.large_string()),
        pa.array([1, None], pa.int64()),  # nulls: the generic path
        pa.array([1.5, -0.0, None]),
        pa.array([b"\x00\x01", b""], pa.binary()),
    ]
    for values in columns:
        assert encode_column(values) == [encode(v) for v in values.to_pylist()], values.type


def test_group_by_on_fields_scatters_arrow_batches_and_matches_key_functions(tmp_path, monkeypatch):
    """group_by("user", sort_by="ts") over parquet: whole batches go into the shuffle (ScatterWriter.add
    is never called), and the output equals the same group_by written with key functions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(5)
    for part in range(3):  # three files, three shards; one lacks the ts column (missing -> None)
        n = 700
        table = {
            "user": [
                rng.choice(["ann", "bob", "c\x00d", "dee", "", "émile"]) + str(rng.randrange(40)) for _ in range(n)
            ],
            "n": [rng.randrange(-5, 5) for _ in range(n)],
        }
        if part != 2:
            table["ts"] = [rng.randrange(1000) for _ in range(n)]
        pq.write_table(pa.table(table), tmp_path / f"part-{part}.parquet", row_group_size=256)

    def summary(user, items):
        rows = list(items)
        return {"user": user, "count": len(rows), "ts": [r.get("ts") for r in rows], "n": [r["n"] for r in rows]}

    files = Dataset.from_files(str(tmp_path / "*.parquet"))
    with execution(backend="local", scratch=str(tmp_path / "scratch"), memory_per_worker=16 << 20):
        want = files.group_by(lambda r: r["user"], summary, sort_by=lambda r: r.get("ts"), num_shards=4).collect()

        def no_per_record_add(self, record):
            raise AssertionError("the field-keyed group_by took the per-record path")

        monkeypatch.setattr(ScatterWriter, "add", no_per_record_add)
        got = files.group_by("user", summary, sort_by="ts", num_shards=4).collect()
        by_int = (
            Dataset.from_files(str(tmp_path / "*.parquet"))
            .group_by("n", lambda k, items: (k, sum(1 for _ in items)))
            .collect()
        )
    assert got == want and len(got) > 100
    assert sorted(by_int) == sorted((k, sum(1 for r in want for v in r["n"] if v == k)) for k in range(-5, 5))


# ------------------------------------------------------------------------------------- the merge
def _runs_of(records, tmp_path, *, key, sort_by=None, flush_bytes=16 << 10, shards=3):
    """Scatter `records` over `shards` writers into one target: many small sorted runs."""
    runs = []
    for shard in range(shards):
        writer = ScatterWriter(
            ShuffleSpec(1, key=key, sort_by=sort_by),
            str(tmp_path / f"runs-{shard}"),
            shard=shard,
            flush_bytes=flush_bytes,
        )
        for record in records[shard::shards]:
            writer.add(record)
        runs += writer.close()
    return runs


def _reference_rows(runs):
    """The merge's definition: every row of every run, ordered by (key hash, key, sort key), ties by
    run index and then by the row's place in its run (Python's sort is stable)."""
    import pyarrow as pa

    rows = []
    for run in runs:
        first, end, _, _ = run.segments[0]
        reader = pa.ipc.open_file(run.url)
        for i in range(first, end):
            batch = reader.get_batch(i)
            rows += zip(*(batch.column(name).to_pylist() for name in ("khash", "key", "sort", "value")), strict=False)
    return sorted(rows, key=lambda r: r[:3])


def _merged_rows(runs, tmp_path, budget):
    rows = []
    for block in merged_blocks(runs, 0, memory_budget=budget, spill_dir=str(tmp_path / "spill")):
        rows += zip(*(block.column(name).to_pylist() for name in ("khash", "key", "sort", "value")), strict=False)
    return rows


@pytest.mark.parametrize("budget", [64 * MB, 2048], ids=["one-merge", "spilled"])
def test_merge_order_is_key_then_sort_then_run_then_row(tmp_path, monkeypatch, budget):
    """Few keys and sort keys: ties in (key, sort key) within runs and across runs. Tiny batches so runs
    hold many and groups span batches; a 2 KB budget (fan-in 2) makes intermediate merges spill to disk."""
    from zephyr.engine.shuffle import gather, runs

    monkeypatch.setattr(runs, "BATCH_BYTES", 256)  # run batch size (batch_edges)
    monkeypatch.setattr(gather, "BATCH_BYTES", 256)  # merge fan-in
    rng = random.Random(7)
    records = [(rng.randint(0, 6), rng.randint(0, 3), i) for i in range(4000)]
    runs = _runs_of(records, tmp_path, key=lambda r: r[0], sort_by=lambda r: r[1], flush_bytes=8 << 10)
    assert len(runs) > 20
    got = _merged_rows(runs, tmp_path, budget)
    assert got == _reference_rows(runs)
    spilled = (tmp_path / "spill").exists() and any((tmp_path / "spill").iterdir())
    assert spilled == (budget == 2048)


def test_merge_with_colliding_key_hashes_keeps_keys_apart(tmp_path, monkeypatch):
    """Distinct keys with one hash (forced): the merge and the group walk compare the keys themselves."""
    from zephyr.engine.shuffle import gather, runs, scatter

    monkeypatch.setattr(scatter, "key_hash", lambda key_bytes: len(key_bytes) % 2)
    monkeypatch.setattr(runs, "BATCH_BYTES", 512)  # run batch size (batch_edges)
    monkeypatch.setattr(gather, "BATCH_BYTES", 512)  # merge fan-in
    rng = random.Random(3)
    records = [(rng.choice(["a", "b", "cc", "dd", "e" * 5]), rng.randint(0, 2), i) for i in range(3000)]
    runs = _runs_of(records, tmp_path, key=lambda r: r[0], sort_by=lambda r: r[1])
    assert _merged_rows(runs, tmp_path, 64 * MB) == _reference_rows(runs)
    blocks = merged_blocks(runs, 0, memory_budget=MB, spill_dir=str(tmp_path / "s"))
    groups = [(key, list(items)) for key, items in iter_groups(blocks)]
    assert [key for key, _ in groups] == sorted({r[0] for r in records}, key=lambda k: (len(encode(k)) % 2, encode(k)))
    in_run_order = [r for shard in range(3) for r in records[shard::3]]  # a shard's runs are in input order
    for key, items in groups:
        assert items == sorted((r for r in in_run_order if r[0] == key), key=lambda r: r[1])  # stable: ties keep it


def test_iter_groups_over_mixed_and_none_keys_matches_a_plain_sort(tmp_path, monkeypatch):
    """Keys of several types (None, bool, int, float, str, bytes, tuple) and None sort keys in one shuffle;
    a reducer may leave a group's values unread (the next group still starts right)."""
    from zephyr.engine.shuffle import gather, runs, scatter

    monkeypatch.setattr(runs, "BATCH_BYTES", 1024)  # run batch size (batch_edges)
    monkeypatch.setattr(gather, "BATCH_BYTES", 1024)  # merge fan-in
    rng = random.Random(11)
    pool = [None, True, 0, 1, -5, 2.5, "x", "", ("t", 1), ("t", None), b"\x00b"]
    records = [{"k": rng.choice(pool), "s": rng.choice([None, 1, 2]), "i": i} for i in range(3000)]
    runs = _runs_of(records, tmp_path, key=lambda r: r["k"], sort_by=lambda r: r["s"], flush_bytes=4 << 10)
    got = []
    blocks = merged_blocks(runs, 0, memory_budget=MB, spill_dir=str(tmp_path / "s"))
    for n, (key, items) in enumerate(iter_groups(blocks)):
        if n % 3 == 1:
            got.append((key, [next(items)["i"]]))  # read one value, leave the rest unread
        else:
            got.append((key, [r["i"] for r in items]))
    in_run_order = [r for shard in range(3) for r in records[shard::3]]  # a shard's runs are in input order
    by_key: dict[bytes, list[dict]] = {}
    for r in sorted(in_run_order, key=lambda r: encode(r["s"])):  # stable: ties keep run order
        by_key.setdefault(encode(r["k"]), []).append(r)
    hash_order = sorted(by_key, key=lambda k: (scatter.key_hash(k), k))
    # True and 1 are one key (True == 1), so the pool of 11 values holds 10 keys
    assert [encode(key) for key, _ in got] == hash_order and len(got) == len(pool) - 1
    for n, (key, ids) in enumerate(got):
        want = [r["i"] for r in by_key[encode(key)]]
        assert ids == (want[:1] if n % 3 == 1 else want), key
        assert type(key) is type(by_key[encode(key)][0]["k"])


def test_ties_across_shards_keep_input_order(tmp_path):
    """Equal keys and sort keys from different shards come out in shard order (the runs' order), not in
    the order of their pickled bytes: deduplicate keeps the first record in input order."""
    values = ["zz shard 0", "aa shard 1", "mm shard 2"]
    shards = {shard: [{"k": 1, "s": 0, "v": v}] for shard, v in enumerate(values)}
    source = Dataset.from_iterable(lambda shard: iter(shards[shard]), num_shards=3)
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False):
        first = source.deduplicate(lambda r: r["k"]).collect()
        ordered = source.group_by(
            lambda r: r["k"], lambda k, items: [r["v"] for r in items], sort_by=lambda r: r["s"]
        ).collect()
    assert first == [shards[0][0]]
    assert ordered == [values]


def test_combiner_that_emits_nothing_leaves_no_run(tmp_path):
    """A combiner returning None for every key empties the flush: no run file, no records, no crash."""
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False):
        out = Dataset.from_list(list(range(10))).group_by(
            lambda r: r % 3, lambda k, items: k, combiner=lambda k, items: None
        )
        assert out.collect() == []


@pytest.mark.parametrize("chunk_rows, chunk_bytes", [(7, 4096), (100_000, 700), (1, 1 << 30)])
def test_group_walk_over_joined_and_cut_blocks_gives_the_same_groups(tmp_path, monkeypatch, chunk_rows, chunk_bytes):
    """The group walk joins small merged blocks and cuts large ones; groups then span chunks, and come out
    the same whichever way the rows were chunked."""
    from zephyr.engine.shuffle import gather

    rng = random.Random(5)
    records = [(rng.randint(0, 40), rng.randint(0, 3), i, "v" * rng.randint(0, 80)) for i in range(3000)]
    runs = _runs_of(records, tmp_path, key=lambda r: r[0], sort_by=lambda r: r[1])

    def groups():
        blocks = merged_blocks(runs, 0, memory_budget=64 * MB, spill_dir=str(tmp_path / "s"))
        return [(key, [r[2] for r in items]) for key, items in iter_groups(blocks)]

    want = groups()
    monkeypatch.setattr(gather, "_CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(gather, "_CHUNK_BYTES", chunk_bytes)
    assert groups() == want
    in_run_order = [r for shard in range(3) for r in records[shard::3]]
    for key, ids in want:
        assert ids == [r[2] for r in sorted((r for r in in_run_order if r[0] == key), key=lambda r: r[1])]


def _skewed_records(shard: int):
    """40% of the records under one key ("giant"), the rest spread over 500 keys; ~600 bytes each."""
    rng = random.Random(100 + shard)
    for i in range(50_000):
        key = "giant" if rng.random() < 0.4 else rng.randint(0, 499)
        yield {"key": key, "seq": i, "shard": shard, "payload": f"{i:08d}" * 70}


@pytest.mark.timeout(300)
def test_giant_key_streams_within_the_budget_and_is_reported(scratch):
    """One key holding 40% of ~125 MB of records (its group alone ~50 MB, over a 32 MB budget): its group streams to the
    reducer (peak RSS stays within baseline + budget + a fixed 48 MB, as for a balanced group_by) and the
    run's counters name it with its exact record count and bytes."""
    budget = 32 * MB
    with execution(backend="processes", workers=2, scratch=scratch, memory_per_worker=budget, summary=False):
        baseline = (
            Dataset.from_iterable(lambda s: iter(range(10)), num_shards=2)
            .group_by(lambda x: x, lambda k, v: k)
            .execute()
        )
        base_rss = max(s.peak_rss for s in baseline.stages)
        run = (
            Dataset.from_iterable(_skewed_records, num_shards=4)
            .group_by(lambda r: r["key"], _summarize, sort_by=lambda r: r["seq"], num_shards=3)
            .execute()
        )
    giant = sum(1 for shard in range(4) for r in _skewed_records(shard) if r["key"] == "giant")
    counts = {r["key"]: r["count"] for r in run.outputs}
    assert counts["giant"] == giant and sum(counts.values()) == 200_000
    assert run.counters["shuffle/giant_keys"] == 1
    assert run.counters["shuffle/giant_key/'giant'/records"] == giant
    assert run.counters["shuffle/giant_key/'giant'/bytes"] > budget
    peak = max(s.peak_rss for s in run.stages)
    assert peak < base_rss + budget + 48 * MB, f"peak RSS {peak / MB:.0f} MB, baseline {base_rss / MB:.0f} MB"


def test_target_bytes_sums_the_sidecars_per_target(tmp_path):
    from zephyr.engine.shuffle import target_bytes

    records = [(k % 3, "x" * (10 * (k % 3 + 1))) for k in range(300)]
    runs = _runs_of(records, tmp_path, key=lambda r: r[0], shards=2)
    writer_runs = []
    for shard in range(2):
        writer = ScatterWriter(
            ShuffleSpec(3, key=lambda r: r[0]), str(tmp_path / f"t-{shard}"), shard=shard, flush_bytes=4096
        )
        for r in records[shard::2]:
            writer.add(r)
        writer_runs.append(writer.close())
    sizes = target_bytes(writer_runs, 3)
    from zephyr.engine.shuffle.runs import key_hash

    want = [0, 0, 0]
    for key, payload in records:
        import pickle

        want[key_hash(encode(key)) % 3] += len(encode(key)) + len(pickle.dumps((key, payload), protocol=5))
    assert sizes == want and len(runs) > 0


def test_plan_tasks_splits_only_targets_above_the_limit():
    from zephyr.engine.shuffle import ReducePiece, plan_tasks

    assert plan_tasks([100 * MB, 90 * MB, 110 * MB, 95 * MB], workers=2) is None  # balanced: one task per target
    assert plan_tasks([0, 0], workers=2) is None
    assert plan_tasks([30 * MB, 60 * MB], workers=2) is None  # small: never split
    tasks = plan_tasks([10 * MB, 10 * MB, 500 * MB, 10 * MB], workers=2)
    assert all(len(task) == 1 for task in tasks)  # 4 targets, 2 workers: too few to pack
    pieces = [task[0] for task in tasks]
    big = [p for p in pieces if p.target == 2]
    assert len(big) == 3 and [p for p in pieces if p.target != 2] == [ReducePiece(t) for t in (0, 1, 3)]
    assert big[0].lo == 0 and big[-1].hi == 1 << 64
    assert all(a.hi == b.lo for a, b in zip(big, big[1:], strict=False))  # contiguous key-hash ranges, in order
    assert [p.target for p in pieces] == sorted(p.target for p in pieces)  # targets in order


def test_plan_tasks_packs_small_neighbouring_targets():
    """More than 4 targets per worker: neighbours are joined up to total / (4 x workers) bytes (empty ones
    too), a target of that size or more stays alone, a large one is still split; every target is in
    exactly one task, in target order."""
    from zephyr.engine.shuffle import ReducePiece, plan_tasks, task_bytes

    sizes = [4 * MB] * 24 + [0] * 8  # 96 MB over 32 targets, 2 workers: tasks of at most 12 MB
    tasks = plan_tasks(sizes, workers=2)
    assert [len(task) for task in tasks] == [3] * 7 + [3 + 8]  # the empty ones join the last pack
    assert [p.target for task in tasks for p in task] == list(range(32))
    assert all(p.khash_range is None for task in tasks for p in task)
    assert max(task_bytes(sizes, task) for task in tasks) == 12 * MB
    skewed = [2 * MB] * 20 + [600 * MB] + [2 * MB] * 19  # one target of 600 MB beside 39 of 2 MB
    tasks = plan_tasks(skewed, workers=2)
    split = [task for task in tasks if task[0].target == 20]
    assert len(split) == 3 and all(len(task) == 1 for task in split)  # limit 3/4 x 678 / 2 = 254 MB: 3 pieces
    assert [task[0] for task in split][0] == ReducePiece(20, 0, (1 << 64) // 3)
    assert abs(sum(task_bytes(skewed, task) for task in tasks) - sum(skewed)) < 3  # pieces share it (rounded)
    assert len(tasks) == 3 + 2  # the 20 small targets before the big one in one task, the 19 after in another
    assert [p.target for task in tasks for p in task if p.khash_range is None] == [t for t in range(40) if t != 20]


@pytest.mark.parametrize("columnar", [False, True])
def test_split_targets_give_the_same_groups_in_the_same_order(tmp_path, monkeypatch, columnar):
    """A skewed target split into key-hash ranges (forced by a tiny split limit and tiny run batches, so
    ranges start mid-run and batches are skipped): the same groups, items and output order as one task
    per target, and more reduce tasks than targets (one output file each)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from zephyr.engine import shuffle
    from zephyr.engine.shuffle import gather, pieces, runs

    rng = random.Random(9)
    records = [
        {"k": 0 if rng.random() < 0.3 else rng.randint(1, 400), "s": rng.randint(0, 5), "i": i} for i in range(6000)
    ]
    for part in range(2):
        pq.write_table(pa.Table.from_pylist(records[part::2]), tmp_path / f"part-{part}.parquet")
    data = Dataset.from_files(str(tmp_path / "*.parquet")) if columnar else Dataset.from_list(records, num_shards=2)

    def reducer(key, items):
        return {"k": key, "ids": [r["i"] for r in items]}

    def run(name):
        with execution(backend="local", scratch=str(tmp_path / name), summary=False):
            pipeline = data.group_by("k", reducer, sort_by="s", num_shards=2)
            return pipeline.collect(), pipeline.write(
                str(tmp_path / name / "out" / "part-{shard:05d}.parquet")
            ).execute()

    whole, whole_run = run("whole")
    from zephyr.engine import executor

    monkeypatch.setattr(pieces, "_SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(runs, "BATCH_BYTES", 2048)  # run batch size (batch_edges)
    monkeypatch.setattr(gather, "BATCH_BYTES", 2048)  # merge fan-in
    plan = shuffle.plan_tasks
    monkeypatch.setattr(executor, "plan_tasks", lambda sizes, workers: plan(sizes, 8))  # as if 8 workers
    split, split_run = run("split")
    assert split == whole and len(whole) == len({r["k"] for r in records})
    assert len(whole_run.outputs) == 2 and len(split_run.outputs) > 2
    # one output shard per task: the stage's shard count is the number of tasks, not of planned targets
    assert split_run.stages[-1].shards == len(split_run.outputs) and whole_run.stages[-1].shards == 2
    giant = next(g for g in split if g["k"] == 0)
    assert (
        giant["ids"] == [r["i"] for r in sorted((r for r in records if r["k"] == 0), key=lambda r: r["s"])] or columnar
    )


def test_packed_and_split_reduce_tasks_name_their_files_by_task_count(tmp_path, monkeypatch):
    """40 targets on 2 workers (packed) with one key of half the records (its target split): one output
    file per task, `{total}` is the number of tasks (no part-00003-of-00040 next to 9 files), shard numbers
    run 0..total-1, StageStats.shards says the same, and the records equal those of one task per target."""
    import json

    from zephyr.engine import executor, shuffle
    from zephyr.engine.shuffle import pieces

    rng = random.Random(4)
    records = [{"k": 0 if i % 2 else rng.randrange(1, 5000), "i": i} for i in range(8000)]

    def reducer(key, items):
        return {"k": key, "ids": sorted(r["i"] for r in items)}

    def run(name):
        with execution(backend="local", workers=2, scratch=str(tmp_path / name / "scratch"), summary=False):
            out = str(tmp_path / name / "part-{shard:05d}-of-{total:05d}.jsonl")
            return Dataset.from_list(records, num_shards=2).group_by("k", reducer, num_shards=40).write(out).execute()

    monkeypatch.setattr(executor, "plan_tasks", lambda sizes, workers: None)  # one task per target
    whole = run("whole")
    plan, plans = shuffle.plan_tasks, []

    def as_if_4_workers(sizes, workers):
        plans.append(plan(sizes, 4))
        return plans[-1]

    monkeypatch.setattr(executor, "plan_tasks", as_if_4_workers)
    monkeypatch.setattr(pieces, "_SPLIT_MIN_BYTES", 1)
    packed = run("packed")
    assert any(len(task) > 1 for task in plans[-1]) and any(p.khash_range for task in plans[-1] for p in task)
    names = sorted(os.path.basename(p) for p in packed.outputs)
    total = len(names)
    assert 2 < total < 40, names
    assert names == [f"part-{i:05d}-of-{total:05d}.jsonl" for i in range(total)]
    assert packed.stages[-1].shards == total and whole.stages[-1].shards == 40 == len(whole.outputs)

    def rows(run_result):
        return sorted((r for p in run_result.outputs for r in map(json.loads, open(p))), key=lambda r: r["k"])

    assert rows(packed) == rows(whole)
    assert next(r for r in rows(packed) if r["k"] == 0)["ids"] == list(range(1, 8000, 2))


def test_run_files_survive_the_done_marker_round_trip():
    """A resumed stage reads its upstream RunFiles back from JSON done markers: segments, the value type
    and the per-batch key-hash starts (int targets) must come back as they were written."""
    from zephyr.engine import executor
    from zephyr.engine.shuffle import RunFile
    from zephyr.engine.task import ShardResult

    run = RunFile("file:///x/run-00000.arrow", {3: (0, 2, 10, 999)}, "struct<a: int64>", {3: (5, 2**63 + 7)})
    back = executor._result_from_json(json_round_trip(executor._result_to_json(ShardResult(0, 0, runs=[run]))))
    assert back.runs == [run]


def json_round_trip(data):
    import json

    return json.loads(json.dumps(data))
