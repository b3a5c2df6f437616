"""Common Crawl: WARC -> extract -> language id -> quality -> PII -> exact + fuzzy dedup -> tokenize.

    zephyr run recipes/common_crawl.py                          # a small WARC built from real pages
    zephyr run recipes/common_crawl.py \\
        --input 's3://commoncrawl/crawl-data/CC-MAIN-2024-18/segments/*/warc/*.warc.gz' \\
        --output /mnt/out/cc --backend ray --scratch gs://bucket/scratch

Input: WARC files (`--input`, a local path, glob or gs:// / s3:// URL; read through Zephyr's filesystem
layer, one shard per file). Without `--input` the recipe builds a small Common Crawl-like WARC itself
(gzip per record, request + response + metadata records) from the real pages in `<repo>/../shared/data`
(aeb-dev/html and web-pages), with exact and near duplicates, redirects, errors and non-HTML responses
planted; the list of what was planted is in `<output>/sample-*/planted.json`.

Steps, each under `<output>/<step>-<version>` (the version hashes the step's code, config and inputs, so
a rerun skips finished steps and a changed step reruns only itself and what follows):

    sample       build the default WARC (only without --input)
    extract      WARC responses (HTTP 200, HTML) -> main-content text          drops: extract_empty
    langid       `lang`, `lang_score`                                         drops: lang_not_allowed, lang_low_score
    quality      Gopher / C4 / FineWeb heuristics, `quality_signals`          drops: gopher_*, c4_*, fineweb_*
    pii          e-mail / IP / phone numbers redacted in the text, `pii_counts`
    exact_dedup  normalized-text hash; the smallest id of a cluster is kept    drops: exact_duplicate
    fuzzy_dedup  MinHash-LSH + exact-Jaccard verification (>= 0.8)            drops: fuzzy_duplicate
    tokenize     the kept documents (`documents/*.jsonl.zst`) -> token store (`store/`, SmolLM2 by default)

Every filtering step writes ALL the documents it received, annotated (`filter_reason` on the ones it
drops), to `docs/*.jsonl.zst`, so each decision stays auditable; the next step reads only documents without
a `filter_reason`. The run ends with a summary: documents in/out per step, drop reasons, languages,
duplicates removed (exact / fuzzy), PII redacted and tokens.

The token store is a local directory (the trainer memory-maps it): with a remote `--output`, pass a
local `--store`.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import re
import struct
import sys
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from zephyr import Dataset, counters
from zephyr.engine.options import engine_overrides
from zephyr.fs import atomic_write, join, url_to_fs
from zephyr.operators import (
    ExtractText,
    LanguageId,
    PiiRedactor,
    QualityFilter,
    WarcReadConfig,
    dedup_documents,
    keep,
    warc_dataset,
)
from zephyr.operators.fuzzy_dedup import FuzzyDedupConfig, annotate_clusters, find_duplicate_clusters
from zephyr.recipe_cli import add_recipe_engine_options, recipe_main
from zephyr.steps import StepOutput, StepRunner

__all__ = [
    "SampleConfig",
    "RecipeConfig",
    "RecipeResult",
    "EmptyCorpusError",
    "default_data_dir",
    "build_sample_warc",
    "run_recipe",
    "format_summary",
    "main",
]

DOCS = "docs"  # every filtering step's annotated output: <step dir>/docs/part-*.jsonl.zst
_PART = "part-{shard:05d}-of-{total:05d}.jsonl.zst"


def default_data_dir() -> Path:
    """`<repo>/../shared/data`: the real pages the default sample is built from."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


# ------------------------------------------------------------------------------------ the sample WARC


