"""The embedded Nemotron-CC-style sample: built deterministically from text shipped with the project.

No download, and nothing read from the machine: the prose is `sample_text/python-docs.jsonl.zst` (the
Python Language Reference's topics and standard-library docstrings from CPython 3.11.7, PSF License; see
sample_text/NOTICE.md), so every machine builds the same sample and `make run` prints the same counts
(tests/recipes/test_nemotron_sample.py holds them). Documents are cut from that text and assigned to
Nemotron-CC's seven quality splits by construction:

- high (actual): long coherent passages; high (synthetic): question/answer rephrasings of them;
- medium-high, medium, medium-low: progressively shorter passages with more markup and boilerplate;
- low (actual): navigation/boilerplate pages and word salad from a bigram model; low (synthetic):
  rephrasings of low passages.

Exact duplicates (the same text under a new record id) and near duplicates (a few percent of words
edited) are planted within and across splits, and their ids are listed in `planted.json` so the recipe
can report what dedup found. Same seed and size: the same records on every machine (the compressed bytes
follow the zstandard library's version).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import random
import re
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import zstandard

from zephyr.fs import atomic_write, remove_dead_temps

__all__ = ["SPLITS", "SAMPLE_TEXT", "build_sample"]

SPLITS = (
    "high_actual",
    "high_synthetic",
    "medium_high",
    "medium",
    "medium_low",
    "low_actual",
    "low_synthetic",
)
SAMPLE_TEXT = Path(__file__).resolve().parent / "sample_text" / "python-docs.jsonl.zst"
# The texts of this machine (`_package_texts`, `_stdlib_texts`) are what recipes/datashop_edu.py builds its offline
# corpus from and benchmarks/pipeline_scale.py its vocabulary; the sample itself reads only SAMPLE_TEXT.
_STDLIB_MODULES = (
    "argparse",
    "asyncio/events",
    "collections/__init__",
    "concurrent/futures/_base",
    "contextlib",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email/message",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "http/client",
    "inspect",
    "json/__init__",
    "logging/__init__",
    "mailbox",
    "multiprocessing/pool",
    "pathlib",
    "pickle",
    "random",
    "shutil",
    "socket",
    "statistics",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest/case",
    "urllib/request",
    "zipfile/__init__",
)
_BOILERPLATE = (
    "Home | About | Contact | Privacy Policy | Terms of Use",
    "Sign in to your account to continue. Forgot your password?",
    "We use cookies to improve your experience. Accept all cookies?",
    "Share this: Facebook Twitter LinkedIn Email Print",
    "Copyright (c) All rights reserved. Powered by WordPress.",
    "Click here to subscribe to our newsletter and get 10% off!",
    "Related posts: You may also like these articles",
    "Page 1 of 12 Next >> Last",
)


def _package_texts() -> list[str]:
    texts = []
    dists = sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())
    seen = set()
    for dist in dists:
        name = (dist.metadata["Name"] or "").lower()
        if name in seen:
            continue
        seen.add(name)
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        if len(body) > 1500:
            texts.append(body)
    return texts


def _stdlib_texts() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for module in _STDLIB_MODULES:
        path = root / f"{module}.py"
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parts = [
            ast.get_docstring(node)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        parts = [p for p in parts if p and len(p) > 120]
        if parts:
            texts.append("\n\n".join(parts))
    return texts


def _sample_texts() -> list[str]:
    """The shipped prose the sample is cut from, in the file's order (sample_text/NOTICE.md says what it is)."""
    payload = zstandard.ZstdDecompressor().decompress(SAMPLE_TEXT.read_bytes())
    return [orjson.loads(line)["text"] for line in payload.splitlines()]


def _paragraphs(text: str) -> list[str]:
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        block = re.sub(r"[ \t]+", " ", block).strip()
        if len(block) >= 40:
            paragraphs.append(block)
    return paragraphs


def _passages(texts: list[str], rng: random.Random, min_chars: int, max_chars: int) -> Iterator[str]:
    for text in texts:
        paragraphs = _paragraphs(text)
        i = 0
        while i < len(paragraphs):
            target = rng.randint(min_chars, max_chars)
            chunk = []
            size = 0
            while i < len(paragraphs) and size < target:
                chunk.append(paragraphs[i])
                size += len(paragraphs[i])
                i += 1
            if size >= min_chars // 2:
                yield "\n\n".join(chunk)


def _bigram_model(words: list[str]) -> dict[str, list[str]]:
    followers: dict[str, list[str]] = {}
    for a, b in zip(words, words[1:], strict=False):
        followers.setdefault(a, []).append(b)
    return followers


def _bigram_salad(words: list[str], followers: dict[str, list[str]], rng: random.Random, n_words: int) -> str:
    word = rng.choice(words)
    out = []
    for _ in range(n_words):
        out.append(word)
        nxt = followers.get(word)
        word = rng.choice(nxt) if nxt and rng.random() < 0.8 else rng.choice(words)
    return " ".join(out)


def _question_answer(passage: str, rng: random.Random) -> str:
    sentences = re.split(r"(?<=[.!?])\s+", passage)
    topic = " ".join(sentences[0].split()[:8]).rstrip(".,:;")
    style = rng.choice(("qa", "summary", "explain"))
    if style == "qa":
        return f"Question: What does the following describe: {topic}?\nAnswer: " + " ".join(sentences[:6])
    if style == "summary":
        return "Summary of the key points.\n" + "\n".join(f"- {s}" for s in sentences[:8] if s)
    return f"Let us explain this step by step. {passage[:1500]}"


