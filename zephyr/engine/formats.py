"""Record files: JSON Lines (plain, .gz, .zst, .bz2, .xz), Parquet and Vortex, read and written.

Readers stream (a file is never held in memory whole) and push `columns` and `filter` into the
parquet and vortex scans, so row groups or segments that cannot match are skipped and unread
columns are never decoded. Every byte goes through `zephyr.engine.fs` (`open_url`, `url_to_fs`,
`atomic_write`), so local paths, memory://, gs:// and s3:// behave the same.

Bad input never passes silently. With `on_bad_record="raise"` (the default) a damaged file or line
raises `BadInputError` naming the file, the line (or byte offset), what was expected and the fix.
With `on_bad_record="skip"` a bad line is skipped and counted as `bad_records/<reason>`
(`invalid_json`, `invalid_utf8`, `not_an_object`); a file that cannot be read to its end is counted
as `bad_files/<reason>` (`empty`, `truncated`, `corrupt`) and the records read before the damage
are kept. Compressed streams are decompressed here rather than by fsspec because zstandard's stream
reader stops without error at a truncated frame: a cut-off download would lose data silently.

Example:
    >>> from zephyr.engine.formats import read_records, write_records
    >>> from zephyr.engine.expr import col
    >>> write_records([{"id": 1, "lang": "en"}, {"id": 2, "lang": "fr"}], "memory://doc/a.parquet").records
    2
    >>> list(read_records("memory://doc/a.parquet", columns=["id"], filter=col("lang") == "en"))
    [{'id': 1}]
"""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import logging
import lzma
import os
import pickle
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import zstandard
from fsspec.implementations.local import LocalFileSystem

from zephyr.engine import counters
from zephyr.engine.errors import BadInputError, ZephyrError
from zephyr.engine.expr import Expr
from zephyr.engine.fs import atomic_write, open_url, url_to_fs

__all__ = [
    "FORMATS",
    "SchemaMismatchError",
    "WriteStats",
    "infer_format",
    "read_batches",
    "read_records",
    "write_partitioned",
    "write_records",
]

logger = logging.getLogger(__name__)

FORMATS = ("jsonl", "parquet", "vortex")
_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
# Bytes per read, and compressed bytes per decompressor call: decompressed chunks of a few hundred
# KiB keep the lines and the records parsed from them in cache (measured ~1.5x faster than 1 MiB).
_READ_SIZE = 64 << 10  # plain files
_COMPRESSED_READ_SIZE = 256 << 10
_FEED_SIZE = 8 << 10  # ~50 KiB of text out per decompressor call
_WRITE_BLOCK = 8192  # records per orjson/Arrow conversion when writing
_ROW_GROUP_ROWS = 128 * 1024
_ROW_GROUP_BYTES = 128 << 20
_SKIP_HINT = "pass on_bad_record='skip' to count and skip bad records"
_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


class SchemaMismatchError(ZephyrError, ValueError):
    """Records written to one parquet/vortex file whose fields or types disagree with the file's schema."""


@dataclass(frozen=True)
class WriteStats:
    """What `write_records` wrote: the final URL, the record count and the file's size in bytes.

    `records == 0` means nothing was written and no file exists: the caller decides whether an
    empty output is an error or needs a placeholder.
    """

    path: str
    records: int
    bytes: int


# ------------------------------------------------------------------------------------------------
# Format and compression from the file name
# ------------------------------------------------------------------------------------------------
def _split_compression(path: str) -> tuple[str, str | None]:
    name = path.rsplit("/", 1)[-1].lower()
    for suffix, codec in _COMPRESSIONS.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], codec
    return name, None


def infer_format(path: str) -> str:
    """The format named by `path`'s extension: "jsonl", "parquet" or "vortex".

    `.jsonl`, `.json` and `.ndjson` (optionally followed by `.gz`, `.zst`, `.bz2` or `.xz`) are
    JSON Lines; `.parquet` / `.pq` are Parquet; `.vortex` / `.vtx` are Vortex.
    """
    stem, codec = _split_compression(path)
    if stem.endswith(_JSONL_SUFFIXES):
        return "jsonl"
    if codec is None and stem.endswith((".parquet", ".pq")):
        return "parquet"
    if codec is None and stem.endswith((".vortex", ".vtx")):
        return "vortex"
    raise BadInputError(
        f"cannot tell the format of {path!r} from its name: expected a name ending in .jsonl/.json/.ndjson "
        "(optionally + .gz/.zst/.bz2/.xz), .parquet or .vortex (parquet and vortex compress internally). "
        "Rename the file or pass format='jsonl'|'parquet'|'vortex'"
    )