@dataclass(frozen=True)
class SampleConfig:
    """How the default WARC is built. `pages` ((relative path, size) of every source page) is part of
    the config so that the sample, and everything after it, is rebuilt when the source pages change."""

    data_dir: str
    pages: tuple[tuple[str, int], ...]
    files: int = 2  # WARC files (shards), like the segments of a crawl
    exact_duplicates: int = 5  # byte-identical copies of a page under another URL
    near_duplicates: int = 5  # copies with ~1 word in 80 changed and an update note added
    redirects: int = 3  # HTTP 301 with a small HTML body
    errors: int = 3  # HTTP 404 / 503 with an HTML error page
    seed: int = 2024
    crawl_date: str = "2024-04-12T08:00:00Z"
    builder_version: int = 1  # bump when the builder's output changes

    @staticmethod
    def from_data_dir(data_dir: Path, *, max_pages: int | None = None) -> SampleConfig:
        pages = _source_pages(data_dir)
        if max_pages is not None:
            pages = pages[:max_pages]
        rel = tuple((str(p.relative_to(data_dir)), p.stat().st_size) for p in pages)
        return SampleConfig(data_dir=str(data_dir), pages=rel)


def _source_pages(data_dir: Path) -> list[Path]:
    pages = sorted((data_dir / "aeb-dev" / "html").glob("*.html.gz")) + sorted(
        (data_dir / "web-pages").glob("*.html.gz")
    )
    if not pages:
        raise FileNotFoundError(
            f"the default sample is built from the real pages in {data_dir}/aeb-dev/html/*.html.gz and "
            f"{data_dir}/web-pages/*.html.gz, and none were found. Pass WARC files instead: "
            "zephyr run recipes/common_crawl.py --input 'path/or/bucket/*.warc.gz'"
        )
    return pages


_TLDS = {"com", "org", "net", "de", "at", "ch", "fr", "uk", "eu", "info", "io", "blog", "edu", "gov", "it", "es", "nl"}


def _page_url(rel: str, aeb_urls: dict[str, str]) -> str:
    """The page's URL (percent-encoded: WARC and HTTP headers are ASCII)."""
    return quote(_raw_page_url(rel, aeb_urls), safe=":/?&=%#@+,;~!$'()*[]")


def _raw_page_url(rel: str, aeb_urls: dict[str, str]) -> str:
    name = Path(rel).name.removesuffix(".html.gz")
    if rel.startswith("aeb-dev/") and name in aeb_urls:
        return aeb_urls[name]
    parts = name.split(".")
    if len(parts) > 2 and parts[-1] not in _TLDS:  # web-pages names are host.tld.slug
        return f"https://{'.'.join(parts[:-1])}/{parts[-1]}"
    return f"https://{name}/"


def _record_id(*parts: object) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, '|'.join(map(str, parts)))}>"


def _survives_default_filters(html: bytes) -> bool:
    """Whether a page survives the recipe's default extract + language + quality steps: planted
    duplicates are copies of such pages, so that dedup (which runs after the filters) sees them."""
    doc = ExtractText()({"id": "probe", "html": html.decode("utf-8", errors="replace"), "metadata": {}})
    doc = RecipeConfig().language_id()(doc)
    doc = QualityFilter()(doc)
    return not doc.get("filter_reason")


def _near_duplicate(html: bytes, rng: random.Random) -> bytes:
    """The page with about one word in 80 of its paragraphs replaced and an update note added: a
    revised copy of an article, with word 5-gram Jaccard similarity ~0.9 to the original."""
    text = html.decode("utf-8", errors="replace")
    replacements = ("recent", "several", "local", "major", "other", "new", "early", "final")
    edits = 0

    def edit_paragraph(match: re.Match) -> str:
        nonlocal edits
        pieces = re.split(r"(<[^>]*>)", match.group(2))
        for i, piece in enumerate(pieces):
            if piece.startswith("<"):
                continue
            words = re.split(r"(\s+)", piece)
            for j, word in enumerate(words):
                if word.isalpha() and len(word) > 3 and rng.random() < 1 / 80:
                    words[j] = rng.choice(replacements)
                    edits += 1
            pieces[i] = "".join(words)
        note = (
            "<p>Update: this article was revised after publication to correct details.</p>"
            if match.start() == first
            else ""
        )
        return match.group(1) + "".join(pieces) + match.group(3) + note

    paragraph = re.compile(r"(<p\b[^>]*>)(.*?)(</p>)", re.S | re.I)
    found = paragraph.search(text)
    if found is None:
        raise ValueError("near-duplicate source page has no <p> paragraph to edit")
    first = found.start()
    edited = paragraph.sub(edit_paragraph, text)
    if edits == 0:  # tiny article: change its first long word so the copy is never an exact duplicate
        edited = re.sub(r"(<p\b[^>]*>[^<]*?)\b([A-Za-z]{4,})\b", r"\1revised", edited, count=1)
    return edited.encode("utf-8")


