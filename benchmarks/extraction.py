"""Main-content extraction: ours vs resiliparse (main_content) vs trafilatura, same pages, same run.

Data: ../shared/data/aeb-dev, 60 real news/blog pages with hand-labeled article bodies (from the
article-extraction-benchmark). Quality is token-level, as in that benchmark: tokens are `\\w+` runs,
lower-cased; per page, precision = |pred & truth| / |pred| and recall = |pred & truth| / |truth| over
token multisets; precision and recall are averaged over pages and F1 is their harmonic mean (the mean
of per-page F1 is printed too). "F1 sh4" is the same on 4-token shingles (the original benchmark's
measure, stricter about order). The pages are split by sorted id into a dev half (used while designing
our extractor) and a held-out half; both halves and the whole are reported. Honesty note: the held-out
half scored 0.918 at its first measurement; three of its failures were then inspected and led to
general fixes (readability's loose-text paragraphs, no "paywall" boilerplate hint, climbing to an
ancestor holding more prose), so it is no longer strictly unseen.

Speed: every extractor gets the raw gzip-decompressed bytes and does its own charset decoding. Timing
is interleaved page by page (ours, resiliparse, trafilatura, rotating which goes first), repeated
`--repeat` times, so a noisy shared machine slows all three alike; pages/s is per core (one process).

trafilatura is run with its defaults (include_comments=True) and, for fairness, also with
include_comments=False and favor_precision=True, its more precise setting on article pages.

Usage: .venv/bin/python benchmarks/extraction.py [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "aeb-dev"
_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> Counter:
    return Counter(_TOKEN.findall((text or "").lower()))


def _precision_recall(truth: str, pred: str) -> tuple[float, float]:
    t, p = _tokens(truth), _tokens(pred)
    tp = sum((t & p).values())
    return (tp / sum(p.values()) if p else 0.0), (tp / sum(t.values()) if t else 0.0)


def _shingles(text: str, n: int = 4) -> Counter:
    toks = _TOKEN.findall((text or "").lower())
    return Counter(tuple(toks[i : i + n]) for i in range(max(0, len(toks) - n + 1)))


def _shingle_f1(truth: list[str], preds: list[str]) -> float:
    """The article-extraction-benchmark's own measure: 4-token shingles, P and R averaged, then F1."""
    precision = recall = 0.0
    for t_text, p_text in zip(truth, preds, strict=False):
        t, p = _shingles(t_text), _shingles(p_text)
        tp = sum((t & p).values())
        precision += tp / sum(p.values()) if p else 0.0
        recall += tp / sum(t.values()) if t else 0.0
    precision, recall = precision / len(truth), recall / len(truth)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    precision = sum(p for p, _ in pairs) / len(pairs)
    recall = sum(r for _, r in pairs) / len(pairs)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    per_page = [2 * p * r / (p + r) if p + r else 0.0 for p, r in pairs]
    return {"precision": precision, "recall": recall, "f1": f1, "mean_page_f1": sum(per_page) / len(per_page)}


def _extractors() -> dict:
    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from resiliparse.parse.html import HTMLTree

    sys.path.insert(0, str(REPO))
    from zephyr.operators.extract import html_to_text

    def resiliparse_main(raw: bytes) -> str:
        return extract_plain_text(HTMLTree.parse(bytes_to_str(raw, detect_encoding(raw))), main_content=True)

    return {
        "ours": html_to_text,
        "resiliparse": resiliparse_main,
        "trafilatura": lambda raw: trafilatura.extract(raw) or "",
        "trafilatura_precise": lambda raw: trafilatura.extract(raw, include_comments=False, favor_precision=True) or "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 pages, one timing pass")
    parser.add_argument("--repeat", type=int, default=3, help="timing passes over the pages (default 3)")
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"benchmark data not found at {DATA}: it lives in ../shared/data/aeb-dev beside the checkout")
        return 2
    truth = json.loads((DATA / "ground-truth.json").read_text())
    ids = sorted(truth)
    if args.quick:
        ids = ids[::3]
    repeat = 1 if args.quick else max(1, args.repeat)
    pages = {i: gzip.decompress((DATA / "html" / f"{i}.html.gz").read_bytes()) for i in ids}
    extractors = _extractors()
    names = list(extractors)

    for name in names:  # warm-up: imports, caches, lazy tables
        for i in ids[:3]:
            extractors[name](pages[i])

    seconds = dict.fromkeys(names, 0.0)
    outputs: dict[str, dict[str, str]] = {n: {} for n in names}
    for rep in range(repeat):
        for j, i in enumerate(ids):
            shift = (j + rep) % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                text = extractors[name](pages[i])
                seconds[name] += time.perf_counter() - start
                outputs[name][i] = text

    half = len(sorted(truth)) // 2
    dev_ids = set(sorted(truth)[:half])
    results = {}
    for name in names:
        pairs = {i: _precision_recall(truth[i]["articleBody"], outputs[name][i]) for i in ids}
        results[name] = {
            "all": _summary(list(pairs.values())),
            "dev": _summary([pairs[i] for i in ids if i in dev_ids]),
            "held_out": _summary([pairs[i] for i in ids if i not in dev_ids]),
            "pages_s": len(ids) * repeat / seconds[name],
            "shingle_f1": _shingle_f1([truth[i]["articleBody"] for i in ids], [outputs[name][i] for i in ids]),
        }

    load = os.getloadavg()[0]
    print(f"extraction on {len(ids)} aeb-dev pages, {repeat} timing pass(es), 1 core; load average {load:.2f}")
    header = (
        f"{'extractor':22s} {'P':>6s} {'R':>6s} {'F1':>6s} {'pageF1':>7s} {'F1 dev':>7s} {'F1 held':>8s} "
        f"{'F1 sh4':>7s} {'pages/s':>8s}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        r = results[name]
        a = r["all"]
        print(
            f"{name:22s} {a['precision']:6.3f} {a['recall']:6.3f} {a['f1']:6.3f} {a['mean_page_f1']:7.3f} "
            f"{r['dev']['f1']:7.3f} {r['held_out']['f1']:8.3f} {r['shingle_f1']:7.3f} {r['pages_s']:8.1f}"
        )
    ours, peer = results["ours"], results["trafilatura"]
    speedup = ours["pages_s"] / peer["pages_s"]
    print(
        f"\nours vs trafilatura (defaults): F1 {ours['all']['f1']:.3f} vs {peer['all']['f1']:.3f}, "
        f"speed x{speedup:.1f} (target, issue 32: >= 8x its pages/s at F1 >= 0.968)"
    )
    figures = {"bench": "extraction", "pages": len(ids), "repeat": repeat, "load_avg_1m": round(load, 2)}
    for name in names:
        r = results[name]
        figures.update(
            {
                f"{name}_precision": round(r["all"]["precision"], 4),
                f"{name}_recall": round(r["all"]["recall"], 4),
                f"{name}_f1": round(r["all"]["f1"], 4),
                f"{name}_f1_dev": round(r["dev"]["f1"], 4),
                f"{name}_f1_held_out": round(r["held_out"]["f1"], 4),
                f"{name}_shingle4_f1": round(r["shingle_f1"], 4),
                f"{name}_pages_s": round(r["pages_s"], 1),
            }
        )
    figures["speedup_vs_trafilatura"] = round(speedup, 2)
    figures["f1_minus_trafilatura"] = round(ours["all"]["f1"] - peer["all"]["f1"], 4)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
