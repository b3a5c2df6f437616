"""LSH candidate edges (fuzzy dedup stage 2) with a giant bucket: streamed hot buckets vs the sorted path.

Marin's fuzzy dedup lost 18+ hours to ~100 straggler reducers holding giant LSH buckets (boilerplate
pages copied millions of times). Here one page is copied into `--hot-share` of the corpus, so each of
its 14 band keys is one bucket holding that share of all documents. Three runs on the same machine:

- balanced:        no giant bucket (the reference time for this many documents);
- skewed, sorted:  the giant buckets' members are sorted in their partition's reducer (the design
                   before hot buckets: `hot_bucket_members` set beyond any bucket);
- skewed, hot:     the default: members beyond a chunk's anchors stream past the reducer.

Signatures are synthetic (random int64 band keys, 14 bands, the layout stage 1 writes), so the
benchmark measures LSH and not MinHash. Printed per run: seconds, candidate edges, peak RSS of the
largest worker process (sampled every 0.1 s) and the peak of all workers together. Both skewed runs
must give the same set of edges (checked). Last line: one JSON object.

    python benchmarks/lsh_skew.py                  # 2M documents, 30% in one bucket per band
    python benchmarks/lsh_skew.py --docs 300000    # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from engine_groupby import RssSampler  # benchmarks/ is on sys.path when this runs as a script

from zephyr import Dataset, execution
from zephyr.operators.fuzzy_dedup import FuzzyDedupConfig, lsh_candidate_edges

BANDS = 14


def write_signatures(directory: Path, docs: int, hot_share: float, files: int, seed: int = 0) -> list[str]:
    """`files` parquet files of {"id", "bands"}; a `hot_share` of documents has the same 14 keys."""
    rng = np.random.default_rng(seed)
    hot_keys = rng.integers(-(2**62), 2**62, BANDS, dtype=np.int64)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    per_file = -(-docs // files)
    for number in range(files):
        start, stop = number * per_file, min(docs, (number + 1) * per_file)
        keys = rng.integers(-(2**62), 2**62, (stop - start, BANDS), dtype=np.int64)
        keys[rng.random(stop - start) < hot_share] = hot_keys
        raw = np.ascontiguousarray(keys, dtype="<i8")
        table = pa.table(
            {
                "id": pa.array([f"doc-{i:010d}" for i in range(start, stop)]),
                "bands": pa.Array.from_buffers(pa.binary(BANDS * 8), stop - start, [None, pa.py_buffer(raw)]),
            }
        )
        path = directory / f"part-{number:05d}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def run(paths: list[str], docs: int, out: Path, scratch: Path, workers: int, memory: str, hot: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    config = FuzzyDedupConfig(hot_bucket_members=hot)
    with (
        execution(
            backend="processes",
            workers=workers,
            memory_per_worker=memory,
            scratch=str(scratch),
            progress=False,
            summary=False,
        ),
        RssSampler("children", interval=0.1) as rss,
    ):
        started = time.perf_counter()
        edge_paths, found = lsh_candidate_edges(paths, docs, config=config, out_dir=str(out))
        seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "edges": found.get("fuzzy_dedup/candidate_edges_emitted", 0),
        "hot_members": found.get("fuzzy_dedup/hot_bucket_members", 0),
        "peak_worker_mb": rss.peak_worker / 2**20,
        "peak_workers_mb": (rss.peak_total - rss.peak_driver) / 2**20,
        "paths": edge_paths,
    }


def edge_set(paths: list[str]) -> set[tuple[str, str]]:
    with execution(backend="local", progress=False, summary=False):
        edges = Dataset.from_files(paths, format="parquet", columns=["a", "b"]).collect()
    return {(r["a"], r["b"]) for r in edges}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2_000_000)
    parser.add_argument("--hot-share", type=float, default=0.3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-per-worker", default="512MB")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--no-check", action="store_true", help="skip comparing the two skewed runs' edges")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="zephyr-lsh-skew-"))
    try:
        balanced_sig = write_signatures(root / "balanced", args.docs, 0.0, args.files)
        skewed_sig = write_signatures(root / "skewed", args.docs, args.hot_share, args.files)
        common = dict(docs=args.docs, scratch=root / "scratch", workers=args.workers, memory=args.memory_per_worker)
        default_hot = FuzzyDedupConfig().hot_bucket_members
        results = {
            "balanced": run(balanced_sig, out=root / "out-balanced", hot=default_hot, **common),
            "skewed_sorted": run(skewed_sig, out=root / "out-sorted", hot=10**12, **common),
            "skewed_hot": run(skewed_sig, out=root / "out-hot", hot=default_hot, **common),
        }
        same = None
        if not args.no_check:
            same = edge_set(results["skewed_sorted"]["paths"]) == edge_set(results["skewed_hot"]["paths"])
        load = os.getloadavg()
        print(
            f"LSH candidate edges, {args.docs:,} documents x {BANDS} bands, {args.workers} workers, "
            f"{args.memory_per_worker} per worker; skewed: {args.hot_share:.0%} of documents in one bucket per band"
        )
        print(f"{'run':<16}{'seconds':>9}{'edges':>13}{'streamed':>12}{'peak worker MB':>16}{'all workers MB':>16}")
        for name, r in results.items():
            print(
                f"{name:<16}{r['seconds']:>9.1f}{r['edges']:>13,}{r['hot_members']:>12,}"
                f"{r['peak_worker_mb']:>16,.0f}{r['peak_workers_mb']:>16,.0f}"
            )
        if same is not None:
            print(f"skewed runs give the same edges: {same}")
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        figures = {
            "docs": args.docs,
            "hot_share": args.hot_share,
            "same_edges": same,
            "load_1m": round(load[0], 1),
            **{f"{name}_seconds": round(r["seconds"], 2) for name, r in results.items()},
            **{f"{name}_peak_worker_mb": round(r["peak_worker_mb"]) for name, r in results.items()},
            "skewed_hot_vs_sorted_speedup": round(
                results["skewed_sorted"]["seconds"] / results["skewed_hot"]["seconds"], 2
            ),
            "skewed_hot_vs_balanced_time": round(results["skewed_hot"]["seconds"] / results["balanced"]["seconds"], 2),
        }
        print(json.dumps(figures))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