def _tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)  # 2x2 RGB
    pixels = zlib.compress(b"\x00" + b"\xff\x00\x00" * 2 + b"\x00" + b"\x00\x00\xff" * 2, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _non_html_responses() -> list[tuple[str, str, bytes]]:
    """(url, content type, body) of responses a crawl fetches besides HTML pages."""
    return [
        ("https://www.example.org/robots.txt", "text/plain", b"User-agent: *\nDisallow: /private/\n"),
        (
            "https://api.example.org/v1/items?page=2",
            "application/json",
            json.dumps({"items": [{"id": 1, "name": "first"}, {"id": 2, "name": "second"}], "next": 3}).encode(),
        ),
        ("https://static.example.org/img/logo.png", "image/png", _tiny_png()),
        ("https://static.example.org/css/site.css", "text/css", b"body { font-family: sans-serif; margin: 0 }\n"),
    ]


def _warc_record(
    kind: str,
    uri: str,
    payload: bytes,
    when: datetime,
    *,
    http: Any = None,
    extra: Sequence[tuple[str, str]] = (),
    content_type: str = "",
) -> tuple[bytes, str]:
    """One WARC record as its own gzip member (as Common Crawl publishes: a reader can seek to any
    record), and its id. warcio's own gzip uses level 9, several times slower than zlib's default."""
    from warcio.warcwriter import WARCWriter

    headers = {"WARC-Record-ID": _record_id(kind, uri, when.isoformat()), "WARC-Date": f"{when:%Y-%m-%dT%H:%M:%SZ}"}
    headers.update(dict(extra))
    raw = io.BytesIO()
    writer = WARCWriter(raw, gzip=False)
    record = writer.create_warc_record(
        uri,
        kind,
        payload=io.BytesIO(payload),
        length=len(payload),
        http_headers=http,
        warc_headers_dict=headers,
        warc_content_type=content_type,
    )
    writer.write_record(record)
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0), headers["WARC-Record-ID"]


