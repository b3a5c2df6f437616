"""Exact dedup: today's decision pass + lookup beside the old whole-document shuffle, on one corpus.

    .venv/bin/python benchmarks/exact_dedup.py                     # 0.2 GB of text, ~55K documents
    .venv/bin/python benchmarks/exact_dedup.py --gb 2 --corpus /tmp/c2

Corpus: benchmarks/pipeline_scale.py's generator (Nemotron-CC-shaped, seven splits of `.jsonl.zst`,
5% exact and 5% near copies planted), put through recipes/nemotron_cc.py's normalize step once (kept
with `--corpus DIR`). Then recipes/nemotron_cc.py's exact_dedup step runs once per variant, each in a
fresh process on the processes backend:

    new           zephyr.operators.exact_dedup.dedup_documents as it is (no text in any shuffle)
    old           the old algorithm (commit ea9c0bb): whole documents shuffled by the hash of their
                  normalized text (normalize_for_hash's regex path, as then), sorted by the order key,
                  the first of each group kept; the duplicates get the same fields as today (dup_keeper
                  included), so both variants write the same output
    old_fasthash  the old algorithm with today's hash function (separates the algorithm from the hash)

Each first runs the step on 100 documents per split (a warm-up: the workers' first-use imports are
paid once per worker, not per document), then on the corpus, and writes the step's output (kept
documents as `.jsonl.zst` plus the removed ones' lineage), as the recipe does; `--sink count` counts
the kept documents instead (the dedup alone, without the output's JSON encoding and compression). Per
variant: wall seconds, CPU seconds of the whole process tree (the driver and its worker processes,
sampled from /proc), docs/s per core both by CPU time (documents / CPU seconds) and by wall (documents
/ (seconds x workers)), the bytes its shuffles scattered to scratch, the peak RSS of the largest worker
task. The variants' outputs are compared (kept documents' JSON lines and lineage rows, sorted): they
must be identical. The machine is shared: `uptime` before and after is
printed. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import nemotron_cc  # noqa: E402
import xxhash  # noqa: E402
from pipeline_scale import TreeCpu  # noqa: E402

from zephyr import Dataset, execution  # noqa: E402
from zephyr.fs import join  # noqa: E402
from zephyr.operators import exact_dedup  # noqa: E402
from zephyr.operators.lineage import LINEAGE_DIR, drop_removed  # noqa: E402

VARIANTS = ("old", "old_fasthash", "new")


# ------------------------------------------------------------------------------------ the baseline
@dataclass(frozen=True)
class _OldKey:
    """The old key: xxh3-128 of normalize_for_hash (NFKC, casefold, a punctuation regex, split/join)."""

    text_field: str

    def __call__(self, doc: dict) -> str:
        return xxhash.xxh3_128_hexdigest(exact_dedup.normalize_for_hash(doc.get(self.text_field) or "").encode("utf-8"))


def _whole_document_shuffle(fast_hash: bool):
    """dedup_documents as at ea9c0bb: one group_by of the whole documents by hash, first by order kept."""

    def dedup(ds: Dataset, *, text_field: str = "text", order_key: Any = None, drop: bool = False, num_shards=None):
        key = exact_dedup._DocKey(text_field) if fast_hash else _OldKey(text_field)
        order = order_key or exact_dedup._FieldOrder("id")
        return ds.group_by(key, exact_dedup._MarkDocs(drop), sort_by=order, num_shards=num_shards)

    return dedup


# ------------------------------------------------------------------------------------ measurement
def _digest_output(out: Path) -> dict[str, Any]:
    """Order-free digests of the kept documents (sorted JSON lines) and the lineage rows."""
    import pyarrow.parquet as pq
    import zstandard

    lines: list[bytes] = []
    for path in sorted(out.glob("part-*.jsonl.zst")):
        with open(path, "rb") as handle:
            data = zstandard.ZstdDecompressor().stream_reader(handle).read()
        lines += [line for line in data.split(b"\n") if line]
    rows = []
    for path in sorted((out / LINEAGE_DIR).glob("*.parquet")):
        rows += [json.dumps(row, sort_keys=True) for row in pq.read_table(path).to_pylist()]
    kept = xxhash.xxh3_128()
    for line in sorted(lines):
        kept.update(line + b"\n")
    removed = xxhash.xxh3_128()
    for row in sorted(rows):
        removed.update(row.encode("utf-8") + b"\n")
    return {"kept_digest": kept.hexdigest(), "removed_rows": len(rows), "removed_digest": removed.hexdigest()}


def _warm_corpus(docs: str, out: Path, per_split: int = 100) -> str:
    """The first `per_split` documents of each split's first file, in the same layout."""
    import zstandard

    for split in sorted(Path(docs).iterdir()):
        files = sorted(split.glob("*.jsonl.zst"))
        if not files:
            continue
        with open(files[0], "rb") as handle:
            lines = zstandard.ZstdDecompressor().stream_reader(handle).read().split(b"\n")[:per_split]
        (out / split.name).mkdir(parents=True, exist_ok=True)
        data = zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n")
        (out / split.name / files[0].name).write_bytes(data)
    return str(out)


