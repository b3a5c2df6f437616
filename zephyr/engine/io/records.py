"""Record files, read and written: JSON Lines (plain, .gz, .zst, .bz2, .xz), Parquet and Vortex.

Readers stream (a file is never held in memory whole) and push `columns` and `filter` into the
parquet and vortex scans, so row groups or segments that cannot match are skipped and unread
columns are never decoded. Every byte goes through `zephyr.fs` (`open_url`, `url_to_fs`,
`atomic_write`), so local paths, memory://, gs:// and s3:// behave the same.

Bad input never passes silently. With `on_bad_record="raise"` (the default) a damaged file or line
raises `BadInputError` naming the file, the line (or byte offset), what was expected and the fix.
With `on_bad_record="skip"` a bad line is skipped and counted as `bad_records/<reason>`
(`invalid_json`, `invalid_utf8`, `not_an_object`); a file that cannot be read to its end is counted
as `bad_files/<reason>` (`empty`, `truncated`, `corrupt`) and the records read before the damage
are kept. Compressed streams are decompressed here rather than by fsspec because zstandard's stream
reader stops without error at a truncated frame: a cut-off download would lose data silently.

Example:
    >>> from zephyr.engine.io import read_records, write_records
    >>> from zephyr.engine.expr import col
    >>> write_records([{"id": 1, "lang": "en"}, {"id": 2, "lang": "fr"}], "memory://doc/a.parquet").records
    2
    >>> list(read_records("memory://doc/a.parquet", columns=["id"], filter=col("lang") == "en"))
    [{'id': 1}]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from zephyr.engine.errors import BadInputError
from zephyr.engine.expr import Expr
from zephyr.engine.io.bad_input import check_policy
from zephyr.engine.io.compression import resolve_format
from zephyr.engine.io.jsonl import jsonl_record_lists, project_filter_lists, write_jsonl
from zephyr.engine.io.parquet import parquet_batches, write_parquet
from zephyr.engine.io.schema import WRITE_BLOCK, batch_from_dicts, conformed_batches, item_blocks, plain_schema
from zephyr.engine.io.sink import WriteStats
from zephyr.engine.io.vortex import vortex_batches, write_vortex


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
    skip = check_policy(on_bad_record)
    fmt = resolve_format(path, format)
    if fmt == "jsonl":
        lists = jsonl_record_lists(path, skip=skip, compression=compression)
        for records in project_filter_lists(lists, columns, filter, path):
            yield from records
        return
    batches = parquet_batches if fmt == "parquet" else vortex_batches
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
    skip = check_policy(on_bad_record)
    fmt = resolve_format(path, format)
    if fmt == "parquet":
        yield from parquet_batches(path, columns, filter, batch_size, skip)
        return
    if fmt == "vortex":
        yield from vortex_batches(path, columns, filter, batch_size, skip)
        return
    buffer: list[dict] = []
    first_record = 0
    lists = project_filter_lists(jsonl_record_lists(path, skip=skip, compression=compression), columns, filter, path)
    for records in itertools.chain(lists, [None]):
        if records is not None:
            buffer.extend(records)
        while len(buffer) >= batch_size or (records is None and buffer):
            rows, buffer = buffer[:batch_size], buffer[batch_size:]
            yield batch_from_dicts(
                rows, where=f"{path}, records {first_record + 1}-{first_record + len(rows)}", error=BadInputError
            )
            first_record += len(rows)


# ------------------------------------------------------------------------------------------------


JSONL_WRITE_BLOCK = 256  # records per orjson pass when writing jsonl (measured: as fast as 8,192)


def write_records(
    items: Iterable[dict | pa.RecordBatch],
    url: str,
    *,
    format: str | None = None,
    schema: pa.Schema | None = None,
) -> WriteStats:
    """Write records (dicts and/or Arrow record batches) to one file, atomically.

    The file appears complete or not at all (temporary name, then rename). jsonl is written with
    orjson (numpy values allowed) and compressed from the suffix (.zst at zstd level 1, see
    jsonl.ZSTD_LEVEL; .gz, .bz2, .xz). Parquet (zstd) and Vortex files get one schema: `schema` if
    given, else the first 8192 records' (union of their fields); later records may lack fields
    (null) or hold a type that widens losslessly (int into a float column), but a new field or an
    incompatible type raises SchemaMismatchError naming the field and the records.

    Empty input (no records) writes nothing and returns `records=0`; whether that is an error is
    the caller's decision (`write_empty` writes a file with no records).
    """
    fmt = resolve_format(url, format)
    # jsonl needs blocks only to amortize orjson calls: small ones keep a shard of long documents
    # from holding 8,192 of them (~100 MB of 4 KB documents as dicts, their lines and the joined block)
    blocks = item_blocks(items, JSONL_WRITE_BLOCK if fmt == "jsonl" else WRITE_BLOCK)
    first = next(blocks, None)
    if first is None:
        return WriteStats(path=url, records=0, bytes=0)
    blocks = itertools.chain([first], blocks)
    if fmt == "jsonl":
        return write_jsonl(blocks, url)
    batches = conformed_batches(blocks, url, plain_schema(schema) if schema is not None else None)
    if fmt == "parquet":
        return write_parquet(batches, url)
    return write_vortex(batches, url)


def write_empty(url: str, *, format: str | None = None, schema: pa.Schema | None = None) -> WriteStats:
    """Write a valid file with no records (atomically): an empty shard's output, so that a reader can
    tell an empty shard from a lost file. jsonl: an empty (compressed) stream; parquet/vortex: `schema`
    (default: no columns; `unify_folder_schema` later gives it the folder's columns)."""
    fmt = resolve_format(url, format)
    if fmt == "jsonl":
        return write_jsonl(iter(()), url)
    empty = pa.RecordBatch.from_pylist([], schema=plain_schema(schema) if schema is not None else pa.schema([]))
    return write_parquet(iter([empty]), url) if fmt == "parquet" else write_vortex(iter([empty]), url)
