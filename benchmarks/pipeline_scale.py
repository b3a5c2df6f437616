"""Nemotron-CC at scale: normalize -> exact dedup -> fuzzy dedup -> tokenize on a generated corpus.

    .venv/bin/python benchmarks/pipeline_scale.py                  # 1 GB of text
    .venv/bin/python benchmarks/pipeline_scale.py --gb 0.2         # quicker
    .venv/bin/python benchmarks/pipeline_scale.py --gb 0.2 --corpus /tmp/c --steps normalize,exact_dedup

Corpus: `--gb` GB of document text in Nemotron-CC's raw shape (`text`, `warc_record_id`, `metadata` with the
quality split), seven splits of `.jsonl.zst` files (~64 MB of text per file). Words follow the real word
frequencies of the prose on this machine (the installed packages' descriptions and standard-library
docstrings, as in recipes/nemotron_sample.py): sentences of 6-28 words, paragraphs of 2-7 sentences,
documents of ~3 KB on average (log-normal). 5% of the documents are exact copies (a new id, maybe another
split) and 5% near copies (2-4% of the words edited). `--corpus DIR` keeps the corpus in DIR and reuses it
(generation is deterministic for a given size and seed).

Steps are recipes/nemotron_cc.py's own step functions, on the processes backend. Per step: wall seconds,
documents in and out, docs/s per core (documents in / (seconds x workers)), docs per CPU-second (CPU
time of the process tree, the driver and its workers: less sensitive than wall time to other work on a
shared machine), MB/s of input text, the peak RSS of the largest worker task against the memory budget
(StageStats), the bytes the step's shuffles scattered to scratch (the sum of its scatter stages' run
files), and an extrapolation to 2 trillion
tokens (the corpus's tokens per input document from the tokenize step): core-hours = documents needed /
(docs/s per core) / 3600. Then a `group_by` whose one key holds 30% of the records beside a balanced one
of the same size (wall seconds and their ratio). The machine is shared: `uptime` before and after is printed.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))

import nemotron_cc
from nemotron_sample import SPLITS, _package_texts, _stdlib_texts

from zephyr import Dataset, execution
from zephyr.engine import executor

TARGET_TOKENS = 2e12
FILE_TEXT_BYTES = 64 << 20


# ------------------------------------------------------------------------------------------- corpus
def _vocabulary() -> tuple[np.ndarray, np.ndarray]:
    """Words of the prose on this machine and their relative frequencies (a real Zipf-like curve)."""
    counts = Counter(word for text in _package_texts() + _stdlib_texts() for word in text.split() if word.isalpha())
    words, freq = zip(*counts.most_common(), strict=False)
    p = np.array(freq, np.float64)
    return np.array(words, dtype=object), p / p.sum()


def _document(rng: np.random.Generator, words: np.ndarray, cumulative: np.ndarray) -> str:
    n_words = int(min(6000, max(40, rng.lognormal(6.1, 0.8))))  # ~500 words (~3 KB) on average
    picks = words[np.searchsorted(cumulative, rng.random(n_words))].tolist()
    paragraphs, sentence, para = [], [], []
    lengths = rng.integers(6, 29, size=n_words // 6 + 2).tolist()
    per_para = rng.integers(2, 8, size=n_words // 12 + 2).tolist()
    i = s = p = 0
    while i < n_words:
        sentence = picks[i : i + lengths[s]]
        i += lengths[s]
        s += 1
        sentence[0] = sentence[0].capitalize()
        para.append(" ".join(sentence) + ".")
        if len(para) >= per_para[p]:
            paragraphs.append(" ".join(para))
            para = []
            p += 1
    if para:
        paragraphs.append(" ".join(para))
    return "\n\n".join(paragraphs)


def _near_copy(text: str, rng: np.random.Generator) -> str:
    words = text.split(" ")
    for _ in range(max(1, int(len(words) * rng.uniform(0.02, 0.04)))):
        i = int(rng.integers(len(words)))
        op = rng.random()
        if op < 0.4:
            words[i] = words[i].upper()
        elif op < 0.7:
            words.insert(i, "indeed")
        elif len(words) > 10:
            del words[i]
    return " ".join(words)


def _record(text: str, split: str, rng: np.random.Generator, index: int) -> dict:
    return {
        "text": text,
        "warc_record_id": f"<urn:uuid:{uuid.UUID(bytes=rng.bytes(16), version=4)}>",
        "metadata": {
            "url": f"https://example.org/{split}/{index}",
            "quality_split": split,
            "language": "en",
            "crawl": "CC-MAIN-2024-10",
        },
    }


def generate(directory: Path, gb: float, seed: int = 0) -> dict[str, Any]:
    """Write the corpus (if DIR has no finished one for this size) and return its description."""
    done = directory / "corpus.json"
    if done.is_file():
        info = json.loads(done.read_text())
        if info["gb"] == gb and info["seed"] == seed:
            return info
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    words, p = _vocabulary()
    cumulative = np.cumsum(p)
    cumulative[-1] = 1.0
    budget = gb * 1e9
    per_split = budget / len(SPLITS)
    compressor = zstandard.ZstdCompressor(level=3)
    docs = exact = near = 0
    text_bytes = 0
    recent: list[dict] = []  # sources for copies: duplicates land far apart, in other files and splits
    for split in SPLITS:
        written = 0.0
        part = 0
        while written < per_split:
            lines = []
            file_bytes = 0
            while file_bytes < FILE_TEXT_BYTES and written + file_bytes < per_split:
                roll = rng.random()
                if roll < 0.05 and recent:
                    source = recent[int(rng.integers(len(recent)))]
                    record, exact = _record(source["text"], split, rng, docs), exact + 1
                elif roll < 0.10 and recent:
                    source = recent[int(rng.integers(len(recent)))]
                    record, near = _record(_near_copy(source["text"], rng), split, rng, docs), near + 1
                else:
                    record = _record(_document(rng, words, cumulative), split, rng, docs)
                    if len(recent) < 2000:
                        recent.append(record)
                    elif rng.random() < 0.05:
                        recent[int(rng.integers(len(recent)))] = record
                size = len(record["text"])
                file_bytes += size
                docs += 1
                lines.append(orjson.dumps(record))
            folder = directory / split
            folder.mkdir(exist_ok=True)
            (folder / f"part-{part:05d}.jsonl.zst").write_bytes(compressor.compress(b"\n".join(lines) + b"\n"))
            written += file_bytes
            text_bytes += file_bytes
            part += 1
    info = {
        "gb": gb,
        "seed": seed,
        "documents": docs,
        "exact_copies": exact,
        "near_copies": near,
        "text_bytes": text_bytes,
        "compressed_bytes": sum(f.stat().st_size for f in directory.rglob("*.zst")),
        "seconds": round(time.perf_counter() - started, 1),
    }
    done.write_text(json.dumps(info))
    return info


# -------------------------------------------------------------------------------------------- steps
class _Captured:
    """Every engine run inside a step: peak worker RSS, scatter bytes (scratch written)."""

    def __init__(self) -> None:
        self.runs: list[Any] = []
        self._original = executor.execute_plan

    def __enter__(self) -> _Captured:
        def capture(physical, config):
            run = self._original(physical, config)
            self.runs.append(run)
            return run

        executor.execute_plan = capture
        return self

    def __exit__(self, *exc: object) -> None:
        executor.execute_plan = self._original

    @property
    def peak_rss(self) -> int:
        return max((s.peak_rss for run in self.runs for s in run.stages), default=0)

    @property
    def scratch_bytes(self) -> int:
        return sum(s.bytes_out for run in self.runs for s in run.stages if s.name.endswith("scatter"))


class TreeCpu:
    """CPU seconds (user + system) of this process and every descendant. Sampled every 0.25 s (the list
    of descendants every second), so that a worker that exits before the end still counts up to its last
    sample; the sampling thread's own CPU time (it scans /proc) is taken out of the total."""

    def __init__(self) -> None:
        self.last: dict[int, float] = {}
        self.processes: dict[int, psutil.Process] = {}
        self.own = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _refresh(self) -> None:
        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            self.processes.setdefault(process.pid, process)

    def sample(self) -> None:
        for pid, process in list(self.processes.items()):
            try:
                times = process.cpu_times()
            except psutil.Error:
                del self.processes[pid]
                continue
            self.last[pid] = times.user + times.system

    def _loop(self) -> None:
        started = time.thread_time()
        tick = 0
        while not self._stop.wait(0.25):
            if tick % 4 == 0:
                self._refresh()
            self.sample()
            tick += 1
        self.own = time.thread_time() - started

    def __enter__(self) -> TreeCpu:
        self._refresh()
        self.sample()
        self.start = dict(self.last)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._refresh()
        self.sample()

    @property
    def seconds(self) -> float:
        return sum(value - self.start.get(pid, 0.0) for pid, value in self.last.items()) - self.own


