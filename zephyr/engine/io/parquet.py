"""Parquet: a streaming scan with column and filter push-down, and a row-grouped zstd writer."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from zephyr.engine.expr import Expr
from zephyr.engine.io.bad_input import short_error
from zephyr.engine.io.format import Format
from zephyr.engine.io.scan import check_scan, is_plain_local, scan_columns, scanned_batches, unreadable_columnar_file
from zephyr.engine.io.schema import plain_schema
from zephyr.engine.io.sink import CountingSink, WriteStats
from zephyr.errors import BadInputError
from zephyr.fs import atomic_write, open_url, url_to_fs

_ROW_GROUP_ROWS = 128 * 1024
_ROW_GROUP_BYTES = 128 << 20


def parquet_batches(
    url: str, columns: Sequence[str] | None, filter: Expr | None, batch_size: int, skip: bool
) -> Iterator[pa.RecordBatch]:
    """Stream `url`'s row groups as batches; columns and filter go into Arrow's scan (row groups the filter's
    statistics rule out are never decoded); a filter over a column the file lacks runs after the scan."""
    fs, path = url_to_fs(url)
    try:
        if is_plain_local(fs):
            dataset = pads.dataset(path, format="parquet")
        else:
            dataset = pads.dataset(path, format="parquet", filesystem=fs)
        schema = dataset.schema
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise BadInputError(f"{url}: no such file; check the path") from None
        if not isinstance(exc, pa.ArrowException) and not _is_footer_damage(exc):
            raise  # an error of the filesystem itself (network, permissions): not bad data, let it retry
        unreadable_columnar_file(url, fs, path, skip, "parquet", exc)
        return
    if not len(schema):
        return  # no columns: an empty shard's file (see write_empty); it holds no records
    check_scan(url, columns, filter, schema)
    pushdown = filter is not None and filter.columns() <= set(schema.names)
    read_columns = columns if filter is None or pushdown else scan_columns(columns, filter, schema)
    try:
        scanner = dataset.scanner(
            columns=list(read_columns) if read_columns is not None else None,
            filter=filter.to_arrow() if pushdown and filter is not None else None,
            batch_size=batch_size,
        )
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        raise TypeError(
            f"{url}: the filter {filter!r} does not fit the file's column types ({short_error(exc)}); the file's "
            f"schema is {schema}. Compare each field with a literal of its type"
        ) from None
    yield from scanned_batches(
        scanner.to_batches,
        url,
        columns=columns,
        filter=filter,
        pushed_down=pushdown,
        skip=skip,
        damage=_is_page_damage,
        unit="a parquet page",
    )


def _is_page_damage(exc: BaseException) -> bool:
    """Arrow's own decoding errors; an OSError that is not Arrow's is the filesystem's (network, permissions)."""
    return isinstance(exc, pa.ArrowInvalid | OSError) and isinstance(exc, pa.ArrowException)


def _is_footer_damage(exc: OSError) -> bool:
    """Arrow reports a footer whose metadata is garbage ("Couldn't deserialize thrift") as a bare OSError
    with no errno; an error of the filesystem itself (permissions, a full disk, the network) has one."""
    text = str(exc)
    return exc.errno is None and ("thrift" in text or "Parquet" in text or "magic bytes" in text)


def parquet_schema(url: str) -> pa.Schema:
    """The schema in the file's footer (no row is read)."""
    with open_url(url, "rb", compression=None) as handle:
        return plain_schema(pq.read_schema(handle))


def write_parquet(batches: Iterator[pa.RecordBatch], url: str) -> WriteStats:
    """Write batches of one schema as zstd parquet, in row groups of ~128K rows or 128 MiB, atomically."""
    first = next(batches)
    schema = first.schema
    records = 0
    with atomic_write(url, "wb", compression=None) as raw:
        sink = CountingSink(raw)
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
            if rows:
                writer.write_table(pa.Table.from_batches(group, schema), row_group_size=rows)
                records += rows
        finally:
            writer.close()
    return WriteStats(path=url, records=records, bytes=sink.count)


PARQUET = Format("parquet", (".parquet", ".pq"), write=write_parquet, batches=parquet_batches, schema=parquet_schema)
"""Parquet (zstd): columns and filters pushed into the scan; one schema per file."""
