"""Datashop test material: real pages extracted to text, contrasted with Python's reference docs.

The corpus is ~40 real English news/blog pages (aeb-dev) and German/English web pages
(trafilatura's cache), extracted with resiliparse, plus sections of the Python language reference
shipped with CPython (`pydoc_data.topics`): technical, educational text that a prompt about
programming or teaching should separate from news and shop pages.
"""

from __future__ import annotations

import gzip
from pathlib import Path


def _extract(path: Path) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    html = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
    return extract_plain_text(html, main_content=True)


def pydoc_documents(n: int) -> list[dict]:
    """`n` sections of the Python language reference, spread over the alphabet."""
    from pydoc_data.topics import topics

    names = sorted(k for k, v in topics.items() if len(v) > 600)
    step = max(1, len(names) // n)
    return [
        {"id": f"pydoc-{k}", "text": topics[k], "source": "python-reference", "metadata": {"topic": k}}
        for k in names[::step][:n]
    ]


def page_documents(shared_data: Path, n_news: int, n_web: int) -> list[dict]:
    docs = []
    for p in sorted((shared_data / "aeb-dev" / "html").glob("*.html.gz"))[: n_news * 2]:
        text = _extract(p)
        if len(text) > 400 and len([d for d in docs if d["source"] == "aeb-dev"]) < n_news:
            docs.append(
                {
                    "id": f"aeb-{p.name.split('.')[0][:16]}",
                    "text": text,
                    "source": "aeb-dev",
                    "metadata": {"file": p.name},
                }
            )
    webs = []
    for p in sorted((shared_data / "web-pages").glob("*.html.gz")):
        text = _extract(p)
        if len(text) > 400:
            webs.append({"id": f"web-{p.name[:-8]}", "text": text, "source": "web-pages", "metadata": {"file": p.name}})
        if len(webs) >= n_web:
            break
    return docs + webs


def write_corpus(docs: list[dict], directory: Path, shards: int = 2) -> str:
    """Write `docs` as `shards` real .jsonl.zst files; returns the glob."""
    import json

    import zstandard

    directory.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        part = docs[s::shards]
        data = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in part).encode()
        (directory / f"corpus-{s:02d}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    return str(directory / "corpus-*.jsonl.zst")