def _text_bytes(pattern: str) -> int:
    from zephyr.fs import expand_glob

    total = 0
    for path in expand_glob(pattern):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        total += sum(len(orjson.loads(line)["text"]) for line in data.splitlines() if line)
    return total


def run_steps(
    corpus: Path, out: Path, steps: list[str], workers: int, memory: str, shards: int, tokenizer: str
) -> dict:
    results: dict[str, dict] = {}
    docs = str(out / "normalize")
    exact = str(out / "exact_dedup")
    fuzzy = str(out / "fuzzy_dedup")
    with execution(
        backend="processes",
        workers=workers,
        memory_per_worker=memory,
        scratch=str(out / "scratch"),
        summary=False,
        progress=False,
    ):
        plan = [
            (
                "normalize",
                lambda: nemotron_cc.normalize(docs, config={}, inputs=[str(corpus / "*" / "*.jsonl.zst")]),
                str(corpus / "*" / "*.jsonl.zst"),
            ),
            (
                "exact_dedup",
                lambda: nemotron_cc.exact_dedup(exact, config={"num_shards": shards}, docs=docs),
                str(Path(docs) / "*" / "*.jsonl.zst"),
            ),
            (
                "fuzzy_dedup",
                lambda: nemotron_cc.fuzzy_dedup(fuzzy, config={"threshold": 0.8, "num_shards": shards}, docs=exact),
                str(Path(exact) / "*.jsonl.zst"),
            ),
            (
                "tokenize",
                lambda: nemotron_cc.tokenize(
                    str(out / "tokenize"),
                    config={"splits": list(SPLITS), "tokenizer": tokenizer, "validation_fraction": 0.0},
                    docs=fuzzy,
                ),
                str(Path(fuzzy) / "docs" / "*" / "*.jsonl.zst"),
            ),
        ]
        for name, step, inputs in plan:
            if name not in steps:
                continue
            text = _text_bytes(inputs)
            with _Captured() as captured, TreeCpu() as cpu:
                started = time.perf_counter()
                summary = step()
                seconds = time.perf_counter() - started
            if name == "tokenize":
                docs_in = sum(s["documents"] + s["validation_documents"] for s in summary.values())
                docs_out, tokens = docs_in, sum(s["tokens"] + s["validation_tokens"] for s in summary.values())
            else:
                docs_in, docs_out, tokens = summary["documents_in"], summary["documents_out"], None
            results[name] = {
                "seconds": seconds,
                "docs_in": docs_in,
                "docs_out": docs_out,
                "text_mb": text / 1e6,
                "docs_s_core": docs_in / seconds / workers,
                "cpu_seconds": cpu.seconds,
                "docs_s_cpu": docs_in / cpu.seconds,
                "mb_s": text / 1e6 / seconds,
                "peak_rss": captured.peak_rss,
                "scratch_bytes": captured.scratch_bytes,
                "tokens": tokens,
            }
            print(f"  {name} done in {seconds:.1f} s", flush=True)
    return results


