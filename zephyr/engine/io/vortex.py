"""Vortex: a streaming scan through our fsspec layer, and a writer (local temp file, then atomic copy)."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from zephyr.engine.expr import Expr
from zephyr.engine.expr_vortex import to_vortex
from zephyr.engine.io.format import Format
from zephyr.engine.io.scan import check_scan, is_plain_local, scan_columns, scanned_batches, unreadable_columnar_file
from zephyr.engine.io.schema import plain_schema
from zephyr.engine.io.sink import CountingSink, WriteStats
from zephyr.errors import BadInputError
from zephyr.fs import atomic_write, open_url, url_to_fs


def vortex_module() -> Any:
    """The `vortex` package, or an ImportError with the pip command."""
    try:
        import vortex
    except ImportError:  # pragma: no cover - vortex-data is a core dependency
        raise ImportError(
            "reading or writing .vortex files needs vortex-data: pip install 'vortex-data>=0.50,<1'"
        ) from None
    return vortex


def vortex_batches(
    url: str, columns: Sequence[str] | None, filter: Expr | None, batch_size: int, skip: bool
) -> Iterator[pa.RecordBatch]:
    """Stream `url` as batches (string_view types made plain); columns and the filter, where Vortex can
    evaluate it, go into the scan; the rest of the filter runs after it."""
    # Vortex's own object stores would bypass our fsspec layer (region guard, mirror://, memory://),
    # so non-local files are handed to Vortex as fsspec file objects (`open_readable`), read by
    # range; no temporary copy. Local files use Vortex's native reader.
    vx = vortex_module()
    fs, path = url_to_fs(url)
    handle = None
    try:
        try:
            if is_plain_local(fs):
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
            unreadable_columnar_file(url, fs, path, skip, "vortex", exc)
            return
        if not len(schema):
            return  # no columns: an empty shard's file (see write_empty); it holds no records
        check_scan(url, columns, filter, schema)
        vx_filter = to_vortex(filter, schema) if filter is not None else None
        pushdown = filter is None or vx_filter is not None
        read_columns = list(columns) if columns is not None and pushdown else scan_columns(columns, filter, schema)
        names = read_columns if read_columns is not None else schema.names
        out_schema = plain_schema(pa.schema([schema.field(n) for n in names]))
        yield from scanned_batches(
            lambda: vfile.to_arrow(read_columns, expr=vx_filter, batch_size=batch_size, schema=out_schema),
            url,
            columns=columns,
            filter=filter,
            pushed_down=pushdown,
            skip=skip,
            damage=lambda exc: isinstance(exc, RuntimeError | ValueError | OSError | pa.ArrowException),
            unit="a vortex segment",
        )
    finally:
        if handle is not None:
            handle.close()


# ------------------------------------------------------------------------------------------------


def vortex_schema(url: str) -> pa.Schema:
    """The schema of the file's layout (no row is read), view types made plain."""
    with open_url(url, "rb", compression=None) as handle:
        return plain_schema(vortex_module().open_readable(handle).dtype.to_arrow_schema())


def write_vortex(batches: Iterator[pa.RecordBatch], url: str) -> WriteStats:
    """Write batches of one schema as one vortex file, atomically."""
    # Vortex writes only to a local path or its own object stores, which would bypass our fsspec
    # layer; so it writes a local temporary file that is then copied through atomic_write.
    vx = vortex_module()
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
            sink = CountingSink(raw)
            shutil.copyfileobj(src, sink, 8 << 20)
    finally:
        os.unlink(local)
    return WriteStats(path=url, records=records, bytes=sink.count)


VORTEX = Format("vortex", (".vortex", ".vtx"), write=write_vortex, batches=vortex_batches, schema=vortex_schema)
"""Vortex: columns and the filters Vortex can evaluate pushed into the scan; one schema per file."""
