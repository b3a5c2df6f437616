"""Quality signals (Gopher quality + repetition, C4, FineWeb): ours vs the plain-Python version, same texts, same run.

Data: every HTML page of ../shared/data (web-pages and aeb-dev, 170 pages), extracted with our
`ExtractText` as the Common Crawl pipeline does, plus the aeb-dev hand-labeled article bodies.

Ours: with the C kernel (`zephyr.operators.quality_kernel`) when built, and its NumPy fallback.
Peer: datatrove's Gopher/C4/FineWeb filters are not installed in this venv (they belong in their own
venv, see ENVIRONMENT.md), so the peer is our previous implementation, kept unchanged as the tests'
oracle (`tests/quality_reference.py`: Counters over n-gram tuples, per-word Python lists). Both must
give equal signals on every text; the benchmark checks that before timing and reports it.

Timing: CPU time of this one process (`time.process_time`), so docs/s is per core; the two
implementations alternate over the whole set `--repeat` times, so a noisy shared machine slows both
alike. `QualityFilter` (signals + the four rules, what the pipeline step runs) is timed too, and the
scaling on a 1 MB and a 4 MB repeated line shows the cost stays linear in the text.

Usage: .venv/bin/python benchmarks/quality.py [--quick] [--repeat N]
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))  # the reference implementation the tests compare against

from quality_reference import reference_quality_signals  # noqa: E402

from zephyr.operators import quality  # noqa: E402
from zephyr.operators.extract import ExtractText  # noqa: E402
from zephyr.operators.quality import QualityFilter, quality_signals  # noqa: E402


def load_texts(limit: int | None) -> list[str]:
    extract = ExtractText()
    texts = []
    for path in sorted(DATA.rglob("*.html*")):
        raw = path.read_bytes()
        text = extract({"id": path.name, "html": gzip.decompress(raw) if path.suffix == ".gz" else raw})["text"]
        if text:
            texts.append(text)
    truth = json.loads((DATA / "aeb-dev" / "ground-truth.json").read_text())
    texts += [v["articleBody"] for v in truth.values() if v.get("articleBody")]
    return texts[:limit] if limit else texts


def _cpu_seconds(fn, texts: list[str]) -> float:
    start = time.process_time()
    for text in texts:
        fn(text)
    return time.process_time() - start


def _numpy_path(fn):
    """`fn` run with the C kernel out of the way: the NumPy fallback of the word statistics."""

    def run(text: str):
        kernel = quality._kernel
        quality._kernel = lambda: None
        try:
            return fn(text)
        finally:
            quality._kernel = kernel

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 texts, 2 repeats")
    parser.add_argument("--repeat", type=int, default=None, help="passes over the texts per implementation")
    args = parser.parse_args()
    if not DATA.is_dir():
        print(json.dumps({"bench": "quality", "skipped": f"no {DATA}"}))
        return
    repeat = args.repeat or (2 if args.quick else 5)
    texts = load_texts(60 if args.quick else None)
    chars = sum(map(len, texts))
    print(f"{len(texts)} texts, {chars / len(texts) / 1000:.1f} KB of text on average; load {os.getloadavg()[0]:.2f}")

    kernel = quality._kernel() is not None
    print(f"C kernel (zephyr.operators.quality_kernel): {'built' if kernel else 'NOT built, ours = NumPy path'}")
    numpy_signals = _numpy_path(quality_signals)
    mismatches = sum(quality_signals(t) != reference_quality_signals(t) for t in texts)
    mismatches += sum(numpy_signals(t) != reference_quality_signals(t) for t in texts)
    print(f"signals equal to the reference on {2 * len(texts) - mismatches} of {2 * len(texts)} (text, path)")

    ours = numpy_s = reference = filter_s = 0.0
    quality_filter = QualityFilter()
    for _ in range(repeat):
        ours += _cpu_seconds(quality_signals, texts)
        numpy_s += _cpu_seconds(numpy_signals, texts)
        reference += _cpu_seconds(reference_quality_signals, texts)
        filter_s += _cpu_seconds(lambda t: quality_filter({"text": t}), texts)
    n = len(texts) * repeat
    rows = {
        "ours": ours,
        "ours, NumPy fallback": numpy_s,
        "reference (previous, Counter)": reference,
        "ours, QualityFilter": filter_s,
    }
    print(f"{'quality_signals':32s} {'us/doc':>8s} {'docs/s/core':>12s}")
    for name, seconds in rows.items():
        print(f"{name:32s} {seconds / n * 1e6:8.0f} {n / seconds:12.0f}")
    speedup = reference / ours
    print(f"speedup over the reference: {speedup:.2f}x")

    line = "Buy the best cheap watches online today. " * 25_000  # ~1 MB, one line
    scaling = {}
    for copies in (1, 4):
        text = "\n".join([line] * copies)
        scaling[f"{copies}MB_ours_s"] = round(_cpu_seconds(quality_signals, [text]), 3)
        scaling[f"{copies}MB_reference_s"] = round(_cpu_seconds(reference_quality_signals, [text]), 3)
    print(
        f"a 1 MB repeated line: ours {scaling['1MB_ours_s']} s, reference {scaling['1MB_reference_s']} s; "
        f"4 MB: ours {scaling['4MB_ours_s']} s, reference {scaling['4MB_reference_s']} s"
    )
    print(
        json.dumps(
            {
                "bench": "quality",
                "texts": len(texts),
                "repeat": repeat,
                "equal_signals": mismatches == 0,
                "kernel": kernel,
                "ours_us_per_doc": round(ours / n * 1e6, 1),
                "numpy_path_us_per_doc": round(numpy_s / n * 1e6, 1),
                "reference_us_per_doc": round(reference / n * 1e6, 1),
                "quality_filter_us_per_doc": round(filter_s / n * 1e6, 1),
                "ours_docs_per_s_per_core": round(n / ours),
                "reference_docs_per_s_per_core": round(n / reference),
                "speedup": round(speedup, 2),
                **scaling,
                "load_1min": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
