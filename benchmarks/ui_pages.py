"""`zephyr ui` page response times: on a real recipe output (the embedded sample) and on a ~2 GB output.

    python benchmarks/ui_pages.py            # sample root built under --work, plus ~2 GB of generated output
    python benchmarks/ui_pages.py --quick    # ~200 MB instead of ~2 GB

The large output is 8 files (4 jsonl.zst, 4 parquet) of documents whose text is random base64 "words", so it
does not compress and the files really are ~250 MB each on disk. Pages are requested from a real server on
127.0.0.1 (median of 3 requests; "first" is the first request of a new listing). The peer figure is what a
viewer without paging pays for the same page: reading the whole file (`read_records`, all rows) before showing
its first 50. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "ui"))
MEDIUM_LONG = 'split == "medium" and len(text) > 1000'
FUZZY = 'filter_reason == "fuzzy_duplicate"'


def _docs(rng: np.random.Generator, start: int, n: int, text_bytes: int) -> list[dict]:
    raw = base64.b64encode(rng.bytes(n * text_bytes * 3 // 4)).decode()
    docs = []
    reasons = ["exact_duplicate", "fuzzy_duplicate", "gopher_short_document", None, None, None, None, None, None, None]
    for k in range(n):
        chunk = raw[k * text_bytes : (k + 1) * text_bytes]
        text = " ".join(chunk[i : i + 8] for i in range(0, len(chunk), 8))
        docs.append(
            {
                "id": f"doc-{start + k:09d}",
                "split": ("high", "medium", "low")[(start + k) % 3],
                "lang": "en",
                "filter_reason": reasons[(start + k) % 10],
                "text": text,
            }
        )
    return docs


def generate(root: Path, total_bytes: int) -> dict:
    """Half jsonl.zst, half parquet, 4 files each; skipped when already there."""
    per_file = total_bytes // 8
    text_bytes = 4096
    docs_per_file = per_file // text_bytes
    rng = np.random.default_rng(0)
    info = {"files": 0, "bytes": 0, "docs": 0}
    for kind in ("jsonl", "parquet"):
        folder = root / kind
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(4):
            path = folder / (f"part-{f:05d}.jsonl.zst" if kind == "jsonl" else f"part-{f:05d}.parquet")
            if not path.exists():
                tmp = path.with_name(".tmp-" + path.name)
                start = f * docs_per_file
                if kind == "jsonl":
                    with open(tmp, "wb") as raw, zstandard.ZstdCompressor(level=1).stream_writer(raw) as out:
                        for b in range(0, docs_per_file, 2000):
                            batch = _docs(rng, start + b, min(2000, docs_per_file - b), text_bytes)
                            out.write(b"".join(json.dumps(d).encode() + b"\n" for d in batch))
                else:
                    with pq.ParquetWriter(
                        tmp,
                        pa.schema(
                            [
                                ("id", pa.string()),
                                ("split", pa.string()),
                                ("lang", pa.string()),
                                ("filter_reason", pa.string()),
                                ("text", pa.string()),
                            ]
                        ),
                        compression="zstd",
                    ) as writer:
                        for b in range(0, docs_per_file, 2000):
                            writer.write_table(
                                pa.Table.from_pylist(_docs(rng, start + b, min(2000, docs_per_file - b), text_bytes))
                            )
                os.replace(tmp, path)
            info["files"] += 1
            info["bytes"] += path.stat().st_size
            info["docs"] += docs_per_file
    return info


def sample_root(work: Path) -> Path:
    root = work / "sample"
    if not any(root.glob("tokenize-*")):
        code = (
            "import sys; sys.path.insert(0, 'tests/ui')\n"
            "from ui_helpers import _load_recipe\nfrom zephyr import execution\nr = _load_recipe()\n"
            f"with execution(backend='local', scratch={str(work / 'scratch')!r}, summary=False, progress=False):\n"
            f"    r.run(r.parse_args(['--output', {str(root)!r}, '--no-train']))\n"
        )
        subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return root


def timed(server, path: str, repeat: int = 3) -> tuple[float, float]:
    """(first, median of the rest) seconds for GET path."""
    times = []
    for _ in range(repeat):
        status, body, seconds = server.get(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:300]!r}")
        times.append(seconds)
    return times[0], statistics.median(times[1:]) if len(times) > 1 else times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/zephyr-ui-bench", help="where the sample and the large output go")
    parser.add_argument("--quick", action="store_true", help="~0.2 GB instead of ~2 GB")
    args = parser.parse_args()
    from ui_helpers import Server

    from zephyr.engine.io import read_records

    work = Path(args.work)
    q = urllib.parse.quote
    load = os.getloadavg()[0]
    results: dict = {"bench": "ui_pages", "load_1m": round(load, 2)}

    # -------- the embedded sample (a real recipe run)
    root = sample_root(work)
    server = Server(root)
    try:
        steps = server.json("/api/runs")["steps"]
        fuzzy = next(s["path"] for s in steps if s["name"] == "fuzzy_dedup")
        exact = next(s["path"] for s in steps if s["name"] == "exact_dedup")
        rid = server.json(f"/api/removed?step={q(fuzzy)}&limit=1")["rows"][0]["id"]
        store = server.json("/api/stores")["stores"][0]["path"]
        mixture = server.json("/api/stores")["mixtures"][0]
        pages = {
            "runs": "/",
            "documents": f"/documents?dataset={q(exact)}",
            "documents_filtered": f"/documents?dataset={q(exact)}&filter={q(MEDIUM_LONG)}",
            "document": f"/documents/doc?file={q(exact)}/part-00000.jsonl.zst&row=10",
            "removed": f"/removed?step={q(fuzzy)}",
            "removed_pair": f"/removed/pair?step={q(fuzzy)}&id={q(rid)}",
            "store": f"/stores/view?path={q(store)}",
            "store_doc": f"/stores/doc?path={q(store)}&index=3",
            "mixture": f"/stores/mixture?path={q(mixture)}",
        }
        print(f"embedded sample ({root}), load {load:.1f} on {os.cpu_count()} cores")
        print(f"{'page':<22} {'first ms':>9} {'median ms':>10}")
        sample = {}
        for name, path in pages.items():
            first, median = timed(server, path)
            sample[name] = round(median * 1000, 1)
            print(f"{name:<22} {first * 1000:>9.1f} {median * 1000:>10.1f}")
        results["sample_ms_median"] = sample
        results["sample_ms_max"] = max(sample.values())
    finally:
        server.stop()

    # -------- a ~2 GB output
    big = work / ("big-quick" if args.quick else "big")
    started = time.perf_counter()
    info = generate(big, (230 if args.quick else 2300) * 1024 * 1024)  # base64 text: ~87% of the target on disk
    print(
        f"\nlarge output {big}: {info['files']} files, {info['bytes'] / 1e9:.2f} GB, {info['docs']:,} documents "
        f"(ready in {time.perf_counter() - started:.0f} s); load {os.getloadavg()[0]:.1f}"
    )
    server = Server(big)
    per_file = info["docs"] // 8
    try:
        large = {}
        print(f"{'page':<40} {'first ms':>9} {'median ms':>10}")
        for kind in ("jsonl", "parquet"):
            suffix = "jsonl.zst" if kind == "jsonl" else "parquet"
            cases = {
                "first page": f"/documents?dataset={kind}",
                "page at row 1,000": f"/documents?dataset={kind}&offset=1000",
                "last file, by its link": f"/documents?dataset={kind}&file={kind}/part-00003.{suffix}&offset=100",
                "page in the last file": f"/documents?dataset={kind}&offset={3 * per_file + 100}",
                "filter_reason == fuzzy_duplicate": f"/documents?dataset={kind}&filter={q(FUZZY)}",
                "filtered page 20": f"/documents?dataset={kind}&filter={q(FUZZY)}&offset=1000",
                "open one document": f"/documents/doc?file={kind}/part-00002.{suffix}&row=500",
            }
            for name, path in cases.items():
                first, median = timed(server, path)
                large[f"{kind}: {name}"] = {"first_ms": round(first * 1000, 1), "median_ms": round(median * 1000, 1)}
                print(f"{kind + ': ' + name:<40} {first * 1000:>9.1f} {median * 1000:>10.1f}")
        peer = {}
        for kind, name in (("jsonl", "part-00000.jsonl.zst"), ("parquet", "part-00000.parquet")):
            t = time.perf_counter()
            rows = sum(1 for _ in read_records(str(big / kind / name)))
            peer[kind] = round((time.perf_counter() - t) * 1000, 1)
            print(f"peer (read the whole first file, {rows:,} rows) {kind}: {peer[kind]:.0f} ms")
        results["large_bytes"] = info["bytes"]
        results["large_ms"] = large
        results["peer_whole_file_ms"] = peer
        results["ours_first_page_ms"] = {k: large[f"{k}: first page"]["first_ms"] for k in ("jsonl", "parquet")}
        results["load_1m_end"] = round(os.getloadavg()[0], 2)
    finally:
        server.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
