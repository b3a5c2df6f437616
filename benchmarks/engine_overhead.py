"""Engine overhead of narrow ops per record: Zephyr beside a plain Python loop over the same functions.

    .venv/bin/python benchmarks/engine_overhead.py              # 1M dict records
    .venv/bin/python benchmarks/engine_overhead.py --quick      # 200k

A chain of three cheap maps and a filter on dict records, in-process (`backend="local"`, one shard,
records generated inside the worker by `from_iterable`), ended by `count()`. The peer is the loop a
user would write by hand: `sum(1 for r in gen if keep(f3(f2(f1(r)))))` over the same generator and
functions. What Zephyr spends beyond that loop (planning, the stage pickle, reading the source, the
op chain, counting) divided by the records is the engine overhead per record. Each side runs
`--repeat` times and the best time counts. Times are CPU seconds of this process (`time.process_time`:
everything runs in it), which a shared machine disturbs far less than wall time; the load average
before and after is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zephyr import Dataset, execution


def records(n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {"id": i, "text": "x", "score": i % 7}


def add_len(record: dict[str, Any]) -> dict[str, Any]:
    record["n"] = 1
    return record


def bump(record: dict[str, Any]) -> dict[str, Any]:
    record["score"] += 1
    return record


def tag(record: dict[str, Any]) -> dict[str, Any]:
    record["tag"] = "a"
    return record


def keep(record: dict[str, Any]) -> bool:
    return record["score"] > 2


@dataclass(frozen=True)
class _Shard:
    """`from_iterable`'s shard function: picklable, generates the records inside the worker (a dataclass,
    so that `n` is part of the plan's fingerprint and runs of different sizes never share checkpoints)."""

    n: int

    def __call__(self, shard: int) -> Iterator[dict[str, Any]]:
        return records(self.n)


def plain(n: int) -> tuple[float, int]:
    started = time.process_time()
    count = sum(1 for r in records(n) if keep(tag(bump(add_len(r)))))
    return time.process_time() - started, count


def generator_only(n: int) -> float:
    started = time.process_time()
    for _ in records(n):
        pass
    return time.process_time() - started


def zephyr(n: int, scratch: str) -> tuple[float, int]:
    ds = Dataset.from_iterable(_Shard(n), num_shards=1).map(add_len).map(bump).map(tag).filter(keep)
    with execution(backend="local", scratch=scratch, progress=False, summary=False):
        started = time.process_time()
        count = ds.count()
        return time.process_time() - started, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200k records")
    args = parser.parse_args()
    n = 200_000 if args.quick else args.records
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="zephyr-bench-overhead-") as scratch:
        zephyr(10_000, scratch)  # warm-up: imports, first plan
        ours = min(zephyr(n, scratch) for _ in range(args.repeat))
        peer = min(plain(n) for _ in range(args.repeat))
        source = min(generator_only(n) for _ in range(args.repeat))
    if ours[1] != peer[1]:
        raise SystemExit(f"results differ: zephyr counted {ours[1]} records, the plain loop {peer[1]}")
    load_after = os.getloadavg()
    overhead_us = (ours[0] - peer[0]) / n * 1e6
    print(f"{n:,} dict records, 3 maps + filter + count, best of {args.repeat}, CPU seconds")
    print(f"  generating the records alone   {source:7.3f} s")
    print(f"  plain Python loop (peer)       {peer[0]:7.3f} s   {peer[0] / n * 1e6:6.3f} us/record")
    print(f"  zephyr, local backend          {ours[0]:7.3f} s   {ours[0] / n * 1e6:6.3f} us/record")
    print(f"  engine overhead                {overhead_us:6.3f} us/record ({ours[0] / peer[0]:.2f}x the plain loop)")
    print(f"  load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (1 min)")
    figures = {
        "bench": "engine_overhead",
        "records": n,
        "ours_s": round(ours[0], 3),
        "peer_s": round(peer[0], 3),
        "overhead_us_per_record": round(overhead_us, 3),
        "ratio": round(ours[0] / peer[0], 3),
        "load_1min_before": round(load_before[0], 2),
        "load_1min_after": round(load_after[0], 2),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
