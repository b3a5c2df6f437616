"""Record files, read and written, in any registered format (`formats`): JSON Lines (plain, .gz, .zst,
.bz2, .xz), Parquet, Vortex and Arrow IPC.

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

from zephyr.engine.expr import Expr
from zephyr.engine.io.bad_input import check_policy
from zephyr.engine.io.formats import resolve_format
from zephyr.engine.io.schema import batch_from_dicts, conformed_batches, item_blocks, plain_schema
from zephyr.engine.io.sink import WriteStats
from zephyr.errors import BadInputError


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
        format: a registered format ("jsonl", "parquet", "vortex", "arrow"); None infers it from the
            name (`infer_format`).
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
    if fmt.record_lists is not None:
        for records in fmt.record_lists(path, columns, filter, skip, compression):
            yield from records
        return
    assert fmt.batches is not None  # a format has one reader or the other
    for batch in fmt.batches(path, columns, filter, 8192, skip):
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
    if fmt.batches is not None:
        yield from fmt.batches(path, columns, filter, batch_size, skip)
        return
    assert fmt.record_lists is not None  # a format has one reader or the other
    buffer: list[dict] = []
    first_record = 0
    lists = fmt.record_lists(path, columns, filter, skip, compression)
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
    fmt.writer()  # a format that is only read fails here, before any record is taken
    blocks = item_blocks(items, fmt.write_block)
    first = next(blocks, None)
    if first is None:
        return WriteStats(path=url, records=0, bytes=0)
    blocks = itertools.chain([first], blocks)
    write = fmt.writer()
    if not fmt.columnar:
        return write(blocks, url)
    return write(conformed_batches(blocks, url, plain_schema(schema) if schema is not None else None), url)


def write_empty(url: str, *, format: str | None = None, schema: pa.Schema | None = None) -> WriteStats:
    """Write a valid file with no records (atomically): an empty shard's output, so that a reader can
    tell an empty shard from a lost file. jsonl: an empty (compressed) stream; parquet/vortex: `schema`
    (default: no columns; `unify_folder_schema` later gives it the folder's columns)."""
    fmt = resolve_format(url, format)
    if not fmt.columnar:
        return fmt.writer()(iter(()), url)
    empty = pa.RecordBatch.from_pylist([], schema=plain_schema(schema) if schema is not None else pa.schema([]))
    return fmt.writer()(iter([empty]), url)