def build_sample_warc(path: str, *, config: SampleConfig) -> dict[str, Any]:
    """Write `config.files` gzip-per-record WARC files under `path` (a StepRunner step).

    Same config, same bytes: record ids are uuid5 of their content's identity, dates are derived from
    `crawl_date`, and gzip members carry no timestamp.
    """
    from warcio.statusandheaders import StatusAndHeaders

    data_dir = Path(config.data_dir)
    truth = data_dir / "aeb-dev" / "ground-truth.json"
    aeb_urls = {k: v.get("url", "") for k, v in json.loads(truth.read_text()).items()} if truth.is_file() else {}
    rng = random.Random(config.seed)

    # (url, status, reason, content type, body, extra headers, label)
    responses: list[tuple[str, int, str, str, bytes, list[tuple[str, str]], str]] = []
    originals: list[tuple[str, bytes]] = []
    for rel, _size in config.pages:
        body = gzip.decompress((data_dir / rel).read_bytes())
        url = _page_url(rel, aeb_urls)
        try:
            body.decode("utf-8")
            content_type = "text/html; charset=UTF-8"
        except UnicodeDecodeError:
            content_type = "text/html"  # the page's <meta> (or detection) names the charset
        responses.append((url, 200, "OK", content_type, body, [], "page"))
        originals.append((url, body))

    # Planted duplicates: copies of English articles that pass the default filters, so dedup sees them.
    candidates = [
        (u, b) for (rel, _), (u, b) in zip(config.pages, originals, strict=False) if rel.startswith("aeb-dev/")
    ]
    rng.shuffle(candidates)
    wanted = config.exact_duplicates + config.near_duplicates
    chosen: list[tuple[str, bytes]] = []
    for url, body in candidates:
        if len(chosen) == wanted:
            break
        if _survives_default_filters(body):
            chosen.append((url, body))
    if len(chosen) < wanted:
        raise ValueError(
            f"the sample needs {wanted} English pages that pass the default filters to copy as duplicates, "
            f"found {len(chosen)} among the {len(candidates)} aeb-dev pages in {data_dir}; lower "
            "SampleConfig.exact_duplicates / near_duplicates"
        )
    planted: dict[str, list[dict[str, str]]] = {"exact_duplicates": [], "near_duplicates": []}
    for i, (url, body) in enumerate(chosen[: config.exact_duplicates]):
        copy_url = (
            re.sub(r"^https?://", "http://mirror.example.net/", url)
            + ("&" if "?" in url else "?")
            + f"utm_source=feed{i}"
        )
        responses.append((copy_url, 200, "OK", "text/html; charset=UTF-8", body, [], "exact_duplicate"))
        planted["exact_duplicates"].append({"url": copy_url, "original": url})
    for i, (url, body) in enumerate(chosen[config.exact_duplicates :]):
        copy_url = (
            re.sub(r"^https?://", "https://syndication.example.com/", url)
            + ("&" if "?" in url else "?")
            + f"rev={i + 2}"
        )
        responses.append(
            (copy_url, 200, "OK", "text/html; charset=UTF-8", _near_duplicate(body, rng), [], "near_duplicate")
        )
        planted["near_duplicates"].append({"url": copy_url, "original": url})

    # Responses the reader must skip: redirects, errors, non-HTML.
    for i in range(config.redirects):
        url, _ = originals[rng.randrange(len(originals))]
        old = re.sub(r"^https://", "http://", url) + f"?old={i}"
        body = (
            f'<html><body><h1>Moved Permanently</h1><p>The document has moved <a href="{url}">here</a>.</p>'
            "</body></html>"
        )
        responses.append((old, 301, "Moved Permanently", "text/html", body.encode(), [("Location", url)], "redirect"))
    for i in range(config.errors):
        status, reason = (404, "Not Found") if i % 2 == 0 else (503, "Service Unavailable")
        body = f"<html><head><title>{status} {reason}</title></head><body><h1>{reason}</h1><p>Sorry.</p></body></html>"
        url = f"https://www.example.org/missing/page-{i}.html"
        responses.append((url, status, reason, "text/html", body.encode(), [], "error"))
    for url, content_type, body in _non_html_responses():
        responses.append((url, 200, "OK", content_type, body, [], "non_html"))

    order = list(range(len(responses)))
    rng.shuffle(order)
    start = datetime.strptime(config.crawl_date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    labels: Counter[str] = Counter()
    records = 0
    for shard in range(config.files):
        name = f"CC-MAIN-{start:%Y%m%d}-sample-{shard:05d}.warc.gz"
        info = (
            f"software: zephyr recipes/common_crawl.py sample builder v{config.builder_version}\n"
            f"format: WARC File Format 1.1\nisPartOf: CC-MAIN-sample\nsource-pages: {len(config.pages)}\n"
        )
        data, _ = _warc_record(
            "warcinfo",
            "",
            info.encode(),
            start,
            extra=[("WARC-Filename", name)],
            content_type="application/warc-fields",
        )
        members = [data]
        for index in order[shard :: config.files]:
            url, status, reason, content_type, body, extra_headers, label = responses[index]
            when = start + timedelta(seconds=3 * index)
            host = re.sub(r"^https?://([^/?]+).*$", r"\1", url)
            target = re.sub(r"^https?://[^/?]+", "", url) or "/"
            request_headers = [
                ("Host", host),
                ("User-Agent", "CCBot/2.0 (https://commoncrawl.org/faq/)"),
                ("Accept", "text/html,*/*;q=0.8"),
            ]
            request = StatusAndHeaders(f"GET {target} HTTP/1.1", request_headers, is_http_request=True)
            data, request_id = _warc_record("request", url, b"", when, http=request)
            members.append(data)
            response_headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *extra_headers]
            http = StatusAndHeaders(f"{status} {reason}", response_headers, protocol="HTTP/1.1")
            data, response_id = _warc_record(
                "response", url, body, when, http=http, extra=[("WARC-Concurrent-To", request_id)]
            )
            members.append(data)
            fetch = f"fetchTimeMs: {50 + (index * 37) % 900}\n".encode()
            data, _ = _warc_record(
                "metadata",
                url,
                fetch,
                when,
                extra=[("WARC-Concurrent-To", response_id)],
                content_type="application/warc-fields",
            )
            members.append(data)
            labels[label] += 1
        records += len(members)
        with atomic_write(join(path, name), "wb", compression=None) as handle:
            handle.write(b"".join(members))
    with atomic_write(join(path, "planted.json"), "w", compression=None) as handle:
        json.dump(planted, handle, indent=1)
    return {
        "files": config.files,
        "warc_records": records,
        "source_pages": len(config.pages),
        "responses": dict(sorted(labels.items())),
        "planted_exact_duplicates": len(planted["exact_duplicates"]),
        "planted_near_duplicates": len(planted["near_duplicates"]),
        "planted_non_200": config.redirects + config.errors,
        "planted_non_html": len(_non_html_responses()),
    }


