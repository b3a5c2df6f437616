"""Read Common Crawl WARC / WET (and legacy ARC) files into Zephyr documents.

WARC `response` records become `{id, url, html, source, metadata}` (the page decoded to str with the
charset of the HTTP header, the page's `<meta>`, or detection); WET `conversion` records become
`{id, url, text, source, metadata}`. Everything skipped is counted, never silent:

    warc/records          records seen (any type)
    warc/documents        documents yielded
    warc/skipped_type     request / metadata / warcinfo / revisit / resource ... records
    warc/skipped_status   HTTP status not in `allowed_statuses` (redirects, errors)
    warc/skipped_non_html content type not HTML (images, JSON, PDFs ...)
    warc/skipped_too_large  payload larger than `max_payload_bytes`
    warc/malformed        a record that could not be parsed, logged with the file and byte offset; in a
                          gzip-per-record file reading resumes at the next gzip member, in an
                          uncompressed file the next record cannot be located reliably and reading stops

A malformed or truncated file never fails the pipeline: real crawls contain them.

Why fastwarc: it parses several times faster than warcio and decodes chunked / gzip HTTP payloads
in C. ARC files (pre-2008 crawls) go through warcio, which is the one reader that still speaks ARC.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zephyr import counters
from zephyr.fs import open_url
from zephyr.operators.charset import decode_html

__all__ = ["WarcReadConfig", "read_warc", "ReadWarc", "warc_dataset"]

log = logging.getLogger(__name__)

_HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class WarcReadConfig:
    """What to keep from a WARC/WET file.

    allowed_statuses: HTTP statuses whose pages are kept (Common Crawl pipelines keep 200 only).
    html_only: keep only HTML responses (by HTTP Content-Type; a missing type is sniffed from the bytes).
    max_payload_bytes: larger payloads are skipped (Common Crawl truncates at 1 MiB; 0 would skip all,
        so the bound must be positive).
    """

    allowed_statuses: tuple[int, ...] = (200,)
    html_only: bool = True
    max_payload_bytes: int = 5 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_payload_bytes <= 0:
            raise ValueError(
                f"WarcReadConfig.max_payload_bytes must be positive, got {self.max_payload_bytes}; "
                "use a large number to keep everything"
            )


def _is_html(content_type: str | None, payload: bytes) -> bool:
    if content_type:
        return content_type.split(";", 1)[0].strip().lower() in _HTML_TYPES
    head = payload[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head


def _is_arc(url: str) -> bool:
    name = url.lower()
    return name.endswith(".arc") or name.endswith(".arc.gz")


def read_warc(url: str, config: WarcReadConfig = WarcReadConfig()) -> Iterator[dict]:
    """Yield the documents of one WARC, WET or ARC file (local path or any fsspec URL), in file order."""
    if _is_arc(url):
        yield from _read_arc(url, config)
        return
    try:
        from fastwarc.warc import ArchiveIterator, WarcRecordType
    except ImportError as exc:  # pragma: no cover - fastwarc is in the operators extra
        raise ImportError("reading WARC files needs fastwarc: pip install 'fastwarc>=0.14'") from exc

    wanted = WarcRecordType.response | WarcRecordType.conversion
    with open_url(url, "rb", compression=None) as stream:
        seekable = _seekable(stream)
        gzipped = seekable and stream.read(2) == _GZIP_MAGIC[:2]
        base = 0  # byte offset where the current ArchiveIterator started
        while True:
            if seekable:
                stream.seek(base)
            records = iter(
                ArchiveIterator(
                    stream,
                    parse_http=True,
                    record_types=WarcRecordType.any_type,
                    auto_decode="all",
                    fsspec_args=False,
                )
            )
            offset = base
            yielded_any = False
            while True:
                try:
                    record = next(records)
                except StopIteration:
                    return
                except Exception as exc:  # fastwarc raises OSError / ValueError on broken framing
                    # One count per damaged region: a resumed attempt that fails before reading any
                    # record is still inside the damage already counted.
                    if yielded_any or base == 0:
                        counters.increment("warc/malformed")
                    break_reason = exc
                    break
                yielded_any = True
                offset = base + record.stream_pos
                convert = functools.partial(_document_from_fastwarc, record, url, config, offset)
                doc = _counted_document(bool(record.record_type & wanted), convert, url, "WARC", offset)
                if doc is not None:
                    yield doc
            # A broken record. In a gzip-per-record file (as Common Crawl publishes) the next record
            # starts at the next gzip member: resynchronise there instead of losing the rest of the file.
            resume = _next_gzip_member(stream, offset + 1) if gzipped else None
            if resume is None:
                log.warning(
                    "%s: malformed WARC record after byte %d (%s); skipping the rest of this file",
                    url,
                    offset,
                    break_reason,
                )
                return
            log.warning(
                "%s: malformed WARC record after byte %d (%s); resuming at the next gzip member, byte %d",
                url,
                offset,
                break_reason,
                resume,
            )
            base = resume


_GZIP_MAGIC = b"\x1f\x8b\x08"


def _seekable(stream) -> bool:
    try:
        return bool(stream.seekable())
    except Exception:
        return False


def _next_gzip_member(stream, start: int, chunk: int = 1 << 20) -> int | None:
    """Offset of the next gzip header at or after `start`, or None at end of file."""
    position = start
    carry = b""
    while True:
        stream.seek(position)
        data = stream.read(chunk)
        if not data:
            return None
        window = carry + data
        found = window.find(_GZIP_MAGIC)
        if found >= 0:
            return position - len(carry) + found
        carry = window[-(len(_GZIP_MAGIC) - 1) :]
        position += len(data)


def _document_from_fastwarc(record, url: str, config: WarcReadConfig, offset: int) -> dict | None:
    from fastwarc.warc import WarcRecordType

    headers = record.headers
    target = (headers.get("WARC-Target-URI") or "").strip().strip("<>")
    metadata = {
        "warc_date": headers.get("WARC-Date"),
        "warc_file": url,
        "offset": offset,
    }
    if record.record_type == WarcRecordType.conversion:  # WET: already plain text
        if record.content_length > config.max_payload_bytes:
            counters.increment("warc/skipped_too_large")
            return None
        text = record.reader.read().decode("utf-8", errors="replace")
        metadata["refers_to"] = headers.get("WARC-Refers-To")
        metadata["identified_language"] = headers.get("WARC-Identified-Content-Language")
        return {"id": record.record_id, "url": target, "text": text, "source": url, "metadata": metadata}

    http = record.http_headers
    if http is None or not http.status_code:
        counters.increment("warc/malformed")  # a response record without a parseable HTTP message
        log.warning("%s: response record at byte %d has no parseable HTTP status line; skipped", url, offset)
        return None
    status = http.status_code
    if status not in config.allowed_statuses:
        counters.increment("warc/skipped_status")
        return None
    if record.content_length > config.max_payload_bytes:
        counters.increment("warc/skipped_too_large")
        return None
    content_type = record.http_content_type or http.get("Content-Type")
    payload = record.reader.read()
    if config.html_only and not _is_html(content_type, payload):
        counters.increment("warc/skipped_non_html")
        return None
    metadata.update({"http_status": status, "content_type": http.get("Content-Type")})
    html = decode_html(payload, http.get("Content-Type"))
    return {"id": record.record_id, "url": target, "html": html, "source": url, "metadata": metadata}


def _read_arc(url: str, config: WarcReadConfig) -> Iterator[dict]:
    try:
        from warcio.archiveiterator import ArchiveIterator
    except ImportError as exc:  # pragma: no cover - warcio is in the operators extra
        raise ImportError("reading ARC files needs warcio: pip install 'warcio>=1.7'") from exc
    offset = 0
    with open_url(url, "rb", compression=None) as stream:
        records = iter(ArchiveIterator(stream, arc2warc=True))
        while True:
            try:
                record = next(records)
                offset = records.get_record_offset() if hasattr(records, "get_record_offset") else offset
            except StopIteration:
                return
            except Exception as exc:  # warcio: ArchiveLoadFailed, ValueError on broken ARC headers
                counters.increment("warc/malformed")
                log.warning(
                    "%s: malformed ARC record after byte %d (%s); skipping the rest of this file", url, offset, exc
                )
                return
            convert = functools.partial(_document_from_warcio, record, url, config)
            doc = _counted_document(record.rec_type == "response", convert, url, "ARC", offset)
            if doc is not None:
                yield doc


def _counted_document(
    wanted: bool, convert: Callable[[], dict | None], url: str, kind: str, offset: int
) -> dict | None:
    """One archive record's document, or None, with the counts both readers keep (warc/records, skipped_type,
    malformed, documents). A record that fails to convert is counted and skipped: one bad record does not
    lose the rest of the file."""
    counters.increment("warc/records")
    if not wanted:
        counters.increment("warc/skipped_type")
        return None
    try:
        doc = convert()
    except Exception as exc:
        counters.increment("warc/malformed")
        log.warning("%s: malformed %s record at byte %d (%s); skipped", url, kind, offset, exc)
        return None
    if doc is not None:
        counters.increment("warc/documents")
    return doc


def _document_from_warcio(record, url: str, config: WarcReadConfig) -> dict | None:
    http = record.http_headers
    code = http.get_statuscode() if http is not None else None
    if not code or not code.isdigit():
        counters.increment("warc/malformed")  # e.g. an ARC record with a broken length or status line
        log.warning(
            "%s: ARC response for %r has no parseable HTTP status line; skipped",
            url,
            record.rec_headers.get_header("WARC-Target-URI"),
        )
        return None
    status = int(code)
    if status not in config.allowed_statuses:
        counters.increment("warc/skipped_status")
        return None
    payload = record.content_stream().read(config.max_payload_bytes + 1)
    if len(payload) > config.max_payload_bytes:
        counters.increment("warc/skipped_too_large")
        return None
    content_type = http.get_header("Content-Type") if http is not None else None
    if config.html_only and not _is_html(content_type, payload):
        counters.increment("warc/skipped_non_html")
        return None
    headers = record.rec_headers
    target = (headers.get_header("WARC-Target-URI") or "").strip().strip("<>")
    record_id = headers.get_header("WARC-Record-ID") or f"<arc:{url}#{target}@{headers.get_header('WARC-Date')}>"
    metadata = {
        "warc_date": headers.get_header("WARC-Date"),
        "warc_file": url,
        "http_status": status,
        "content_type": content_type,
    }
    html = decode_html(payload, content_type)
    return {"id": record_id, "url": target, "html": html, "source": url, "metadata": metadata}


@dataclass(frozen=True)
class ReadWarc:
    """`Dataset.flat_map` step: a record naming a file (`{"path": url}` or a plain str) -> its documents.

    >>> # Dataset.from_list([{"path": p} for p in paths]).flat_map(ReadWarc())
    """

    config: WarcReadConfig = WarcReadConfig()
    path_field: str = "path"

    def __call__(self, record: dict | str) -> Iterator[dict]:
        if isinstance(record, str):
            return read_warc(record, self.config)
        if self.path_field not in record:
            raise KeyError(
                f"ReadWarc expected a record with a {self.path_field!r} field naming a WARC file, got "
                f"fields {sorted(record)}; pass ReadWarc(path_field=...) or records like {{'path': url}}"
            )
        return read_warc(record[self.path_field], self.config)


def warc_dataset(patterns: str | list[str], config: WarcReadConfig = WarcReadConfig()):
    """A Dataset of the documents in the WARC/WET/ARC files matching the glob(s), one shard per file.

    >>> # warc_dataset("s3://bucket/crawl/*.warc.gz").map(ExtractText()).write_jsonl(...)
    """
    from zephyr.engine.dataset import Dataset

    # each file a shard whose one record names it (the `path` format); ReadWarc reads it
    return Dataset.from_files(patterns, format="path").flat_map(ReadWarc(config))