def _near_duplicate(text: str, rng: random.Random, rate: float) -> str:
    words = text.split(" ")
    for _ in range(max(1, int(len(words) * rate))):
        i = rng.randrange(len(words))
        op = rng.random()
        if op < 0.4:
            words[i] = words[i].upper() if rng.random() < 0.5 else words[i][::-1]
        elif op < 0.7:
            words.insert(i, rng.choice(("indeed", "also", "very", "new", "the")))
        elif len(words) > 10:
            del words[i]
    return " ".join(words)


def _record(text: str, split: str, rng: random.Random, index: int) -> dict:
    record_id = f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"
    host = rng.choice(("example.org", "docs.example.com", "blog.example.net", "news.example.io", "wiki.example.edu"))
    return {
        "text": text,
        "warc_record_id": record_id,
        "metadata": {
            "url": f"https://{host}/{split}/{index}",
            "quality_split": split,
            "language": "en",
            "crawl": "CC-MAIN-2024-10",
        },
    }


def build_sample(output: str | Path, *, seed: int = 0, docs_per_split: int = 420, files_per_split: int = 2) -> Path:
    """Write the sample under `output/<split>/part-XXXXX.jsonl.zst` (if not already there); returns output.

    Any docs_per_split >= 1 works. The shipped text gives about 460 distinct long passages and 1,400
    short ones; splits that would need more reuse passages from the start of the pool
    (repeated passages are then duplicates that `planted.json` does not list; it says how many documents
    were cut from a reused passage under "reused_passages"). A build killed part way (kill -9) leaves no
    `planted.json`, so the next call builds again, removing the killed attempt's temporary files.
    """
    if not isinstance(docs_per_split, int) or docs_per_split < 1:
        raise ValueError(f"docs_per_split must be a positive integer, got {docs_per_split!r}")
    if files_per_split < 1:
        raise ValueError(f"files_per_split must be at least 1, got {files_per_split!r}")
    output = Path(output)
    done = output / "planted.json"
    if done.is_file():
        return output
    rng = random.Random(seed)
    texts = _sample_texts()
    rng.shuffle(texts)
    long_passages = list(_passages(texts, rng, 1500, 4000))
    short_passages = list(_passages(texts, rng, 300, 1200))
    vocabulary = " ".join(texts).split()
    followers = _bigram_model(vocabulary)
    rng.shuffle(long_passages)
    rng.shuffle(short_passages)
    reused = 0

    def take(pool: list[str], start: int, n: int) -> list[str]:
        """n passages from `pool[start:]`, going on from the pool's start when it runs out (so a split that
        needs more passages than are left repeats each at most once per round of the pool, instead of
        cycling the few left at its end)."""
        nonlocal reused
        reused += min(n, max(0, start + n - len(pool)))
        return [pool[(start + i) % len(pool)] for i in range(n)]

    def boilerplate(n_lines: int) -> str:
        return "\n".join(rng.choice(_BOILERPLATE) for _ in range(n_lines))

    split_texts: dict[str, list[str]] = {}
    n = docs_per_split
    split_texts["high_actual"] = take(long_passages, 0, n)
    split_texts["high_synthetic"] = [_question_answer(p, rng) for p in take(long_passages, n, n)]
    split_texts["medium_high"] = take(short_passages, 0, n)
    split_texts["medium"] = [p + "\n\n" + boilerplate(2) for p in take(short_passages, n, n)]
    split_texts["medium_low"] = [
        boilerplate(3) + "\n" + p[:500] + "\n" + boilerplate(4) for p in take(short_passages, 2 * n, n)
    ]
    split_texts["low_actual"] = [
        boilerplate(rng.randint(4, 10)) if i % 2 else _bigram_salad(vocabulary, followers, rng, rng.randint(80, 300))
        for i in range(n)
    ]
    split_texts["low_synthetic"] = [
        _question_answer(_bigram_salad(vocabulary, followers, rng, 200), rng) for _ in range(n)
    ]

    records = {
        split: [_record(t, split, rng, i) for i, t in enumerate(texts_)] for split, texts_ in split_texts.items()
    }
    planted: dict[str, Any] = {"exact": [], "near": []}
    all_splits = list(SPLITS)
    for _ in range(int(0.05 * n * len(SPLITS))):  # 5% exact duplicates, within and across splits
        src_split, dst_split = rng.choice(all_splits), rng.choice(all_splits)
        source = rng.choice(records[src_split])
        copy = _record(source["text"], dst_split, rng, len(records[dst_split]))
        records[dst_split].append(copy)
        planted["exact"].append([source["warc_record_id"], copy["warc_record_id"]])
    for _ in range(int(0.05 * n * len(SPLITS))):  # 5% near duplicates (2-4% of words edited)
        src_split = rng.choice(("high_actual", "medium_high", "medium", "high_synthetic"))
        source = rng.choice(records[src_split])
        copy = _record(
            _near_duplicate(source["text"], rng, rng.uniform(0.02, 0.04)), src_split, rng, len(records[src_split])
        )
        records[src_split].append(copy)
        planted["near"].append([source["warc_record_id"], copy["warc_record_id"]])

    compressor = zstandard.ZstdCompressor(level=3)
    for split, split_records in records.items():
        rng.shuffle(split_records)
        folder = output / split
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(files_per_split):
            part = split_records[f::files_per_split]
            payload = b"".join(orjson.dumps(r) + b"\n" for r in part)
            url = str(folder / f"part-{f:05d}.jsonl.zst")
            remove_dead_temps(url)  # of a build killed while writing it (the recipe builds under its root's lock)
            with atomic_write(url, "wb", compression=None) as handle:
                handle.write(compressor.compress(payload))
    if reused:
        planted["reused_passages"] = reused
    remove_dead_temps(str(done))
    with atomic_write(str(done), "wb", compression=None) as handle:  # last: the sample is complete
        handle.write(json.dumps(planted).encode())
    return output
