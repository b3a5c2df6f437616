"""Cost per trillion tokens: the Nemotron-CC and Common Crawl pipelines at scale, per step, on generated input.

    .venv/bin/python benchmarks/pipeline_scale.py                    # Nemotron-CC, 1 GB of text
    .venv/bin/python benchmarks/pipeline_scale.py --gb 2             # the issue's reference size
    .venv/bin/python benchmarks/pipeline_scale.py --curve            # both pipelines at 0.25, 1, 4, 16 GB
    .venv/bin/python benchmarks/pipeline_scale.py --curve --sizes 0.25,2 --pipelines nemotron
    .venv/bin/python benchmarks/pipeline_scale.py --estimate --gb 2  # `zephyr run --estimate` beside the real run
    .venv/bin/python benchmarks/pipeline_scale.py --quick            # 0.05 GB, both pipelines

Nemotron-CC (recipes/nemotron_cc.py's own step functions): normalize -> exact dedup -> fuzzy dedup ->
tokenize. Input: `--gb` GB of document text in Nemotron-CC's raw shape (`text`, `warc_record_id`, `metadata`
with the quality split), seven splits of `.jsonl.zst` files (~16 MB of text per file). Words follow the real
word frequencies of the prose on this machine (the installed packages' descriptions and standard-library
docstrings, as in recipes/nemotron_sample.py): sentences of 6-28 words, paragraphs of 2-7 sentences,
documents of ~3.6 KB on average (log-normal); 5% exact copies (a new id, maybe another split), 5% near copies
(2-4% of the words edited).

Common Crawl (recipes/common_crawl.py's step functions): WARC -> extract -> language id -> quality -> PII ->
exact dedup -> fuzzy dedup -> tokenize. Input: `--gb` GB of HTML in gzip-per-record WARC files. Each page is a
real page from ../shared/data (aeb-dev and web-pages: their markup, scripts, navigation and boilerplate as
crawled) whose paragraphs' text is replaced by generated English prose of the same length, so every page is
distinct and extraction does a crawl's work; 5% are exact and 5% near copies of earlier pages.

Per step and size: wall seconds, documents in and out, docs per CPU-second (CPU time of the process tree,
the driver and its workers: steadier than wall time on a shared machine), the peak RSS of the largest worker
task against the memory budget (StageStats), and the bytes the step's shuffles scattered to scratch. The 2T
figure: tokens per input document (from the tokenize step) gives the documents 2 trillion tokens need, and
core-hours = documents needed x CPU-seconds per document, step by step ("2T core-h"); the wall-time version
(documents / (docs/s per worker), as a data team pays for reserved cores) is printed beside it. `--curve`
prints, per step, docs per CPU-second at each size and the change from the smallest size. Step outputs are
deleted once the next step has read them (`--keep-outputs` keeps them), and generated corpora after their
size is measured unless `--corpus-root` keeps them. `--budget-minutes` stops the curve before a size whose
run (projected from the last size, generation included) would not fit; the line says where and why.

`--estimate` runs `zephyr run --estimate` (recipes/nemotron_cc.py --no-train on the generated corpus) and
then the real run of the recipe, and prints each step's predicted and measured wall time side by side.

Then a `group_by` whose one key holds 30% of the records beside a balanced one of the same size (wall
seconds and their ratio; `--no-skew` skips it). The machine is shared: `uptime` before and after is printed.
Last line: one JSON object.

Measured here (2 cores shared with up to 6 others; CPU-time figures, since wall time followed the load):
  Nemotron-CC, 2 GB, load 15: 224 core-hours for 2T tokens (normalize 22,936, exact dedup 16,270, fuzzy
  dedup 8,873, tokenize 17,444 docs per CPU-second); before issue 32's changes, same corpus and load: 432
  (17,567, 10,115, 5,418, 5,096). Curve, load 5-10: 252 / 218 / 216 core-hours at 0.25 / 1 / 4 GB (4 GB
  again at load 5: 198); 16 GB stopped by --budget-minutes 60 (64 projected minutes, 21 spent). Once fuzzy
  dedup computed sets for candidates only at any size, the whole curve, load 3.1-3.5: 216 / 183 / 180 / 204
  core-hours at 0.25 / 1 / 4 / 16 GB (fuzzy dedup 10,211 / 10,458 / 10,315 / 8,158 docs per CPU-second;
  4,419,744 documents at 16 GB, 8.7 GB of fuzzy scratch, ~40 minutes with generation; exact dedup peaked at
  1,052 MB of 1,024). With exact dedup's duplicates table as arrays, 16 GB then 0.25 GB in a fresh clone (load
  0.9-2.1, 0-0.4): fuzzy dedup 9,806 vs 11,283 docs per CPU-second (-13%), exact dedup 22,624 vs 21,518 at
  961 MB peak; 171 and 180 core-hours.
  Common Crawl, load 4-7: 4,966 / 4,162 / 4,711 core-hours at 0.25 / 1 / 4 GB of HTML, about half of it
  extraction (~300 pages per CPU-second). With extraction, language id, quality and PII sped up (issue 32),
  1 GB, load 0.5-0.9 (a fresh clone's own build): 1,728 core-hours (extract 1,063 at 594 pages per
  CPU-second, langid 157, quality 124, PII 60, exact dedup 56, fuzzy dedup 115, tokenize 152); the same
  command at session start, before the langid and quality kernels (load 3-6): 3,831.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
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
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import common_crawl
import nemotron_cc
from nemotron_sample import SPLITS
from scale_corpora import _document, _vocabulary, generate, generate_warc  # noqa: F401 - other benchmarks import them from here

from zephyr import Dataset, execution
from zephyr.engine import executor

TARGET_TOKENS = 2e12


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


# -------------------------------------------------------------------------------------------- steps
def _measure(name: str, step: Any, inputs: str | None, results: dict[str, dict], summary_of: Any) -> Any:
    """Run one step under the CPU and run captures; store its figures in `results[name]`."""
    text = _text_bytes(inputs) if inputs else 0
    with _Captured() as captured, TreeCpu() as cpu:
        started = time.perf_counter()
        summary = step()
        seconds = time.perf_counter() - started
    docs_in, docs_out, tokens = summary_of(summary)
    results[name] = {
        "seconds": seconds,
        "docs_in": docs_in,
        "docs_out": docs_out,
        "text_mb": text / 1e6,
        "cpu_seconds": cpu.seconds,
        "docs_s_cpu": docs_in / cpu.seconds if cpu.seconds else 0.0,
        "peak_rss": captured.peak_rss,
        "scratch_bytes": captured.scratch_bytes,
        "tokens": tokens,
    }
    print(f"  {name} done in {seconds:.1f} s ({cpu.seconds:.1f} CPU s)", flush=True)
    return summary


def _documents(summary: dict) -> tuple[int, int, None]:
    return summary["documents_in"], summary["documents_out"], None


def _remove(*paths: str) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def run_nemotron(corpus: Path, out: Path, args: argparse.Namespace) -> dict[str, dict]:
    results: dict[str, dict] = {}
    docs, exact, fuzzy = str(out / "normalize"), str(out / "exact_dedup"), str(out / "fuzzy_dedup")
    raw = str(corpus / "*" / "*.jsonl.zst")
    with _engine(args, out):
        recipe = nemotron_cc.RecipeConfig()  # the recipe's defaults, as `zephyr run` passes them to its steps
        normalize = {"id_field": recipe.id_field, "skip_bad": False, "max_chars": recipe.max_document_chars}
        _measure(
            "normalize", lambda: nemotron_cc.normalize(docs, config=normalize, inputs=[raw]), raw, results, _documents
        )
        _measure(
            "exact_dedup",
            lambda: nemotron_cc.exact_dedup(exact, config={"num_shards": args.num_shards}, docs=docs),
            str(Path(docs) / "*" / "*.jsonl.zst"),
            results,
            _documents,
        )
        if not args.keep_outputs:
            _remove(docs)
        _measure(
            "fuzzy_dedup",
            lambda: nemotron_cc.fuzzy_dedup(
                fuzzy, config={"threshold": 0.8, "num_shards": args.num_shards}, docs=exact
            ),
            str(Path(exact) / "*.jsonl.zst"),
            results,
            _documents,
        )
        if not args.keep_outputs:
            _remove(exact)

        def tokenized(summary: dict) -> tuple[int, int, int]:
            n = sum(s["documents"] + s["validation_documents"] for s in summary.values())
            return n, n, sum(s["tokens"] + s["validation_tokens"] for s in summary.values())

        config = {"splits": list(SPLITS), "tokenizer": args.tokenizer, "validation_fraction": 0.0}
        _measure(
            "tokenize",
            lambda: nemotron_cc.tokenize(str(out / "tokenize"), config=config, docs=fuzzy),
            str(Path(fuzzy) / "docs" / "*" / "*.jsonl.zst"),
            results,
            tokenized,
        )
        if not args.keep_outputs:
            _remove(fuzzy, str(out / "tokenize"))
    return results


def run_common_crawl(corpus: Path, out: Path, args: argparse.Namespace) -> dict[str, dict]:
    results: dict[str, dict] = {}
    recipe = common_crawl.RecipeConfig(num_shards=args.num_shards, tokenizer=args.tokenizer)
    chain = [
        ("extract", common_crawl.extract_step, common_crawl.ExtractStep(), "warcs"),
        ("langid", common_crawl.langid_step, recipe.language_id(), "docs"),
        ("quality", common_crawl.quality_step, common_crawl.QualityFilter(), "docs"),
        ("pii", common_crawl.pii_step, common_crawl.PiiRedactor(), "docs"),
        ("exact_dedup", common_crawl.exact_dedup_step, {"num_shards": args.num_shards}, "docs"),
        (
            "fuzzy_dedup",
            common_crawl.fuzzy_dedup_step,
            common_crawl.FuzzyDedupConfig(num_shards=args.num_shards),
            "docs",
        ),
        ("tokenize", common_crawl.tokenize_step, common_crawl.TokenizeStep(args.tokenizer), "docs"),
    ]
    upstream: str = str(corpus / "*.warc.gz")
    previous = None
    with _engine(args, out):
        for name, fn, config, key in chain:
            path = str(out / name)

            def counted(summary: dict, name: str = name) -> tuple[int, int, int | None]:
                return summary["documents_in"], summary["documents_out"], summary.get("tokens")

            step_input = upstream
            _measure(
                name,
                lambda fn=fn, path=path, config=config, key=key, step_input=step_input: fn(
                    path, config=config, **{key: step_input}
                ),
                None,
                results,
                counted,
            )
            if previous and not args.keep_outputs:
                _remove(previous)
            previous, upstream = path, path
        if not args.keep_outputs:
            _remove(previous)
    return results


def _engine(args: argparse.Namespace, out: Path) -> Any:
    return execution(
        backend="processes",
        workers=args.workers,
        memory_per_worker=args.memory_per_worker,
        scratch=str(out / "scratch"),
        summary=False,
        progress=False,
    )


# ------------------------------------------------------------------------------------------- report
def _figures(results: dict[str, dict], corpus: dict, workers: int) -> tuple[dict[str, dict], float | None]:
    """Per step: CPU-seconds and wall worker-seconds per input document; and tokens per input document."""
    tokens = results.get("tokenize", {}).get("tokens")
    per_doc = tokens / corpus["documents"] if tokens else None
    out = {}
    for name, r in results.items():
        share = r["docs_in"] / corpus["documents"]  # this step's documents per input document
        out[name] = {
            "cpu_per_input_doc": r["cpu_seconds"] / corpus["documents"],
            "wall_per_input_doc": r["seconds"] * workers / corpus["documents"],
            "share": share,
        }
    return out, per_doc


def print_size(pipeline: str, gb: float, corpus: dict, results: dict[str, dict], args: argparse.Namespace) -> dict:
    from zephyr.engine.context import parse_size

    budget = parse_size(args.memory_per_worker)
    per_step, tokens_per_doc = _figures(results, corpus, args.workers)
    print(
        f"\n{pipeline}, {gb:g} GB ({corpus['text_bytes'] / 1e9:.2f} GB of text, {corpus['documents']:,} input "
        f"documents); {args.workers} workers, memory_per_worker {args.memory_per_worker}; load "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    header = (
        f"{'step':<12}{'seconds':>9}{'CPU s':>9}{'docs in':>11}{'docs out':>11}{'docs/CPU-s':>12}"
        f"{'peak RSS MB':>13}{'budget MB':>11}{'scratch MB':>12}{'2T core-h':>11}{'(wall)':>9}"
    )
    print(header)
    print("-" * len(header))
    figures: dict[str, Any] = {"gb": gb, "documents": corpus["documents"]}
    total_cpu = total_wall = 0.0
    needed = TARGET_TOKENS / tokens_per_doc if tokens_per_doc else None
    for name, r in results.items():
        cpu_h = needed * per_step[name]["cpu_per_input_doc"] / 3600 if needed else float("nan")
        wall_h = needed * per_step[name]["wall_per_input_doc"] / 3600 if needed else float("nan")
        total_cpu += cpu_h if needed else 0.0
        total_wall += wall_h if needed else 0.0
        print(
            f"{name:<12}{r['seconds']:>9.1f}{r['cpu_seconds']:>9.1f}{r['docs_in']:>11,}{r['docs_out']:>11,}"
            f"{r['docs_s_cpu']:>12,.0f}{r['peak_rss'] / (1 << 20):>13,.0f}{budget / (1 << 20):>11,.0f}"
            f"{r['scratch_bytes'] / (1 << 20):>12,.0f}{cpu_h:>11,.0f}{wall_h:>9,.0f}"
        )
        figures[name] = {
            "seconds": round(r["seconds"], 1),
            "cpu_seconds": round(r["cpu_seconds"], 1),
            "docs_in": r["docs_in"],
            "docs_out": r["docs_out"],
            "docs_s_cpu": round(r["docs_s_cpu"], 1),
            "peak_rss_mb": r["peak_rss"] >> 20,
            "within_budget": r["peak_rss"] <= budget,
            "scratch_mb": r["scratch_bytes"] >> 20,
            "core_hours_2T_cpu": round(cpu_h) if needed else None,
            "core_hours_2T_wall": round(wall_h) if needed else None,
        }
    if needed:
        print(
            f"2T tokens: {tokens_per_doc:,.0f} tokens per input document -> {needed:,.3g} documents: "
            f"{total_cpu:,.0f} core-hours (CPU time; {total_wall:,.0f} from wall time x {args.workers} workers)"
        )
        figures.update(
            tokens_per_input_doc=round(tokens_per_doc, 1),
            total_2T_core_hours_cpu=round(total_cpu),
            total_2T_core_hours_wall=round(total_wall),
        )
    return figures


def print_curve(pipeline: str, curve: list[dict]) -> dict[str, Any]:
    """Docs per CPU-second per step and size, and the change from the smallest size to the largest."""
    steps = [k for k, v in curve[0].items() if isinstance(v, dict)]
    sizes = [c["gb"] for c in curve]
    print(f"\n{pipeline}: docs per CPU-second by size (change from {sizes[0]:g} GB to {sizes[-1]:g} GB)")
    print(f"{'step':<12}" + "".join(f"{f'{g:g} GB':>12}" for g in sizes) + f"{'change':>9}{'in budget':>11}")
    out: dict[str, Any] = {}
    for step in steps:
        rates = [c[step]["docs_s_cpu"] for c in curve if step in c]
        change = rates[-1] / rates[0] - 1 if rates and rates[0] else float("nan")
        within = all(c[step]["within_budget"] for c in curve if step in c)
        print(f"{step:<12}" + "".join(f"{r:>12,.0f}" for r in rates) + f"{change:>+9.0%}{str(within):>11}")
        out[step] = {"docs_s_cpu": rates, "change": round(change, 3), "within_budget": within}
    totals = [c.get("total_2T_core_hours_cpu") for c in curve]
    print("2T core-hours (CPU): " + ", ".join(f"{g:g} GB: {t:,}" for g, t in zip(sizes, totals, strict=False) if t))
    return out


# -------------------------------------------------------------------------------------------- estimate
def estimate_side_by_side(corpus: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`zephyr run --estimate` of the Nemotron recipe, then the real run: each step's wall seconds beside."""
    from zephyr.steps import DryRunStop

    argv = [
        "--input",
        str(corpus / "*" / "*.jsonl.zst"),
        "--output",
        str(out / "recipe"),
        "--no-train",
        "--num-shards",
        str(args.num_shards),
        "--tokenizer",
        args.tokenizer,
    ]
    config = nemotron_cc.parse_args(argv)
    engine = {
        "backend": "processes",
        "workers": args.workers,
        "memory_per_worker": args.memory_per_worker,
        "scratch": str(out / "scratch"),
        "summary": False,
        "progress": False,
    }
    captured = io.StringIO()
    started = time.perf_counter()
    with execution(**engine, dry_run=True, estimate=True):
        real_stdout, sys.stdout = sys.stdout, captured
        try:
            nemotron_cc.run(config)
        except DryRunStop:
            pass
        finally:
            sys.stdout = real_stdout
    estimate_seconds = time.perf_counter() - started
    table = captured.getvalue()
    predicted = {}
    for line in table.splitlines():
        parts = line.split()
        if len(parts) == 9 and parts[0] in ("normalize", "exact_dedup", "fuzzy_dedup", "tokenize", "mixture"):
            predicted[parts[0]] = float(parts[7].replace(",", ""))
    print("\n".join(line for line in table.splitlines() if not line.startswith(("stage ", "[estimate] step"))))
    started = time.perf_counter()
    with execution(**engine):
        outputs = nemotron_cc.run(config)
    real_seconds = time.perf_counter() - started
    print(
        f"\n--estimate took {estimate_seconds:,.0f} s; the real run {real_seconds:,.0f} s "
        f"(load {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )
    print(f"{'step':<14}{'predicted s':>13}{'measured s':>12}{'error':>9}")
    rows = {}
    for name, output in outputs.items():
        guess = predicted.get(name)
        error = (guess - output.seconds) / output.seconds if guess is not None and output.seconds >= 1 else None
        print(
            f"{name:<14}{guess if guess is not None else float('nan'):>13,.0f}{output.seconds:>12,.0f}"
            f"{error if error is not None else float('nan'):>+9.0%}"
        )
        rows[name] = {
            "predicted_s": guess,
            "measured_s": round(output.seconds, 1),
            "error": round(error, 3) if error is not None else None,
        }
    total_guess = sum(v for v in predicted.values())
    total_real = sum(o.seconds for o in outputs.values())
    print(f"{'total':<14}{total_guess:>13,.0f}{total_real:>12,.0f}{(total_guess - total_real) / total_real:>+9.0%}")
    if not args.keep_outputs:
        _remove(str(out / "recipe"))
    return {
        "steps": rows,
        "predicted_total_s": round(total_guess),
        "measured_total_s": round(total_real),
        "total_error": round((total_guess - total_real) / total_real, 3),
        "estimate_run_s": round(estimate_seconds),
    }


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
PIPELINES = {"nemotron": (generate, run_nemotron), "cc": (generate_warc, run_common_crawl)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="GB of text (HTML for cc) when not --curve")
    parser.add_argument("--curve", action="store_true", help="run every size of --sizes")
    parser.add_argument("--sizes", default="0.25,1,4,16", help="GB per size of the curve")
    parser.add_argument("--pipelines", default=None, help="nemotron,cc (default: nemotron; with --curve both)")
    parser.add_argument("--estimate", action="store_true", help="zephyr run --estimate beside the real run (nemotron)")
    parser.add_argument("--quick", action="store_true", help="0.05 GB, both pipelines, no skew")
    parser.add_argument(
        "--budget-minutes", type=float, default=60.0, help="stop the curve before a size that would not fit"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-per-worker", default="1GB")
    parser.add_argument("--num-shards", type=int, default=4, help="shards of the dedup shuffles")
    parser.add_argument("--tokenizer", default="smollm2")
    parser.add_argument("--skew-records", type=int, default=None, help="rows of the skew group_by (default 2M x gb)")
    parser.add_argument("--no-skew", action="store_true")
    parser.add_argument("--corpus-root", default=None, help="keep (and reuse) generated corpora here")
    parser.add_argument("--keep-outputs", action="store_true", help="keep every step's output")
    parser.add_argument("--tmp", default=None, help="directory for outputs and scratch")
    args = parser.parse_args(argv)
    if args.quick:
        args.gb, args.no_skew = 0.05, True
        args.pipelines = args.pipelines or "nemotron,cc"
    pipelines = (args.pipelines or ("nemotron,cc" if args.curve else "nemotron")).split(",")
    sizes = [float(x) for x in args.sizes.split(",")] if args.curve else [args.gb]
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="zephyr-bench-scale-", dir=args.tmp))
    load_before = os.getloadavg()
    figures: dict[str, Any] = {"bench": "pipeline_scale", "workers": args.workers, "sizes": sizes}
    started = time.perf_counter()
    try:
        for pipeline in pipelines:
            make, run = PIPELINES[pipeline]
            curve: list[dict] = []
            last: tuple[float, float] | None = None  # (gb, minutes it took)
            for gb in sizes:
                spent = (time.perf_counter() - started) / 60
                if last and spent + last[1] * gb / last[0] > args.budget_minutes:
                    print(
                        f"\n{pipeline}: stopped before {gb:g} GB: {last[1] * gb / last[0]:.0f} projected minutes "
                        f"(from {last[0]:g} GB) would pass --budget-minutes {args.budget_minutes:g} "
                        f"({spent:.0f} spent)",
                        flush=True,
                    )
                    figures[f"{pipeline}_stopped_before_gb"] = gb
                    break
                size_started = time.perf_counter()
                root = Path(args.corpus_root) if args.corpus_root else tmp
                corpus_dir = root / f"{pipeline}-{gb:g}gb"
                corpus = make(corpus_dir, gb)
                print(
                    f"{pipeline} {gb:g} GB: {corpus['documents']:,} documents, {corpus['text_bytes'] / 1e6:,.0f} MB "
                    f"of text, {corpus['compressed_bytes'] / 1e6:,.0f} MB on disk (generated in {corpus['seconds']} s)",
                    flush=True,
                )
                if args.estimate and pipeline == "nemotron":
                    figures["estimate"] = estimate_side_by_side(corpus_dir, tmp / "out", args)
                else:
                    results = run(corpus_dir, tmp / f"out-{pipeline}-{gb:g}", args)
                    curve.append(print_size(pipeline, gb, corpus, results, args))
                if not args.corpus_root:
                    _remove(str(corpus_dir))
                last = (gb, (time.perf_counter() - size_started) / 60)
            if len(curve) > 1:
                figures[f"{pipeline}_curve"] = print_curve(pipeline, curve)
            for c in curve:
                figures[f"{pipeline}_{c['gb']:g}gb"] = c
        skewed = {}
        if not args.no_skew and not args.curve and not args.estimate:
            skewed = skew(tmp, args.skew_records or int(2_000_000 * args.gb), args.workers, args.memory_per_worker)
            print(
                f"group_by, {args.skew_records or int(2_000_000 * args.gb):,} rows: balanced "
                f"{skewed['balanced']:.1f} s, "
                f"one key = 30% {skewed['skewed']:.1f} s (x{skewed['ratio']:.2f}); giant key reported with "
                f"{skewed['giant_key_records']:,} records"
            )
            figures.update({f"skew_{k}": round(v, 2) for k, v in skewed.items()})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"\nload average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (2 cores shared with other users)"
    )
    figures["load_before"], figures["load_after"] = round(load_before[0], 2), round(load_after[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