# ------------------------------------------------------------------------------------------- skew
def _count(key: Any, items: Any) -> dict:
    n = 0
    for _ in items:
        n += 1
    return {"key": key, "count": n}


def skew(tmp: Path, records: int, workers: int, memory: str) -> dict[str, float]:
    """Wall seconds of a group_by over `records` rows, balanced and with one key holding 30% of them."""
    rng = np.random.default_rng(1)
    out: dict[str, float] = {}
    for name in ("balanced", "skewed"):
        folder = tmp / f"skew-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        per_file = 500_000
        for index, start in enumerate(range(0, records, per_file)):
            n = min(per_file, records - start)
            keys = rng.integers(1, 100_000, n)
            if name == "skewed":
                keys[rng.random(n) < 0.3] = 0
            letters = rng.integers(97, 123, size=(n, 80), dtype=np.uint8)
            table = pa.table(
                {
                    "key": keys,
                    "seq": np.arange(start, start + n),
                    "payload": pa.array(letters.view("S80").ravel(), pa.binary()).cast(pa.string()),
                }
            )
            pq.write_table(table, folder / f"part-{index:05d}.parquet")
        with execution(
            backend="processes",
            workers=workers,
            memory_per_worker=memory,
            scratch=str(tmp / "scratch-skew"),
            summary=False,
            progress=False,
        ):
            started = time.perf_counter()
            run = (
                Dataset.from_files(str(folder / "*.parquet"))
                .group_by("key", _count, sort_by="seq", num_shards=2 * workers)
                .write(str(tmp / f"skew-out-{name}" / "part-{shard:05d}.parquet"))
                .execute()
            )
            out[name] = time.perf_counter() - started
        if name == "skewed":
            out["giant_key_records"] = run.counters.get("shuffle/giant_key/0/records", 0)
    out["ratio"] = out["skewed"] / out["balanced"]
    return out