# ------------------------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class _CountIn:
    """Counts the documents entering a step (`recipe/in`)."""

    def __call__(self, doc: dict) -> dict:
        counters.increment("recipe/in")
        return doc


@dataclass(frozen=True)
class _CountOutcome:
    """Counts each document leaving a step as kept (`recipe/out`) or by its drop reason."""

    def __call__(self, doc: dict) -> dict:
        reason = doc.get("filter_reason")
        counters.increment(f"recipe/dropped/{reason}" if reason else "recipe/out")
        return doc


def _docs_glob(step_path: str) -> str:
    return join(step_path, DOCS, "*.jsonl.zst")


def _kept_docs(step_path: str) -> Dataset:
    return Dataset.from_files(_docs_glob(step_path)).filter(keep).map(_CountIn())


def _step_summary(found: dict[str, int], *, prefixes: Sequence[str] = ()) -> dict[str, Any]:
    dropped = {k.removeprefix("recipe/dropped/"): v for k, v in found.items() if k.startswith("recipe/dropped/")}
    return {
        "documents_in": found.get("recipe/in", 0),
        "documents_out": found.get("recipe/out", 0),
        "dropped": dict(sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))),
        "counters": {k: v for k, v in sorted(found.items()) if k.startswith(tuple(prefixes))},
    }


def _warc_globs(warcs: str | list[str]) -> list[str]:
    """A directory (the sample step's output) means its WARC files; anything else is a glob or file."""
    globs = []
    for pattern in [warcs] if isinstance(warcs, str) else warcs:
        fs, path = url_to_fs(pattern)
        is_dir = not any(ch in path for ch in "*?[") and fs.isdir(path)
        globs.append(join(pattern, "*.warc.gz") if is_dir else pattern)
    return globs


@dataclass(frozen=True)
class ExtractStep:
    reader: WarcReadConfig = WarcReadConfig()
    extract: ExtractText = ExtractText()


def extract_step(path: str, *, config: ExtractStep, warcs: str | list[str]) -> dict[str, Any]:
    """WARC responses -> documents with main-content text; the HTML is not kept."""
    run = (
        warc_dataset(_warc_globs(warcs), config.reader)
        .map(_CountIn())
        .map(config.extract)
        .map(_CountOutcome())
        .write(join(path, DOCS, _PART))
        .execute()
    )
    return _step_summary(run.counters, prefixes=("warc/", "extract/"))


def langid_step(path: str, *, config: LanguageId, docs: str) -> dict[str, Any]:
    run = _kept_docs(docs).map_shard(config.map_shard).map(_CountOutcome()).write(join(path, DOCS, _PART)).execute()
    summary = _step_summary(run.counters, prefixes=("langid/dropped/",))
    langs = {
        k.removeprefix("langid/"): v for k, v in run.counters.items() if k.startswith("langid/") and k.count("/") == 1
    }
    summary["languages"] = dict(sorted(langs.items(), key=lambda kv: (-kv[1], kv[0])))
    return summary


