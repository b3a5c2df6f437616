"""JSON Lines (plain, .gz, .zst, .bz2, .xz): streaming reader that reports each bad line, and writer."""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import pyarrow as pa
import zstandard

from zephyr.engine.absent_fields import FieldPresence
from zephyr.engine.expr import Expr
from zephyr.engine.io.bad_input import bad_file, bad_record
from zephyr.engine.io.compression import StreamDamage, decoded_chunks, split_compression
from zephyr.engine.io.format import Format
from zephyr.engine.io.sink import CountingSink, WriteStats
from zephyr.errors import BadInputError
from zephyr.fs import atomic_write, open_url

JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
# records per orjson pass when writing (measured: as fast as 8,192); small blocks keep a shard of long
# documents from holding 8,192 of them (~100 MB of 4 KB documents as dicts, their lines and the joined block)
WRITE_BLOCK = 256
# zstd level of .jsonl.zst outputs. Level 1, not zstd's default 3: on 3.8 KB web-text records it compresses
# at ~380 MB/s against ~215 (10 against 18 us per record, one core) for files 16% larger (ratio 2.38 against
# 2.77), and a pipeline writes each document several times (normalize, dedup steps), so compression was
# the largest single cost of those steps (benchmarks/pipeline_scale.py; issue 32).
ZSTD_LEVEL = 1


def _describe_json_error(line: bytes, exc: orjson.JSONDecodeError) -> tuple[str, str]:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as ude:
        bad = line[ude.start : ude.start + 1]
        return "invalid_utf8", f"invalid UTF-8 (byte {ude.start} of the line is {bad!r}); JSON text must be UTF-8"
    snippet = line[:80].decode("utf-8", "replace")
    return (
        "invalid_json",
        f"invalid JSON ({exc.msg} at column {exc.colno}): {snippet!r}{'...' if len(line) > 80 else ''}",
    )


def _parse_lines_slow(
    lines: list[bytes], first_line: int, url: str, skip: bool, *, last_unterminated: bool = False
) -> list[dict]:
    """Parse line by line, reporting each bad line; used only for chunks the fast path rejected."""
    out: list[dict] = []
    loads = orjson.loads
    json_suffix = split_compression(url)[0].endswith(".json")
    for i, line in enumerate(lines):
        number = first_line + i
        try:
            record = loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue  # blank lines are allowed
            reason, detail = _describe_json_error(line, exc)
            if last_unterminated and i == len(lines) - 1:
                detail += "; it is the last line and has no newline: the file may be truncated"
            elif json_suffix and number == 1:
                detail += "; note that .json files are read as JSON Lines, one object per line"
            bad_record(url, skip, number, reason, detail)
            continue
        if isinstance(record, dict):
            out.append(record)
            continue
        detail = f"a JSON {type(record).__name__.replace('NoneType', 'null')} where an object was expected"
        if json_suffix and isinstance(record, list):
            detail += " (a whole JSON array? .json files are read as JSON Lines; convert with `jq -c '.[]'`)"
        bad_record(url, skip, number, "not_an_object", detail)
    return out


def _parse_lines(lines: list[bytes], first_line: int, url: str, skip: bool) -> list[dict]:
    """orjson over every line in one comprehension; any surprise re-parses the chunk line by line."""
    loads = orjson.loads
    try:
        records = [loads(line) for line in lines]
    except orjson.JSONDecodeError:
        return _parse_lines_slow(lines, first_line, url, skip)
    if records and set(map(type, records)) != {dict}:
        return _parse_lines_slow(lines, first_line, url, skip)
    return records


def jsonl_record_lists(url: str, *, skip: bool, compression: str | None) -> Iterator[list[dict]]:
    """Lists of parsed records, one per decompressed chunk, in file order."""
    codec = split_compression(url)[1] if compression == "infer" else compression
    kept = 0
    next_line = 1  # number of the first line in the next batch of complete lines
    pending: list[bytes] = []  # pieces of a line whose newline has not arrived yet
    try:
        handle = open_url(url, "rb", compression=None)
    except FileNotFoundError:
        raise BadInputError(f"{url}: no such file; check the path") from None
    with handle as raw:
        try:
            for chunk in decoded_chunks(raw, codec):
                lines = chunk.split(b"\n")
                if len(lines) == 1:
                    pending.append(chunk)
                    continue
                if pending:
                    pending.append(lines[0])
                    lines[0] = b"".join(pending)
                tail = lines.pop()
                pending = [tail] if tail else []
                records = _parse_lines(lines, next_line, url, skip)
                next_line += len(lines)
                if records:
                    kept += len(records)
                    yield records
        except StreamDamage as damage:
            detail = damage.detail
            if damage.reason != "empty":
                detail += f"; lines 1-{next_line - 1} were complete" if next_line > 1 else "; no complete line was read"
            bad_file(url, skip, damage.reason, detail, fix=damage.fix, kept=kept)
            return
    if pending:
        records = _parse_lines_slow([b"".join(pending)], next_line, url, skip, last_unterminated=True)
        if records:
            yield records


