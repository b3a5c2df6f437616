"""The shuffle: sorted runs, external merge, and memory bounded by the budget, not the input size."""

from __future__ import annotations

import random

import pytest

from zephyr import Dataset, execution
from zephyr.engine.shuffle import ScatterWriter, ShuffleSpec, iter_groups, merged_rows
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
        ShuffleSpec(1, key=lambda r: r[0], sort_by=lambda r: r[1]), str(tmp_path / "runs"), shard=0, flush_bytes=64 << 10
    )
    for r in records:
        writer.add(r)
    runs = writer.close()
    assert len(runs) > 10
    rows = merged_rows(runs, 0, memory_budget=2 << 20, spill_dir=str(tmp_path / "spill"))
    groups = {key: [r[1] for r in items] for key, items in iter_groups(rows)}
    assert any(p.name.startswith("merge-") for p in (tmp_path / "spill").iterdir()), "no intermediate merge ran"
    expected: dict[int, list[int]] = {}
    for r in records:
        expected.setdefault(r[0], []).append(r[1])
    assert groups == {k: sorted(v) for k, v in expected.items()}


def _payload_records(shard: int):
    rng = random.Random(shard)
    for i in range(60_000):
        yield {"key": rng.randint(0, 999), "seq": i, "shard": shard, "payload": "%08d" % i * 70}


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
        baseline = Dataset.from_iterable(lambda s: iter(range(10)), num_shards=2).group_by(
            lambda x: x, lambda k, v: k
        ).execute()
        base_rss = max(s.peak_rss for s in baseline.stages)
        # 4 shards x 60k records x ~600 bytes: ~150 MB through the shuffle, several times the budget
        run = Dataset.from_iterable(_payload_records, num_shards=4).group_by(
            lambda r: r["key"], _summarize, sort_by=lambda r: r["seq"], num_shards=2
        ).execute()
    assert sum(r["count"] for r in run.outputs) == 240_000
    assert len(run.outputs) == 1000
    shuffled = run.stages[0].bytes_out
    assert shuffled > 3 * budget, f"test data too small to prove anything: {shuffled / MB:.0f} MB"
    peak = max(s.peak_rss for s in run.stages)
    assert peak < base_rss + budget + 48 * MB, (
        f"peak RSS {peak / MB:.0f} MB exceeds baseline {base_rss / MB:.0f} MB + budget {budget / MB:.0f} MB"
    )
