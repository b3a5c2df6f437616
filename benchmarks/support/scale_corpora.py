"""Generated corpora for benchmarks/pipeline_scale.py (and the benchmarks that reuse its generator).

A helper module, not a benchmark: it sits in benchmarks/support so that `make bench` (benchmarks/*.py) skips it.

Nemotron-CC-shaped documents (`generate`): words from the real word frequencies of the prose on this machine
(the installed packages' descriptions and standard-library docstrings, as in recipes/nemotron_sample.py),
seven quality splits of `.jsonl.zst` files, 5% exact and 5% near copies. Common Crawl-shaped WARC files
(`generate_warc`): real pages from ../shared/data whose paragraphs hold generated prose instead of their own.
Both are deterministic for a size and seed, and reused from a folder that holds a finished one.
"""

from __future__ import annotations

import gzip
import html as html_lib
import io
import json
import re
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import zstandard

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "recipes"))

from nemotron_sample import SPLITS, _package_texts, _stdlib_texts  # noqa: E402

FILE_TEXT_BYTES = 16 << 20  # ~16 MB of text per file: a 2 GB corpus has ~18 files per split


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


def _finished(directory: Path, gb: float, seed: int) -> dict[str, Any] | None:
    """The description of a corpus already generated in DIR for this size and seed; else DIR is made empty."""
    done = directory / "corpus.json"
    if done.is_file():
        info = json.loads(done.read_text())
        if info["gb"] == gb and info["seed"] == seed:
            return info
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return None


def _finish(
    directory: Path, gb: float, seed: int, counts: dict[str, int], files: Iterable[Path], started: float
) -> dict[str, Any]:
    """Write DIR/corpus.json (what `_finished` reads back: size, seed, counts, bytes on disk, seconds) and
    return it."""
    info = {
        "gb": gb,
        "seed": seed,
        **counts,
        "compressed_bytes": sum(f.stat().st_size for f in files),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (directory / "corpus.json").write_text(json.dumps(info))
    return info


def _word_model(seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    """(the generator's random stream, the vocabulary, its cumulative frequencies)."""
    words, p = _vocabulary()
    cumulative = np.cumsum(p)
    cumulative[-1] = 1.0
    return np.random.default_rng(seed), words, cumulative


def generate(directory: Path, gb: float, seed: int = 0) -> dict[str, Any]:
    """Write the corpus (if DIR has no finished one for this size) and return its description."""
    if (info := _finished(directory, gb, seed)) is not None:
        return info
    started = time.perf_counter()
    rng, words, cumulative = _word_model(seed)
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
    counts = {"documents": docs, "exact_copies": exact, "near_copies": near, "text_bytes": text_bytes}
    return _finish(directory, gb, seed, counts, directory.rglob("*.zst"), started)


# -------------------------------------------------------------------------------------- WARC corpus
_PARAGRAPH = re.compile(rb"(<p\b[^>]*>)(.*?)(</p\s*>)", re.S | re.I)
_TAG = re.compile(rb"<[^>]+>")


def _templates() -> list[tuple[str, bytes]]:
    """(url, html) of the real pages in ../shared/data: the markup every generated page is built on."""
    pages = sorted((DATA / "aeb-dev" / "html").glob("*.html.gz")) + sorted((DATA / "web-pages").glob("*.html.gz"))
    out = []
    for page in pages:
        body = gzip.decompress(page.read_bytes())
        if len(_PARAGRAPH.findall(body)) >= 3:  # a page with prose to replace
            out.append((f"https://{page.name.removesuffix('.html.gz')}/", body))
    return out


def _prose(rng: np.random.Generator, words: np.ndarray, cumulative: np.ndarray, n_words: int) -> str:
    picks = words[np.searchsorted(cumulative, rng.random(max(1, n_words)))].tolist()
    out, i = [], 0
    while i < len(picks):
        sentence = picks[i : i + int(rng.integers(6, 29))]
        i += len(sentence)
        out.append(" ".join(sentence).capitalize() + ".")
    return " ".join(out)


def _page(template: bytes, rng: np.random.Generator, words: np.ndarray, cumulative: np.ndarray) -> bytes:
    def replace(match: re.Match) -> bytes:
        n_words = len(_TAG.sub(b" ", match.group(2)).split())
        if n_words < 3:
            return match.group(0)
        text = _prose(rng, words, cumulative, n_words).encode()
        return match.group(1) + html_lib.escape(text.decode()).encode() + match.group(3)

    return _PARAGRAPH.sub(replace, template)


def _warc_response(url: str, body: bytes, when: str) -> bytes:
    """One WARC response record as its own gzip member, as Common Crawl publishes them."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    raw = io.BytesIO()
    writer = WARCWriter(raw, gzip=False)
    http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=UTF-8")], protocol="HTTP/1.1")
    headers = {"WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>", "WARC-Date": when}
    record = writer.create_warc_record(
        url, "response", payload=io.BytesIO(body), length=len(body), http_headers=http, warc_headers_dict=headers
    )
    writer.write_record(record)
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def generate_warc(directory: Path, gb: float, seed: int = 0) -> dict[str, Any]:
    """Write `gb` GB of HTML as WARC files (if DIR has no finished corpus of this size) and describe it."""
    if (info := _finished(directory, gb, seed)) is not None:
        return info
    started = time.perf_counter()
    rng, words, cumulative = _word_model(seed)
    templates = _templates()
    budget, written, pages, exact, near, part = gb * 1e9, 0, 0, 0, 0, 0
    recent: list[tuple[int, bytes]] = []
    while written < budget:
        members, file_bytes = [], 0
        while file_bytes < 64e6 and written + file_bytes < budget:
            roll = rng.random()
            if roll < 0.05 and recent:
                body, exact = recent[int(rng.integers(len(recent)))][1], exact + 1
            elif roll < 0.10 and recent:
                source = recent[int(rng.integers(len(recent)))][1]
                body, near = _near_copy(source.decode("utf-8", "replace"), rng).encode(), near + 1
            else:
                template = templates[int(rng.integers(len(templates)))][1]
                body = _page(template, rng, words, cumulative)
                if len(recent) < 500:
                    recent.append((pages, body))
                elif rng.random() < 0.05:
                    recent[int(rng.integers(len(recent)))] = (pages, body)
            url = f"https://site{pages % 997}.example.org/page/{pages}"
            members.append(_warc_response(url, body, "2024-04-12T08:00:00Z"))
            file_bytes += len(body)
            pages += 1
        (directory / f"part-{part:05d}.warc.gz").write_bytes(b"".join(members))
        written += file_bytes
        part += 1
    counts = {"documents": pages, "exact_copies": exact, "near_copies": near, "text_bytes": written}
    return _finish(directory, gb, seed, counts, directory.glob("*.warc.gz"), started)