# -------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="GB of document text to generate")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-per-worker", default="1GB")
    parser.add_argument("--num-shards", type=int, default=4, help="shards of the dedup shuffles")
    parser.add_argument("--tokenizer", default="smollm2")
    parser.add_argument("--steps", default="normalize,exact_dedup,fuzzy_dedup,tokenize")
    parser.add_argument("--skew-records", type=int, default=None, help="rows of the skew group_by (default 2M x gb)")
    parser.add_argument("--no-skew", action="store_true")
    parser.add_argument("--corpus", default=None, help="keep (and reuse) the generated corpus here")
    parser.add_argument("--tmp", default=None, help="directory for outputs and scratch")
    args = parser.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    from zephyr.engine.context import parse_size

    budget = parse_size(args.memory_per_worker)
    load_before = os.getloadavg()
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="zephyr-bench-scale-", dir=args.tmp))
    try:
        corpus_dir = Path(args.corpus) if args.corpus else tmp / "corpus"
        corpus = generate(corpus_dir, args.gb)
        print(
            f"corpus: {corpus['documents']:,} documents, {corpus['text_bytes'] / 1e6:,.0f} MB of text, "
            f"{corpus['compressed_bytes'] / 1e6:,.0f} MB compressed, {corpus['exact_copies']:,} exact and "
            f"{corpus['near_copies']:,} near copies planted (generated in {corpus['seconds']} s)",
            flush=True,
        )
        results = run_steps(
            corpus_dir, tmp / "out", steps, args.workers, args.memory_per_worker, args.num_shards, args.tokenizer
        )
        skewed = (
            {}
            if args.no_skew
            else skew(tmp, args.skew_records or int(2_000_000 * args.gb), args.workers, args.memory_per_worker)
        )
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    tokens_per_doc = None
    if "tokenize" in results and results["tokenize"]["docs_in"]:
        kept = results["tokenize"]
        tokens_per_doc = kept["tokens"] / kept["docs_in"] * kept["docs_in"] / corpus["documents"]  # per input doc
    print()
    print(
        f"Nemotron-CC pipeline, {corpus['text_bytes'] / 1e9:.2f} GB of text, {corpus['documents']:,} documents; "
        f"{args.workers} workers, memory_per_worker {args.memory_per_worker}"
    )
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (2 cores shared with other users)"
    )
    header = (
        f"{'step':<12}{'seconds':>9}{'docs in':>11}{'docs out':>11}{'docs/s/core':>13}{'docs/CPU-s':>12}{'MB/s':>8}"
        f"{'peak RSS MB':>13}{'budget MB':>11}{'scratch MB':>12}{'2T core-h':>11}"
    )
    print(header)
    print("-" * len(header))
    figures: dict[str, Any] = {
        "bench": "pipeline_scale",
        "gb": args.gb,
        "documents": corpus["documents"],
        "text_mb": round(corpus["text_bytes"] / 1e6),
        "workers": args.workers,
        "memory_per_worker_mb": budget >> 20,
    }
    total_core_hours = 0.0
    for name, r in results.items():
        core_hours = None
        if tokens_per_doc:
            core_hours = TARGET_TOKENS / tokens_per_doc / r["docs_s_core"] / 3600
            total_core_hours += core_hours
        print(
            f"{name:<12}{r['seconds']:>9.1f}{r['docs_in']:>11,}{r['docs_out']:>11,}{r['docs_s_core']:>13,.0f}"
            f"{r['docs_s_cpu']:>12,.0f}"
            f"{r['mb_s']:>8.1f}{r['peak_rss'] / (1 << 20):>13,.0f}{budget / (1 << 20):>11,.0f}"
            f"{r['scratch_bytes'] / (1 << 20):>12,.0f}{core_hours if core_hours else float('nan'):>11,.0f}"
        )
        figures[f"{name}_seconds"] = round(r["seconds"], 1)
        figures[f"{name}_docs_s_core"] = round(r["docs_s_core"], 1)
        figures[f"{name}_cpu_seconds"] = round(r["cpu_seconds"], 1)
        figures[f"{name}_docs_s_cpu"] = round(r["docs_s_cpu"], 1)
        figures[f"{name}_mb_s"] = round(r["mb_s"], 2)
        figures[f"{name}_peak_rss_mb"] = r["peak_rss"] >> 20
        figures[f"{name}_scratch_mb"] = r["scratch_bytes"] >> 20
        if core_hours:
            figures[f"{name}_2T_core_hours"] = round(core_hours)
    if tokens_per_doc:
        print(
            f"extrapolation: {tokens_per_doc:,.0f} tokens per input document -> {TARGET_TOKENS / tokens_per_doc:,.3g} "
            f"documents for 2T tokens: {total_core_hours:,.0f} core-hours for these steps at the rates above"
        )
        figures["tokens_per_input_doc"] = round(tokens_per_doc, 1)
        figures["total_2T_core_hours"] = round(total_core_hours)
    if skewed:
        print(
            f"group_by, {args.skew_records or int(2_000_000 * args.gb):,} rows: "
            f"balanced {skewed['balanced']:.1f} s, one key "
            f"= 30% {skewed['skewed']:.1f} s (x{skewed['ratio']:.2f}); giant key reported with "
            f"{skewed['giant_key_records']:,} records "
            f"(groups over memory_per_worker/16 = {budget >> 24} MB are reported)"
        )
        figures.update({f"skew_{k}": round(v, 2) for k, v in skewed.items()})
    figures["load_before"] = round(load_before[0], 2)
    figures["load_after"] = round(load_after[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