def quality_step(path: str, *, config: QualityFilter, docs: str) -> dict[str, Any]:
    run = _kept_docs(docs).map(config).map(_CountOutcome()).write(join(path, DOCS, _PART)).execute()
    return _step_summary(run.counters, prefixes=("quality/failed/",))


def pii_step(path: str, *, config: PiiRedactor, docs: str) -> dict[str, Any]:
    run = _kept_docs(docs).map(config).map(_CountOutcome()).write(join(path, DOCS, _PART)).execute()
    return _step_summary(run.counters, prefixes=("pii/",))


def exact_dedup_step(path: str, *, config: dict[str, Any], docs: str) -> dict[str, Any]:
    run = (
        dedup_documents(_kept_docs(docs), num_shards=config["num_shards"])
        .map(_CountOutcome())
        .write(join(path, DOCS, _PART))
        .execute()
    )
    return _step_summary(run.counters, prefixes=("dedup/",))


def fuzzy_dedup_step(path: str, *, config: FuzzyDedupConfig, docs: str) -> dict[str, Any]:
    source = _kept_docs(docs)
    report = find_duplicate_clusters(source, config=config, work_dir=join(path, "work"))
    run = annotate_clusters(source, report, config=config).map(_CountOutcome()).write(join(path, DOCS, _PART)).execute()
    summary = _step_summary(run.counters)
    summary["report"] = {
        "documents_without_shingles": report.documents_without_shingles,
        "candidate_edges": report.candidate_edges,
        "verified_edges": report.verified_edges,
        "cc_iterations": report.cc_iterations,
        "duplicates": report.duplicates,
    }
    return summary


@dataclass(frozen=True)
class TokenizeStep:
    tokenizer: str = "smollm2"
    store: str | None = None  # a local directory for the token store; None: <step dir>/store


def tokenize_step(path: str, *, config: TokenizeStep, docs: str) -> dict[str, Any]:
    """The surviving documents -> `documents/*.jsonl.zst` (the final corpus) -> a token store."""
    from zephyr.tokenize import tokenize_dataset

    documents = join(path, "documents")
    run = _kept_docs(docs).map(_CountOutcome()).write(join(documents, _PART)).execute()
    store = join(config.store, path.rstrip("/").rsplit("/", 1)[-1]) if config.store else join(path, "store")
    result = tokenize_dataset(join(documents, "*.jsonl.zst"), store, tokenizer=config.tokenizer)
    summary = _step_summary(run.counters)
    manifest = result.manifest
    summary.update(
        {
            "documents": join(documents, "*.jsonl.zst"),
            "store": result.output,
            "tokenizer": manifest.get("tokenizer", {}).get("name", config.tokenizer),
            "dtype": manifest.get("dtype"),
            "tokens": int(manifest["tokens"]),
            "tokenized_documents": int(manifest["documents"]),
            "skipped": manifest.get("skipped", {}),
        }
    )
    return summary


# -------------------------------------------------------------------------------------------- recipe


@dataclass(frozen=True)
class RecipeConfig:
    """What a run reads, where it writes, and the knobs users change most."""

    input: tuple[str, ...] = ()  # WARC globs; empty: build the sample
    output: str = "out/common_crawl"
    languages: tuple[str, ...] | None = ("en",)  # None keeps every language
    min_language_score: float | None = 0.65  # FineWeb's fastText threshold for English
    fuzzy_threshold: float = 0.8
    num_shards: int | None = None  # shards of the dedup shuffles (None: the engine's default)
    tokenizer: str = "smollm2"
    store: str | None = None
    sample_pages: int | None = None  # build the sample from the first N source pages only
    data_dir: str | None = None  # where the sample's pages are (default: <repo>/../shared/data)
    force: tuple[str, ...] = ()

    def language_id(self) -> LanguageId:
        return LanguageId(languages=self.languages, min_score=self.min_language_score)


class EmptyCorpusError(ValueError):
    """Every document was dropped before the tokenize step."""


@dataclass(frozen=True)
class RecipeResult:
    """Every step's output, in run order, and the configuration the run used."""

    steps: dict[str, StepOutput]
    config: RecipeConfig = field(default_factory=RecipeConfig)

    @property
    def store(self) -> str:
        return self.steps["tokenize"].summary["store"]