def _count_kept(docs: str, out: Path, shards: int) -> int:
    """The dedup alone: the step's datasets, the kept documents counted instead of written."""
    source = Dataset.from_files(join(docs, "*", "*.jsonl.zst"))
    marked = nemotron_cc.dedup_documents(source, order_key=nemotron_cc._quality_order, num_shards=shards)
    return drop_removed(marked, str(out / "exact" / LINEAGE_DIR)).count()


def run_variant(variant: str, docs: str, out: Path, workers: int, memory: str, shards: int, sink: str) -> dict:
    """One variant in this process (a fresh one per variant: its own worker pool, nothing warm)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pipeline_scale import _Captured

    if variant != "new":
        nemotron_cc.dedup_documents = _whole_document_shuffle(fast_hash=variant == "old_fasthash")
    with execution(
        backend="processes",
        workers=workers,
        memory_per_worker=memory,
        scratch=str(out / "scratch"),
        summary=False,
        progress=False,
    ):
        # warm-up: the same step on 100 documents per split, so that the workers' first-use imports and
        # tables are not counted (they are paid once per worker, not per document)
        warm = _warm_corpus(docs, out / "warm")
        nemotron_cc.exact_dedup(str(out / "warm-exact"), config={"num_shards": shards}, docs=warm)
        _count_kept(warm, out / "warm-count", shards)
        with TreeCpu() as cpu, _Captured() as captured:
            started = time.perf_counter()
            if sink == "jsonl":
                summary = nemotron_cc.exact_dedup(str(out / "exact"), config={"num_shards": shards}, docs=docs)
                docs_in, docs_out = summary["documents_in"], summary["documents_out"]
            else:
                docs_in, docs_out = None, _count_kept(docs, out, shards)
            seconds = time.perf_counter() - started
    result = {
        "variant": variant,
        "seconds": seconds,
        "cpu_seconds": cpu.seconds,
        "docs_in": docs_in,
        "docs_out": docs_out,
        "peak_rss": captured.peak_rss,
        "scratch_bytes": captured.scratch_bytes,
        "runs": len(captured.runs),
    }
    if sink == "jsonl":
        result.update(_digest_output(out / "exact"))
    captured.runs.clear()  # the run results hold the plans, and so the dedup's datasets
    gc.collect()
    leftovers = [str(p) for p in (out / "scratch").rglob("exact-dedup-*")] if (out / "scratch").exists() else []
    result["scratch_leftovers"] = len(leftovers)
    return result


def _prepare(corpus: Path, gb: float, workers: int) -> tuple[dict, str]:
    from pipeline_scale import generate

    info = generate(corpus / "raw", gb)
    normalized = corpus / "normalized"
    if not (normalized / "_done").exists():
        shutil.rmtree(normalized, ignore_errors=True)
        with execution(
            backend="processes", workers=workers, scratch=str(corpus / "scratch"), summary=False, progress=False
        ):
            nemotron_cc.normalize(str(normalized), config={}, inputs=[str(corpus / "raw" / "*" / "*.jsonl.zst")])
        (normalized / "_done").write_text("ok")
    return info, str(normalized)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=0.2, help="GB of document text to generate")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-per-worker", default="1GB")
    parser.add_argument("--num-shards", type=int, default=4, help="shards of the dedup shuffles")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {','.join(VARIANTS)}")
    parser.add_argument("--sink", choices=("jsonl", "count"), default="jsonl")
    parser.add_argument("--corpus", default=None, help="keep (and reuse) the generated corpus here")
    parser.add_argument("--tmp", default=None, help="directory for outputs and scratch")
    parser.add_argument("--variant-run", default=None, help=argparse.SUPPRESS)  # internal: one variant
    parser.add_argument("--docs", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant_run:
        result = run_variant(
            args.variant_run,
            args.docs,
            Path(args.out),
            args.workers,
            args.memory_per_worker,
            args.num_shards,
            args.sink,
        )
        print(json.dumps(result))
        return 0

    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}: expected some of {', '.join(VARIANTS)}")
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="zephyr-bench-exact-", dir=args.tmp))
    results: dict[str, dict] = {}
    uptimes: dict[str, str] = {}
    try:
        corpus_dir = Path(args.corpus) if args.corpus else tmp / "corpus"
        corpus, docs = _prepare(corpus_dir, args.gb, args.workers)
        print(
            f"corpus: {corpus['documents']:,} documents, {corpus['text_bytes'] / 1e6:,.0f} MB of text, "
            f"{corpus['exact_copies']:,} exact copies planted; normalized in {docs}",
            flush=True,
        )
        uptimes["before"] = _uptime()
        for variant in variants:
            out = tmp / f"out-{variant}"
            command = [
                sys.executable,
                __file__,
                "--variant-run",
                variant,
                "--docs",
                docs,
                "--out",
                str(out),
                "--workers",
                str(args.workers),
                "--memory-per-worker",
                args.memory_per_worker,
                "--num-shards",
                str(args.num_shards),
                "--sink",
                args.sink,
            ]
            uptimes[variant] = _uptime()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"variant {variant} failed (exit {done.returncode})")
            results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
            results[variant]["docs_in"] = results[variant]["docs_in"] or corpus["documents"]
            print(f"  {variant} done in {results[variant]['seconds']:.1f} s ({uptimes[variant]})", flush=True)
            shutil.rmtree(out, ignore_errors=True)
        uptimes["after"] = _uptime()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(
        f"exact dedup (recipes/nemotron_cc.py step, sink {args.sink}), {corpus['text_bytes'] / 1e9:.2f} GB of text, "
        f"{corpus['documents']:,} documents; {args.workers} workers, memory_per_worker {args.memory_per_worker}"
    )
    print(f"uptime before: {uptimes['before']}\nuptime after:  {uptimes['after']}")
    header = (
        f"{'variant':<14}{'wall s':>8}{'CPU s':>8}{'docs/s/core CPU':>17}{'docs/s/core wall':>18}"
        f"{'scratch MB':>12}{'peak RSS MB':>13}{'kept':>9}"
    )
    print(header)
    print("-" * len(header))
    figures: dict[str, Any] = {
        "bench": "exact_dedup",
        "gb": args.gb,
        "documents": corpus["documents"],
        "workers": args.workers,
        "sink": args.sink,
    }
    for variant, r in results.items():
        r["docs_s_core_cpu"] = r["docs_in"] / r["cpu_seconds"]
        r["docs_s_core_wall"] = r["docs_in"] / r["seconds"] / args.workers
        print(
            f"{variant:<14}{r['seconds']:>8.1f}{r['cpu_seconds']:>8.1f}{r['docs_s_core_cpu']:>17,.0f}"
            f"{r['docs_s_core_wall']:>18,.0f}{r['scratch_bytes'] / 1e6:>12,.1f}{r['peak_rss'] / (1 << 20):>13,.0f}"
            f"{r['docs_out']:>9,}"
        )
        for name in ("seconds", "cpu_seconds", "docs_s_core_cpu", "docs_s_core_wall"):
            figures[f"{variant}_{name}"] = round(r[name], 1)
        figures[f"{variant}_scratch_mb"] = round(r["scratch_bytes"] / 1e6, 1)
        figures[f"{variant}_peak_rss_mb"] = r["peak_rss"] >> 20
        figures[f"{variant}_kept"] = r["docs_out"]
        figures[f"{variant}_scratch_leftovers"] = r["scratch_leftovers"]
        figures[f"{variant}_uptime"] = uptimes[variant].split("load average:")[-1].strip()
    if "new" in results:
        for base in ("old", "old_fasthash"):
            if base in results:
                cpu = results["new"]["docs_s_core_cpu"] / results[base]["docs_s_core_cpu"]
                wall = results[base]["seconds"] / results["new"]["seconds"]
                print(f"new vs {base}: x{cpu:.2f} docs/s per core by CPU time, x{wall:.2f} by wall")
                figures[f"speedup_cpu_vs_{base}"] = round(cpu, 2)
                figures[f"speedup_wall_vs_{base}"] = round(wall, 2)
    if args.sink == "jsonl":
        digests = {(r["kept_digest"], r["removed_digest"]) for r in results.values()}
        figures["outputs_identical"] = len(digests) == 1
        print(f"outputs identical (kept documents and lineage rows): {figures['outputs_identical']}")
    figures["load_before"] = round(float(uptimes["before"].split("load average:")[-1].split(",")[0]), 2)
    figures["load_after"] = round(float(uptimes["after"].split("load average:")[-1].split(",")[0]), 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