def _resolve_format(path: str, format: str | None) -> str:
    if format is None:
        return infer_format(path)
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} or None (infer from the name), got {format!r}")
    return format


def _check_policy(on_bad_record: str) -> bool:
    """True when bad input is skipped and counted."""
    if on_bad_record not in ("raise", "skip"):
        raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {on_bad_record!r}")
    return on_bad_record == "skip"


# ------------------------------------------------------------------------------------------------
# Bad input: one place that raises or counts
# ------------------------------------------------------------------------------------------------
def _bad_record(url: str, skip: bool, line: int, reason: str, detail: str) -> None:
    counter = f"bad_records/{reason}"
    if not skip:
        raise BadInputError(
            f"{url}, line {line}: {detail}. Expected one JSON object per line (JSON Lines). "
            f"Fix or remove the line, or {_SKIP_HINT} (counted as {counter})"
        )
    counters.increment(counter)


def _bad_file(url: str, skip: bool, reason: str, detail: str, *, fix: str, kept: int) -> None:
    counter = f"bad_files/{reason}"
    if not skip:
        raise BadInputError(
            f"{url}: {detail}. Fix: {fix}; or {_SKIP_HINT}: the file then counts as {counter} and the "
            f"{kept} records read before the damage are kept"
        )
    logger.warning("skipping the rest of %s (%s: %s); kept %d records", url, counter, detail, kept)
    counters.increment(counter)


def _short(exc: BaseException) -> str:
    """The first line of a library error (Vortex appends a Rust backtrace)."""
    text = str(exc).split("\nBacktrace:", 1)[0].strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ------------------------------------------------------------------------------------------------