def run_recipe(config: RecipeConfig) -> RecipeResult:
    """Run (or resume) every step under `config.output`, on the current `execution(...)` settings."""
    if "://" in config.output and not config.store:
        raise ValueError(
            f"--output {config.output!r} is remote, but the token store must be a local directory (it is "
            "memory-mapped by the trainer); pass --store /local/dir as well"
        )
    with StepRunner(config.output, force=config.force) as runner:
        steps: dict[str, StepOutput] = {}
        if config.input:
            warcs: StepOutput | str | list[str] = config.input[0] if len(config.input) == 1 else list(config.input)
        else:
            data_dir = Path(config.data_dir) if config.data_dir else default_data_dir()
            if not data_dir.is_dir():
                raise FileNotFoundError(
                    f"no --input given and the real pages the default sample is built from are not at {data_dir}; "
                    "pass WARC files: zephyr run recipes/common_crawl.py --input 'path/or/bucket/*.warc.gz'"
                )
            sample_config = SampleConfig.from_data_dir(data_dir, max_pages=config.sample_pages)
            steps["sample"] = warcs = runner.run("sample", build_sample_warc, config=sample_config)
        fuzzy = FuzzyDedupConfig(threshold=config.fuzzy_threshold, num_shards=config.num_shards)
        chain = [
            ("extract", extract_step, ExtractStep(), "warcs"),
            ("langid", langid_step, config.language_id(), "docs"),
            ("quality", quality_step, QualityFilter(), "docs"),
            ("pii", pii_step, PiiRedactor(), "docs"),
            ("exact_dedup", exact_dedup_step, {"num_shards": config.num_shards}, "docs"),
            ("fuzzy_dedup", fuzzy_dedup_step, fuzzy, "docs"),
        ]
        upstream: StepOutput | str | list[str] = warcs
        for name, fn, step_config, input_name in chain:
            upstream = steps[name] = runner.run(name, fn, config=step_config, inputs={input_name: upstream})
            if upstream.summary.get("documents_out") == 0:  # a dry run's planned step has no figures yet
                raise EmptyCorpusError(
                    f"no documents left after step {name!r} ({upstream.summary['documents_in']:,} in; dropped: "
                    f"{_counts(upstream.summary['dropped'])}; see {upstream.path}). Nothing to tokenize: check "
                    "--input and the filter settings (--languages, --min-language-score)"
                )
        steps["tokenize"] = runner.run(
            "tokenize",
            tokenize_step,
            config=TokenizeStep(config.tokenizer, config.store),
            inputs={"docs": steps["fuzzy_dedup"]},
        )
        return RecipeResult(steps, config)


def _counts(values: dict[str, int], limit: int = 12) -> str:
    items = list(values.items())
    shown = ", ".join(f"{k} {v:,}" for k, v in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "") if items else "none"


