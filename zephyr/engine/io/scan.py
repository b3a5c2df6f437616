"""Helpers shared by the columnar scans (parquet, vortex): filters the scan could not push down, unreadable files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from zephyr.engine.absent_fields import note
from zephyr.engine.expr import Expr
from zephyr.engine.io.bad_input import bad_file, short_error
from zephyr.errors import BadInputError


def scanned_batches(
    open_scan: Callable[[], Iterator[pa.RecordBatch]],
    url: str,
    *,
    columns: Sequence[str] | None,
    filter: Expr | None,
    pushed_down: bool,
    skip: bool,
    damage: Callable[[BaseException], bool],
    unit: str,
) -> Iterator[pa.RecordBatch]:
    """The non-empty batches of the scan `open_scan()` starts. A filter the scan could not take
    (`pushed_down` False) is applied here, and the columns read only for it are then dropped. An
    error for which `damage(error)` holds is a corrupt file (`unit`, e.g. "a parquet page", names what
    could not be decoded); any other (the filesystem's own: network, permissions) propagates, to be retried."""
    predicate = filter.compile() if filter is not None and not pushed_down else None
    kept = 0
    try:
        for batch in open_scan():
            if predicate is not None:
                assert filter is not None  # a predicate comes from the filter
                batch = filter_batch(batch, filter, predicate)
                if columns is not None:
                    batch = batch.select(list(columns))
            if batch.num_rows:
                kept += batch.num_rows
                yield batch
    except Exception as exc:  # noqa: BLE001 - sorted by `damage` just below
        if not damage(exc):
            raise
        bad_file(
            url,
            skip,
            "corrupt",
            f"{unit} cannot be decoded ({short_error(exc)})",
            fix="re-create or re-download the file",
            kept=kept,
        )


def filter_batch(batch: pa.RecordBatch, filter: Expr, predicate: Callable[[dict], Any]) -> pa.RecordBatch:
    """Apply `filter` to a batch the scan could not filter: vectorized when Arrow can, else per row."""
    if filter.columns() <= set(batch.schema.names):
        return batch.filter(filter.to_arrow())
    # A filter field the file lacks reads as null (as in jsonl): evaluate row by row.
    mask = pa.array([predicate(r) is True for r in batch.to_pylist()], pa.bool_())
    return batch.filter(mask)


def scan_columns(columns: Sequence[str] | None, filter: Expr | None, schema: pa.Schema) -> list[str] | None:
    """Columns to read when the filter runs after the scan: the wanted ones plus the filter's."""
    if columns is None:
        return None
    extra = sorted(
        c for c in (filter.columns() if filter is not None else ()) if c not in columns and c in schema.names
    )
    return [*columns, *extra]


def is_plain_local(fs: Any) -> bool:
    # Only the plain local filesystem is swapped for Arrow's native one; wrappers (guards, mirrors)
    # are subclasses or other classes and keep going through fsspec.
    """Whether `fs` is the plain local filesystem, which Arrow and Vortex read natively; wrappers (the region
    guard, mirrors) keep going through fsspec."""
    return type(fs) is LocalFileSystem


def unreadable_columnar_file(
    url: str, fs: Any, path: str, skip: bool, kind: str, exc: BaseException, fix: str | None = None
) -> None:
    """Report a parquet/vortex/arrow file whose footer (or header) cannot be read: empty (0 bytes) or corrupt."""
    empty = fs.size(path) == 0
    bad_file(
        url,
        skip,
        "empty" if empty else "corrupt",
        "the file is empty (0 bytes)"
        if empty
        else f"not a readable {kind} file: truncated, corrupt or not {kind} ({short_error(exc)})",
        fix=fix or f"re-create or re-download the file ({kind} needs its footer; a cut-off file has none)",
        kept=0,
    )


def check_scan(url: str, columns: Sequence[str] | None, filter: Expr | None, schema: pa.Schema) -> None:
    """Before a scan: a column asked for that the file lacks is an error (`check_columns`); a filter over a
    field the file does not have at all is noted (`zephyr.engine.absent_fields`), an error when no file read
    has it. Fields only tested with is_null()/is_not_null() may be absent."""
    check_columns(url, columns, schema)
    if filter is None or not len(schema):
        return
    fields = filter.value_columns()
    missing = sorted(c for c in fields if schema.get_field_index(c) < 0)
    note(
        fields,
        missing,
        lambda: (
            f"{url}: the filter {filter!r} reads field(s) {', '.join(map(repr, missing))}, which the file does not "
            f"have (its columns: {', '.join(schema.names)}). Fix the field name, or use col(...).is_null() for a "
            "field that is optional"
        ),
    )


def check_columns(url: str, columns: Sequence[str] | None, schema: pa.Schema) -> None:
    """A column asked for that the file lacks is an error: a typo is likelier than intent."""
    if columns is None:
        return
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise BadInputError(
            f"{url}: no column {', '.join(map(repr, missing))}; the file has columns {schema.names}. "
            "Check the spelling in columns=, or read without columns= and add the field in a map()"
        )
