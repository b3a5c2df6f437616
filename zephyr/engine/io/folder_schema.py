"""One schema per written parquet/vortex/arrow folder, so polars, pyarrow.dataset and HF datasets read it whole.

Each shard writes its file with the schema of its own records, so a field that only some shards have
(`filter_reason`, `dup_cluster`), a column that is all null in one shard, or an empty shard gives files
whose schemas differ, which polars (`SchemaError`) and HF datasets (`CastError`) refuse to read as one
table. After a sink's shards are written, `unify_folder_schema` unifies their schemas (Arrow's permissive
promotion: null -> any type, int -> float, missing fields -> null) and rewrites, atomically, the files
that differ. Types that cannot be unified (a field that is a string in one shard and a number in
another) raise `SchemaMismatchError` naming the field and files, with the fix (`schema=`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from zephyr.engine.io.format import Format
from zephyr.engine.io.formats import format_named
from zephyr.engine.io.schema import SchemaMismatchError, conform

__all__ = ["unify_folder_schema"]


def unify_folder_schema(paths: Sequence[str], format: str) -> int:
    """Rewrite the files of `paths` whose schema is not the union of all of them; returns how many.
    Formats without a schema of their own (jsonl: each record keeps its fields) are left as they are."""
    fmt = format_named(format)
    if fmt.schema is None or len(paths) < 2:
        return 0
    schemas = [fmt.schema(p) for p in paths]
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(_conflict(paths, schemas, exc)) from None
    rewritten = 0
    for path, schema in zip(paths, schemas, strict=True):
        if not schema.equals(unified, check_metadata=False):
            _rewrite(path, fmt, unified)
            rewritten += 1
    return rewritten


def _rewrite(url: str, fmt: Format, schema: pa.Schema) -> None:
    from zephyr.engine.io.records import read_batches

    def batches() -> Iterator[pa.RecordBatch]:
        count = 0
        for batch in read_batches(url, format=fmt.name):
            count += batch.num_rows
            yield conform(batch, schema, f"unifying the schema of {url}")
        if not count:
            yield pa.RecordBatch.from_pylist([], schema=schema)

    fmt.writer()(batches(), url)


def _conflict(paths: Sequence[str], schemas: Sequence[pa.Schema], exc: Exception) -> str:
    seen: dict[str, tuple[pa.DataType, str]] = {}
    for path, schema in zip(paths, schemas, strict=True):
        for field in schema:
            if field.name in seen and not pa.types.is_null(field.type):
                other, where = seen[field.name]
                try:
                    pa.unify_schemas(
                        [pa.schema([pa.field(field.name, other)]), pa.schema([field])], promote_options="permissive"
                    )
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    return (
                        f"the written files disagree on field {field.name!r}: {other} in {where}, {field.type} in "
                        f"{path}; one folder needs one schema. Give the field one type in a map() before writing "
                        "(e.g. str(x)), or pass schema= to the write with the full schema"
                    )
            if field.name not in seen or pa.types.is_null(seen[field.name][0]):
                seen[field.name] = (field.type, path)
    return f"the written files' schemas cannot be unified ({exc}); pass schema= to the write with the full schema"