def format_summary(result: RecipeResult) -> str:
    """The run's figures as a readable report (what `main` prints)."""
    steps = result.steps
    lines = [f"Common Crawl recipe: {result.config.output}"]
    lines.append(f"{'step':<12} {'status':<8} {'docs in':>8} {'docs out':>8}  dropped (filter_reason)")
    reasons: Counter[str] = Counter()
    for name, out in steps.items():
        s = out.summary
        status = "skipped" if out.skipped else f"{out.seconds:.1f}s"
        if "documents_in" in s:
            reasons.update(s["dropped"])
            lines.append(
                f"{name:<12} {status:<8} {s['documents_in']:>8,} {s['documents_out']:>8,}  {_counts(s['dropped'], 4)}"
            )
        else:
            lines.append(f"{name:<12} {status:<8} {'':>8} {'':>8}  {out.path}")
    lines.append("")
    if "sample" in steps:
        s = steps["sample"].summary
        lines.append(
            f"input: built sample, {s['files']} WARC files, {s['warc_records']:,} records "
            f"from {s['source_pages']} real pages; "
            f"planted {s['planted_exact_duplicates']} exact + {s['planted_near_duplicates']} near duplicates, "
            f"{s['planted_non_200']} non-200, {s['planted_non_html']} non-HTML"
        )
    else:
        lines.append(f"input: {', '.join(result.config.input)}")
    warc = steps["extract"].summary["counters"]
    lines.append(
        f"WARC: {warc.get('warc/records', 0):,} records, {warc.get('warc/documents', 0):,} HTML pages kept; skipped: "
        f"{warc.get('warc/skipped_type', 0):,} other record types, {warc.get('warc/skipped_status', 0):,} non-200, "
        f"{warc.get('warc/skipped_non_html', 0):,} non-HTML, {warc.get('warc/skipped_too_large', 0):,} too large, "
        f"{warc.get('warc/malformed', 0):,} malformed"
    )
    lines.append(f"languages (extracted documents): {_counts(steps['langid'].summary['languages'])}")
    lines.append(f"drop reasons: {_counts(dict(reasons.most_common()), 20)}")
    exact = steps["exact_dedup"].summary["dropped"].get("exact_duplicate", 0)
    fuzzy_summary = steps["fuzzy_dedup"].summary
    fuzzy = fuzzy_summary["dropped"].get("fuzzy_duplicate", 0)
    report = fuzzy_summary["report"]
    lines.append(
        f"duplicates removed: exact {exact:,}, fuzzy {fuzzy:,} ({report['verified_edges']:,} verified of "
        f"{report['candidate_edges']:,} candidate edges, {report['cc_iterations']} connected-components rounds)"
    )
    pii = steps["pii"].summary["counters"]
    lines.append(
        f"PII redacted: {pii.get('pii/email', 0):,} e-mails, {pii.get('pii/ip', 0):,} IPs, "
        f"{pii.get('pii/phone', 0):,} phones"
    )
    t = steps["tokenize"].summary
    lines.append(
        f"tokens: {t['tokens']:,} in {t['tokenized_documents']:,} documents "
        f"({t['tokenizer']}, {t['dtype']}) -> {t['store']}"
    )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> tuple[RecipeConfig, dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="zephyr run recipes/common_crawl.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        help="WARC glob(s): local, gs://, s3:// (repeatable; default: build a sample)",
    )
    parser.add_argument(
        "--output", default="out/common_crawl", help="root of every step's output (default: out/common_crawl)"
    )
    parser.add_argument(
        "--languages", default="en", help="comma-separated ISO 639-1 codes to keep, or 'all' (default: en)"
    )
    parser.add_argument(
        "--min-language-score", type=float, default=0.65, help="language id score below which a page is dropped"
    )
    parser.add_argument("--fuzzy-threshold", type=float, default=0.8, help="Jaccard similarity of near duplicates")
    parser.add_argument("--num-shards", type=int, default=None, help="shards of the dedup shuffles")
    parser.add_argument("--tokenizer", default="smollm2", help="tokenizer source (default: SmolLM2, offline)")
    parser.add_argument(
        "--store", default=None, help="local directory for the token store (needed with a remote --output)"
    )
    parser.add_argument(
        "--sample-pages", type=int, default=None, help="build the sample from the first N real pages only"
    )
    parser.add_argument(
        "--data-dir", default=None, help="where the sample's real pages are (default: <repo>/../shared/data)"
    )
    parser.add_argument(
        "--force", action="append", default=[], help="rerun this step even if it completed (repeatable)"
    )
    add_recipe_engine_options(parser)
    args = parser.parse_args(argv)
    codes = tuple(code.strip() for code in args.languages.split(",") if code.strip())
    languages = None if codes in ((), ("all",)) else codes
    config = RecipeConfig(
        input=tuple(args.input),
        output=args.output,
        languages=languages,
        min_language_score=args.min_language_score,
        fuzzy_threshold=args.fuzzy_threshold,
        num_shards=args.num_shards,
        tokenizer=args.tokenizer,
        store=args.store,
        sample_pages=args.sample_pages,
        data_dir=args.data_dir,
        force=tuple(args.force),
    )
    return config, engine_overrides(args)


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main(
        "zephyr run recipes/common_crawl.py", parse_args, run_recipe, format_summary, argv, expected=(EmptyCorpusError,)
    )


if __name__ == "__main__":
    sys.exit(main())