# JSON Lines reading
# ------------------------------------------------------------------------------------------------
class _StreamDamage(Exception):
    """Internal: the byte stream ended early or holds undecodable data."""

    def __init__(self, reason: str, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.fix = reason, detail, fix


def _new_decompressor(codec: str) -> Any:
    """A decompressor for one member/frame/stream; all four expose decompress, eof, unused_data."""
    if codec == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if codec == "zstd":
        # Large window: files written with `zstd --long=31` are read too.
        return zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj()
    if codec == "bz2":
        return bz2.BZ2Decompressor()
    if codec == "xz":
        return lzma.LZMADecompressor()
    raise ValueError(f"unknown compression {codec!r}: expected one of {sorted(set(_COMPRESSIONS.values()))}")


_DECOMPRESS_ERRORS = (zlib.error, zstandard.ZstdError, OSError, EOFError, lzma.LZMAError, ValueError)


def _decoded_chunks(raw: Any, codec: str | None) -> Iterator[bytes]:
    """Decompressed bytes of `raw`, raising _StreamDamage on an empty, corrupt or truncated stream.

    Concatenated members/frames (pigz, parallel zstd) are followed to the end. A stream that stops
    inside a member is truncated: every decompressor reports `eof` only after a member's end marker.
    """
    chunk = raw.read(_READ_SIZE)
    if not chunk:
        raise _StreamDamage(
            "empty", "the file is empty (0 bytes)", "re-create or re-download it (an interrupted write or download?)"
        )
    if codec is None:
        while chunk:
            yield chunk
            chunk = raw.read(_READ_SIZE)
        return
    decompressor, fed, offset = _new_decompressor(codec), False, 0
    while chunk:
        view = memoryview(chunk)
        for start in range(0, len(chunk), _FEED_SIZE):
            data = view[start : start + _FEED_SIZE]
            while data:
                try:
                    out = decompressor.decompress(data)
                except _DECOMPRESS_ERRORS as exc:
                    raise _StreamDamage(
                        "corrupt",
                        f"the {codec} data is corrupt near compressed byte {offset + start} ({exc}); "
                        f"expected a valid {codec} stream, as the name's suffix says",
                        "re-create or re-download the file, or rename it if it is not compressed this way",
                    ) from None
                fed = True
                if out:
                    yield out
                if decompressor.eof:
                    data, decompressor, fed = decompressor.unused_data, _new_decompressor(codec), False
                else:
                    data = b""
        offset += len(chunk)
        chunk = raw.read(_COMPRESSED_READ_SIZE)
    if fed and not decompressor.eof:
        raise _StreamDamage(
            "truncated",
            f"the {codec} stream ends without its end marker after {offset} compressed bytes: the file is truncated "
            f"(expected a complete {codec} stream)",
            "re-create or re-download the file (an interrupted write or download?)",
        )


def _describe_json_error(line: bytes, exc: orjson.JSONDecodeError) -> tuple[str, str]:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as ude:
        bad = line[ude.start : ude.start + 1]
        return "invalid_utf8", f"invalid UTF-8 (byte {ude.start} of the line is {bad!r}); JSON text must be UTF-8"
    snippet = line[:80].decode("utf-8", "replace")
    return "invalid_json", f"invalid JSON ({exc.msg} at column {exc.colno}): {snippet!r}{'...' if len(line) > 80 else ''}"


def _parse_lines_slow(
    lines: list[bytes], first_line: int, url: str, skip: bool, *, last_unterminated: bool = False
) -> list[dict]:
    """Parse line by line, reporting each bad line; used only for chunks the fast path rejected."""
    out: list[dict] = []
    loads = orjson.loads
    json_suffix = _split_compression(url)[0].endswith(".json")
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
            _bad_record(url, skip, number, reason, detail)
            continue
        if isinstance(record, dict):
            out.append(record)
            continue
        detail = f"a JSON {type(record).__name__.replace('NoneType', 'null')} where an object was expected"
        if json_suffix and isinstance(record, list):
            detail += " (a whole JSON array? .json files are read as JSON Lines; convert with `jq -c '.[]'`)"
        _bad_record(url, skip, number, "not_an_object", detail)
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


def _jsonl_record_lists(url: str, *, skip: bool, compression: str | None) -> Iterator[list[dict]]:
    """Lists of parsed records, one per decompressed chunk, in file order."""
    codec = _split_compression(url)[1] if compression == "infer" else compression
    kept = 0
    next_line = 1  # number of the first line in the next batch of complete lines
    pending: list[bytes] = []  # pieces of a line whose newline has not arrived yet
    try:
        handle = open_url(url, "rb", compression=None)
    except FileNotFoundError:
        raise BadInputError(f"{url}: no such file; check the path") from None
    with handle as raw:
        try:
            for chunk in _decoded_chunks(raw, codec):
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
        except _StreamDamage as damage:
            detail = damage.detail
            if damage.reason != "empty":
                detail += f"; lines 1-{next_line - 1} were complete" if next_line > 1 else "; no complete line was read"
            _bad_file(url, skip, damage.reason, detail, fix=damage.fix, kept=kept)
            return
    if pending:
        records = _parse_lines_slow([b"".join(pending)], next_line, url, skip, last_unterminated=True)
        if records:
            yield records


def _project_filter_lists(
    lists: Iterable[list[dict]], columns: Sequence[str] | None, filter: Expr | None
) -> Iterator[list[dict]]:
    predicate = filter.compile() if filter is not None else None
    for records in lists:
        if predicate is not None:
            records = [r for r in records if predicate(r) is True]
        if columns is not None:
            records = [{c: r.get(c) for c in columns} for r in records]
        if records:
            yield records


# ------------------------------------------------------------------------------------------------
# Arrow helpers shared by parquet and vortex
# ------------------------------------------------------------------------------------------------
def _plain_type(t: pa.DataType) -> pa.DataType:
    """string_view/binary_view -> string/binary, recursively: the types every Arrow consumer takes."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        item = t.value_field.with_type(_plain_type(t.value_type))
        return pa.large_list(item) if pa.types.is_large_list(t) or pa.types.is_large_list_view(t) else pa.list_(item)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_plain_type(t.value_type)), t.list_size)
    if pa.types.is_map(t):
        return pa.map_(_plain_type(t.key_type), t.item_field.with_type(_plain_type(t.item_type)))
    return t


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(_plain_type(f.type)) for f in schema], metadata=schema.metadata)


def _check_columns(url: str, columns: Sequence[str] | None, schema: pa.Schema) -> None:
    if columns is None:
        return
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise BadInputError(
            f"{url}: no column {', '.join(map(repr, missing))}; the file has columns {schema.names}. "
            "Check the spelling in columns=, or read without columns= and add the field in a map()"
        )


def _filter_batch(batch: pa.RecordBatch, filter: Expr, predicate: Callable[[dict], Any]) -> pa.RecordBatch:
    """Apply `filter` to a batch the scan could not filter: vectorized when Arrow can, else per row."""
    if filter.columns() <= set(batch.schema.names):
        return batch.filter(filter.to_arrow())
    # A filter field the file lacks reads as null (as in jsonl): evaluate row by row.
    mask = pa.array([predicate(r) is True for r in batch.to_pylist()], pa.bool_())
    return batch.filter(mask)


def _scan_columns(columns: Sequence[str] | None, filter: Expr | None, schema: pa.Schema) -> list[str] | None:
    """Columns to read when the filter runs after the scan: the wanted ones plus the filter's."""
    if columns is None:
        return None
    extra = sorted(c for c in (filter.columns() if filter is not None else ()) if c not in columns and c in schema.names)
    return [*columns, *extra]


# ------------------------------------------------------------------------------------------------
# Parquet reading
# ------------------------------------------------------------------------------------------------
def _is_plain_local(fs: Any) -> bool:
    # Only the plain local filesystem is swapped for Arrow's native one; wrappers (guards, mirrors)
    # are subclasses or other classes and keep going through fsspec.
    return type(fs) is LocalFileSystem


def _unreadable_columnar_file(url: str, fs: Any, path: str, skip: bool, kind: str, exc: BaseException) -> None:
    """Report a parquet/vortex file whose footer cannot be read: empty (0 bytes) or corrupt."""
    empty = fs.size(path) == 0
    _bad_file(
        url, skip, "empty" if empty else "corrupt",
        "the file is empty (0 bytes)" if empty else f"not a readable {kind} file: truncated, corrupt or not {kind} ({_short(exc)})",
        fix=f"re-create or re-download the file ({kind} needs its footer; a cut-off file has none)", kept=0,
    )


def _parquet_batches(
    url: str, columns: Sequence[str] | None, filter: Expr | None, batch_size: int, skip: bool
) -> Iterator[pa.RecordBatch]:
    fs, path = url_to_fs(url)
    try:
        if _is_plain_local(fs):
            dataset = pads.dataset(path, format="parquet")
        else:
            dataset = pads.dataset(path, format="parquet", filesystem=fs)
        schema = dataset.schema
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise BadInputError(f"{url}: no such file; check the path") from None
        if not isinstance(exc, pa.ArrowException):
            raise  # an error of the filesystem itself (network, permissions): not bad data, let it retry
        _unreadable_columnar_file(url, fs, path, skip, "parquet", exc)
        return
    _check_columns(url, columns, schema)
    pushdown = filter is not None and filter.columns() <= set(schema.names)
    read_columns = columns if filter is None or pushdown else _scan_columns(columns, filter, schema)
    try:
        scanner = dataset.scanner(
            columns=list(read_columns) if read_columns is not None else None,
            filter=filter.to_arrow() if pushdown else None,
            batch_size=batch_size,
        )
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        raise TypeError(
            f"{url}: the filter {filter!r} does not fit the file's column types ({_short(exc)}); the file's "
            f"schema is {schema}. Compare each field with a literal of its type"
        ) from None
    predicate = filter.compile() if filter is not None and not pushdown else None
    kept = 0
    try:
        for batch in scanner.to_batches():
            if predicate is not None:
                batch = _filter_batch(batch, filter, predicate)
                if columns is not None:
                    batch = batch.select(list(columns))
            if batch.num_rows:
                kept += batch.num_rows
                yield batch
    except (pa.ArrowInvalid, OSError) as exc:
        if not isinstance(exc, pa.ArrowException):
            raise  # an error of the filesystem itself (network, permissions): not bad data, let it retry
        _bad_file(
            url, skip, "corrupt", f"a parquet page cannot be decoded ({_short(exc)})",
            fix="re-create or re-download the file", kept=kept,
        )


# ------------------------------------------------------------------------------------------------
# Vortex reading
# ------------------------------------------------------------------------------------------------
def _vortex_module() -> Any:
    try:
        import vortex
    except ImportError:  # pragma: no cover - vortex-data is a core dependency
        raise ImportError("reading or writing .vortex files needs vortex-data: pip install 'vortex-data>=0.50,<1'") from None
    return vortex


def _vortex_batches(
    url: str, columns: Sequence[str] | None, filter: Expr | None, batch_size: int, skip: bool
) -> Iterator[pa.RecordBatch]:
    # Vortex's own object stores would bypass our fsspec layer (region guard, mirror://, memory://),
    # so non-local files are handed to Vortex as fsspec file objects (`open_readable`), read by
    # range; no temporary copy. Local files use Vortex's native reader.
    vx = _vortex_module()
    fs, path = url_to_fs(url)
    handle = None
    try:
        try:
            if _is_plain_local(fs):
                if not fs.exists(path):
                    raise BadInputError(f"{url}: no such file; check the path")
                vfile = vx.open(path)
            else:
                handle = open_url(url, "rb", compression=None)
                vfile = vx.open_readable(handle)
            schema = vfile.dtype.to_arrow_schema()
        except FileNotFoundError:
            raise BadInputError(f"{url}: no such file; check the path") from None
        except (RuntimeError, ValueError, OSError) as exc:
            _unreadable_columnar_file(url, fs, path, skip, "vortex", exc)
            return
        _check_columns(url, columns, schema)
        vx_filter = filter.to_vortex(schema) if filter is not None else None
        pushdown = filter is None or vx_filter is not None
        read_columns = list(columns) if columns is not None and pushdown else _scan_columns(columns, filter, schema)
        names = read_columns if read_columns is not None else schema.names
        out_schema = _plain_schema(pa.schema([schema.field(n) for n in names]))
        predicate = filter.compile() if not pushdown else None
        kept = 0
        try:
            reader = vfile.to_arrow(read_columns, expr=vx_filter, batch_size=batch_size, schema=out_schema)
            for batch in reader:
                if predicate is not None:
                    batch = _filter_batch(batch, filter, predicate)
                    if columns is not None:
                        batch = batch.select(list(columns))
                if batch.num_rows:
                    kept += batch.num_rows
                    yield batch
        except (RuntimeError, ValueError, OSError, pa.ArrowException) as exc:
            _bad_file(
                url, skip, "corrupt", f"a vortex segment cannot be decoded ({_short(exc)})",
                fix="re-create or re-download the file", kept=kept,
            )
    finally:
        if handle is not None:
            handle.close()


# ------------------------------------------------------------------------------------------------
# Public readers
# ------------------------------------------------------------------------------------------------
def read_records(
    path: str,
    *,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    filter: Expr | None = None,
    on_bad_record: str = "raise",
    compression: str | None = "infer",
) -> Iterator[dict]:
    """Stream the records of one file as dicts, in file order.

    Args:
        path: local path or URL (memory://, gs://, s3://, ...).
        format: "jsonl", "parquet" or "vortex"; None infers it from the name (`infer_format`).
        columns: keep only these fields, in this order. For jsonl a record lacking a field gets None;
            for parquet/vortex a column the file lacks raises (a typo is likelier than intent).
        filter: keep records where the expression is True (SQL null semantics, see `expr`); pushed
            into parquet/vortex scans. It may use fields outside `columns`.
        on_bad_record: "raise" (default) or "skip"; see the module docstring.
        compression: jsonl only: "infer" from the suffix, None, or gzip/zstd/bz2/xz.

    Iteration opens the file; closing the iterator early closes it.
    """
    skip = _check_policy(on_bad_record)
    fmt = _resolve_format(path, format)
    if fmt == "jsonl":
        for records in _project_filter_lists(_jsonl_record_lists(path, skip=skip, compression=compression), columns, filter):
            yield from records
        return
    batches = _parquet_batches if fmt == "parquet" else _vortex_batches
    for batch in batches(path, columns, filter, 8192, skip):
        yield from batch.to_pylist()


def read_batches(
    path: str,
    *,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    filter: Expr | None = None,
    batch_size: int = 8192,
    on_bad_record: str = "raise",
    compression: str | None = "infer",
) -> Iterator[pa.RecordBatch]:
    """Stream one file as Arrow record batches of at most `batch_size` rows (options as `read_records`).

    Batches may be shorter than `batch_size` (a filter, a row-group end). Vortex's string_view types
    come back as plain string/binary. For jsonl each batch's schema is inferred from its records, so
    two batches of one file can differ when the records do; a field whose values mix types inside
    one batch raises BadInputError naming the field.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    skip = _check_policy(on_bad_record)
    fmt = _resolve_format(path, format)
    if fmt == "parquet":
        yield from _parquet_batches(path, columns, filter, batch_size, skip)
        return
    if fmt == "vortex":
        yield from _vortex_batches(path, columns, filter, batch_size, skip)
        return
    buffer: list[dict] = []
    first_record = 0
    lists = _project_filter_lists(_jsonl_record_lists(path, skip=skip, compression=compression), columns, filter)
    for records in itertools.chain(lists, [None]):
        if records is not None:
            buffer.extend(records)
        while len(buffer) >= batch_size or (records is None and buffer):
            rows, buffer = buffer[:batch_size], buffer[batch_size:]
            yield _batch_from_dicts(rows, where=f"{path}, records {first_record + 1}-{first_record + len(rows)}", error=BadInputError)
            first_record += len(rows)


# ------------------------------------------------------------------------------------------------
# Dicts -> Arrow, and holding one schema per written file
# ------------------------------------------------------------------------------------------------
def _batch_from_dicts(rows: list[dict], *, where: str, error: type[Exception]) -> pa.RecordBatch:
    """One batch from dicts; fields are the union over all rows (pyarrow's from_pylist would keep only
    the first row's keys and drop the rest silently)."""
    try:
        return pa.RecordBatch.from_struct_array(pa.array(rows))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise TypeError(f"{where}: item {index} is a {type(row).__name__}, expected a dict record") from None
        keys = dict.fromkeys(itertools.chain.from_iterable(rows))
        for key in keys:
            values = [row.get(key) for row in rows]
            try:
                pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as field_exc:
                kinds = sorted({type(v).__name__ for v in values if v is not None})
                raise error(
                    f"{where}: field {key!r} holds values of several types ({', '.join(kinds)}) that Arrow cannot "
                    f"put in one column ({_short(field_exc)}). Give the field one type in a map() (e.g. str(x)), "
                    "or write jsonl, which keeps each record as it is"
                ) from None
        raise error(f"{where}: the records cannot be converted to Arrow ({_short(exc)})") from None


def _field_conflict(schema: pa.Schema, batch_schema: pa.Schema) -> str | None:
    """The first field of `batch_schema` that `schema` cannot hold, described; None if all fit."""
    for field in batch_schema:
        index = schema.get_field_index(field.name)
        if index < 0:
            return f"field {field.name!r} ({field.type}) is not in the file's schema"
        target = schema.field(index)
        try:
            unified = pa.unify_schemas([pa.schema([target]), pa.schema([field])], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return f"field {field.name!r} is {field.type} here but {target.type} in the file's schema"
        if not unified.field(0).type.equals(target.type):
            return (
                f"field {field.name!r} needs type {unified.field(0).type} here but the file's schema has {target.type} "
                "(a new nested field, or a wider type)"
            )
    return None


def _conform(batch: pa.RecordBatch, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """`batch` with exactly `schema`: columns reordered, missing ones null, types cast losslessly."""
    if batch.schema.equals(schema):
        return batch
    conflict = _field_conflict(schema, _plain_schema(batch.schema))
    if conflict is not None:
        raise SchemaMismatchError(
            f"{where}: {conflict}. A parquet/vortex file has one schema, taken from its first records "
            f"({schema}). Give every record the same fields and types (None for a missing value) before "
            "writing, or pass schema= to write_records with the full schema, or write jsonl"
        )
    arrays = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            arrays.append(pa.nulls(batch.num_rows, field.type))
        else:
            arrays.append(batch.column(index).cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _item_blocks(items: Iterable[dict | pa.RecordBatch]) -> Iterator[list[dict] | pa.RecordBatch]:
    """Group consecutive dicts into lists of up to _WRITE_BLOCK; pass record batches through."""
    block: list[dict] = []
    for item in items:
        if isinstance(item, pa.RecordBatch):
            if block:
                yield block
                block = []
            if item.num_rows:
                yield item
            continue
        block.append(item)
        if len(block) >= _WRITE_BLOCK:
            yield block
            block = []
    if block:
        yield block


def _conformed_batches(
    blocks: Iterable[list[dict] | pa.RecordBatch], url: str, schema: pa.Schema | None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches that all share one schema: `schema`, or the first batch's (view types made plain)."""
    written = 0
    for block in blocks:
        n = len(block) if isinstance(block, list) else block.num_rows
        where = f"writing {url}, records {written + 1}-{written + n}"
        batch = block if isinstance(block, pa.RecordBatch) else _batch_from_dicts(block, where=where, error=SchemaMismatchError)
        if schema is None:
            schema = _plain_schema(batch.schema)
        yield _conform(batch, schema, where)
        written += n


# ------------------------------------------------------------------------------------------------
# Writers
# ------------------------------------------------------------------------------------------------
class _CountingSink(io.RawIOBase):
    """A write-only view of an open file that counts bytes and never closes it (atomic_write does)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._target.write(data)
        self.count += n
        return n

    def tell(self) -> int:
        return self.count

    def flush(self) -> None:
        self._target.flush()


def _write_jsonl(blocks: Iterator[list[dict] | pa.RecordBatch], url: str) -> WriteStats:
    codec = _split_compression(url)[1]
    records = 0
    dumps = orjson.dumps
    with atomic_write(url, "wb", compression=None) as raw:
        sink = _CountingSink(raw)
        if codec == "zstd":
            out: Any = zstandard.ZstdCompressor(level=3).stream_writer(sink, closefd=False)
        elif codec == "gzip":
            out = gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=6, mtime=0)
        elif codec == "bz2":
            out = bz2.BZ2File(sink, "wb")
        elif codec == "xz":
            out = lzma.LZMAFile(sink, "wb")
        else:
            out = sink
        for block in blocks:
            rows = block.to_pylist() if isinstance(block, pa.RecordBatch) else block
            try:
                lines = [dumps(row, option=_JSON_OPTIONS) for row in rows]
            except orjson.JSONEncodeError:
                lines = _dumps_checked(rows, url, records)
            if set(map(type, rows)) != {dict}:
                for index, row in enumerate(rows):
                    if not isinstance(row, dict):
                        raise TypeError(f"writing {url}: record {records + index + 1} is a {type(row).__name__}, expected a dict")
            lines.append(b"")
            out.write(b"\n".join(lines))
            records += len(rows)
        if out is not sink:
            out.close()  # writes the compression trailer into sink; sink and raw stay open
    return WriteStats(path=url, records=records, bytes=sink.count)


def _dumps_checked(rows: list[dict], url: str, written: int) -> list[bytes]:
    out = []
    for index, row in enumerate(rows):
        try:
            out.append(orjson.dumps(row, option=_JSON_OPTIONS))
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
        orjson.dumps(value, option=_JSON_OPTIONS)
        return False
    except orjson.JSONEncodeError:
        return True


def _write_parquet(batches: Iterator[pa.RecordBatch], url: str) -> WriteStats:
    first = next(batches)
    schema = first.schema
    records = 0
    with atomic_write(url, "wb", compression=None) as raw:
        sink = _CountingSink(raw)
        writer = pq.ParquetWriter(sink, schema, compression="zstd")
        try:
            group: list[pa.RecordBatch] = []
            rows = nbytes = 0
            for batch in itertools.chain([first], batches):
                group.append(batch)
                rows += batch.num_rows
                nbytes += batch.nbytes
                if rows >= _ROW_GROUP_ROWS or nbytes >= _ROW_GROUP_BYTES:
                    writer.write_table(pa.Table.from_batches(group, schema), row_group_size=rows)
                    records += rows
                    group, rows, nbytes = [], 0, 0
            if group:
                writer.write_table(pa.Table.from_batches(group, schema), row_group_size=rows)
                records += rows
        finally:
            writer.close()
    return WriteStats(path=url, records=records, bytes=sink.count)


def _write_vortex(batches: Iterator[pa.RecordBatch], url: str) -> WriteStats:
    # Vortex writes only to a local path or its own object stores, which would bypass our fsspec
    # layer; so it writes a local temporary file that is then copied through atomic_write.
    vx = _vortex_module()
    first = next(batches)
    schema = first.schema
    records = 0
    failure: list[BaseException] = []

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal records
        try:
            for batch in itertools.chain([first], batches):
                records += batch.num_rows
                yield batch
        except BaseException as exc:  # re-raised below with its type: Vortex would wrap it
            failure.append(exc)
            raise

    fd, local = tempfile.mkstemp(suffix=".vortex", prefix="zephyr-")
    os.close(fd)
    try:
        try:
            vx.io.write(pa.RecordBatchReader.from_batches(schema, counted()), local)
        except Exception:
            if failure:
                raise failure[0] from None
            raise
        with open(local, "rb") as src, atomic_write(url, "wb", compression=None) as raw:
            sink = _CountingSink(raw)
            shutil.copyfileobj(src, sink, 8 << 20)
    finally:
        os.unlink(local)
    return WriteStats(path=url, records=records, bytes=sink.count)


def write_records(
    items: Iterable[dict | pa.RecordBatch],
    url: str,
    *,
    format: str | None = None,
    schema: pa.Schema | None = None,
) -> WriteStats:
    """Write records (dicts and/or Arrow record batches) to one file, atomically.

    The file appears complete or not at all (temporary name, then rename). jsonl is written with
    orjson (numpy values allowed) and compressed from the suffix (.zst at zstd level 3, .gz, .bz2,
    .xz). Parquet (zstd) and Vortex files get one schema: `schema` if given, else the first 8192
    records' (union of their fields); later records may lack fields (null) or hold a type that
    widens losslessly (int into a float column), but a new field or an incompatible type raises
    SchemaMismatchError naming the field and the records.

    Empty input (no records) writes nothing and returns `records=0`; whether that is an error is
    the caller's decision.
    """
    fmt = _resolve_format(url, format)
    blocks = _item_blocks(items)
    first = next(blocks, None)
    if first is None:
        return WriteStats(path=url, records=0, bytes=0)
    blocks = itertools.chain([first], blocks)
    if fmt == "jsonl":
        return _write_jsonl(blocks, url)
    batches = _conformed_batches(blocks, url, _plain_schema(schema) if schema is not None else None)
    if fmt == "parquet":
        return _write_parquet(batches, url)
    return _write_vortex(batches, url)


_PARTITION_BUFFER = 65536  # records held in memory across all partitions before spilling


def _partition_value(value: Any, field: str, where: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "" or "/" in str(value) or str(value) in (".", ".."):
        raise ValueError(
            f"{where}: partition_by={field!r} needs a non-empty string or int without '/' (it becomes part of the "
            f"path), got {value!r}; map the field to a clean value first, or filter such records out"
        )
    return value


def write_partitioned(
    items: Iterable[dict | pa.RecordBatch],
    field: str,
    path_of: Callable[[str | int], str],
    *,
    format: str | None = None,
) -> list[WriteStats]:
    """Write records to one file per value of `field`, at `path_of(value)`, in one pass.

    Records are buffered per value and spilled to local temporary files, so memory stays bounded
    whatever the number of values; each file is then written atomically by `write_records` (same
    formats and schema rules). Returns the files' stats, ordered by value.
    """
    with tempfile.TemporaryDirectory(prefix="zephyr-partitions-") as spill:
        spill_files: dict[str | int, Any] = {}
        buffers: dict[str | int, list] = {}
        buffered = seen = 0

        def flush() -> None:
            for value, chunk in buffers.items():
                if value not in spill_files:
                    spill_files[value] = open(os.path.join(spill, f"{len(spill_files)}.pkl"), "wb")
                pickle.dump(chunk, spill_files[value], protocol=5)
            buffers.clear()

        try:
            for item in items:
                if isinstance(item, pa.RecordBatch):
                    where = f"records {seen + 1}-{seen + item.num_rows}"
                    if field not in item.schema.names or item.column(field).null_count:
                        raise ValueError(f"{where}: partition_by={field!r} but some records have no {field!r} value")
                    column = item.column(field)
                    for value in column.unique().to_pylist():
                        part = item.filter(pc.equal(column, value))
                        buffers.setdefault(_partition_value(value, field, where), []).append(part)
                    seen += item.num_rows
                    buffered += item.num_rows
                else:
                    seen += 1
                    if not isinstance(item, dict) or field not in item:
                        raise ValueError(f"record {seen}: partition_by={field!r} but the record has no {field!r} field")
                    buffers.setdefault(_partition_value(item[field], field, f"record {seen}"), []).append(item)
                    buffered += 1
                if buffered >= _PARTITION_BUFFER:
                    flush()
                    buffered = 0
            flush()
        finally:
            for handle in spill_files.values():
                handle.close()

        def spilled(path: str) -> Iterator[dict | pa.RecordBatch]:
            with open(path, "rb") as handle:
                while True:
                    try:
                        yield from pickle.load(handle)
                    except EOFError:
                        return

        return [
            write_records(spilled(handle.name), path_of(value), format=format)
            for value, handle in sorted(spill_files.items(), key=lambda kv: str(kv[0]))
        ]