def read_jsonl(
    url: str, columns: Sequence[str] | None, filter: Expr | None, skip: bool, compression: str | None
) -> Iterator[list[dict]]:
    """The file's records in lists (one per decompressed chunk), filtered, then projected to `columns`."""
    return project_filter_lists(jsonl_record_lists(url, skip=skip, compression=compression), columns, filter, url)


def project_filter_lists(
    lists: Iterable[list[dict]], columns: Sequence[str] | None, filter: Expr | None, url: str = ""
) -> Iterator[list[dict]]:
    """Filter, then project, each list. A filter field (read by value) that no record of the file has is
    noted once the file is read (`zephyr.engine.absent_fields`): an error when no file read has it."""
    predicate = filter.compile() if filter is not None else None
    presence = FieldPresence(filter.value_columns() if filter is not None else ())
    for records in lists:
        for record in records:
            if not presence.missing:
                break
            presence.see(record)
        if predicate is not None:
            records = [r for r in records if predicate(r) is True]
        if columns is not None:
            records = [{c: r.get(c) for c in columns} for r in records]
        if records:
            yield records
    presence.note(
        lambda missing, first: (
            f"{url}: the filter {filter!r} reads field(s) {', '.join(map(repr, missing))}, which no record of the "
            f"file has (the first has {', '.join(sorted(first)) or 'no fields'}). Fix the field name, or use "
            "col(...).is_null() for a field that is optional"
        )
    )


# ------------------------------------------------------------------------------------------------


def write_jsonl(blocks: Iterator[list[dict] | pa.RecordBatch], url: str) -> WriteStats:
    """Write blocks of records as JSON Lines, compressed as the name's suffix says, atomically; numpy values are
    allowed and a record that is not JSON-serialisable raises naming it."""
    records = 0

    def encoded() -> Iterator[bytes]:
        nonlocal records
        for block in blocks:
            rows = block.to_pylist() if isinstance(block, pa.RecordBatch) else block
            yield encode_jsonl_block(rows, url, records)
            records += len(rows)

    written = write_jsonl_bytes(encoded(), url)
    return WriteStats(path=url, records=records, bytes=written)


def encode_jsonl_block(rows: list[Any], url: str, written: int) -> bytes:
    """`rows` as JSON Lines (each line ending in a newline); `written` rows came before, for messages."""
    try:
        lines = [orjson.dumps(row, option=JSON_OPTIONS) for row in rows]
    except orjson.JSONEncodeError:
        lines = _dumps_checked(rows, url, written)
    if set(map(type, rows)) != {dict}:
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise TypeError(
                    f"writing {url}: record {written + index + 1} is a {type(row).__name__}, expected a dict"
                )
    lines.append(b"")
    return b"\n".join(lines)


def write_jsonl_bytes(chunks: Iterable[bytes], url: str) -> int:
    """Write encoded JSON Lines to `url` atomically, compressed as its suffix says; returns the file's bytes."""
    codec = split_compression(url)[1]
    with atomic_write(url, "wb", compression=None) as raw:
        sink: Any = CountingSink(raw)  # a binary file object to the compressors (typeshed wants IO[bytes])
        if codec == "zstd":
            out: Any = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(sink, closefd=False)
        elif codec == "gzip":
            out = gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=6, mtime=0)
        elif codec == "bz2":
            out = bz2.BZ2File(sink, "wb")
        elif codec == "xz":
            out = lzma.LZMAFile(sink, "wb")  # noqa: SIM115 - closed after the loop, as the other codecs' writers are
        else:
            out = sink
        for chunk in chunks:
            out.write(chunk)
        if out is not sink:
            out.close()  # writes the compression trailer into sink; sink and raw stay open
    return sink.count


def _dumps_checked(rows: list[dict], url: str, written: int) -> list[bytes]:
    out = []
    for index, row in enumerate(rows):
        try:
            out.append(orjson.dumps(row, option=JSON_OPTIONS))
        except orjson.JSONEncodeError as exc:
            fields = [k for k, v in row.items() if _not_json(v)] if isinstance(row, dict) else []
            which = f" (field {fields[0]!r})" if fields else ""
            raise TypeError(
                f"writing {url}: record {written + index + 1}{which} is not JSON-serializable ({exc}). "
                "Convert such values in a map() (bytes -> base64 str, set -> list), or write parquet"
            ) from None
    return out


def _not_json(value: Any) -> bool:
    try:
        orjson.dumps(value, option=JSON_OPTIONS)
        return False
    except orjson.JSONEncodeError:
        return True


JSONL = Format(
    "jsonl",
    (".jsonl", ".json", ".ndjson"),
    write=write_jsonl,
    record_lists=read_jsonl,
    compressible=True,
    write_block=WRITE_BLOCK,
)
"""JSON Lines: one object per line, plain or compressed; records keep their own fields and types."""
