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
import pyarrow.parquet as pq

from zephyr.engine.io.hf import arrow_schema, write_arrow
from zephyr.engine.io.parquet import write_parquet
from zephyr.engine.io.schema import SchemaMismatchError, conform, plain_schema
from zephyr.engine.io.vortex import vortex_module, write_vortex
from zephyr.fs import open_url

__all__ = ["file_schema", "unify_folder_schema"]


def file_schema(url: str, format: str) -> pa.Schema:
    """The schema in a parquet/vortex file's footer, or an arrow file's header (view types made plain)."""
    if format == "arrow":
        return arrow_schema(url)
    if format == "parquet":
        with open_url(url, "rb", compression=None) as handle:
            return plain_schema(pq.read_schema(handle))
    with open_url(url, "rb", compression=None) as handle:
        return plain_schema(vortex_module().open_readable(handle).dtype.to_arrow_schema())


def unify_folder_schema(paths: Sequence[str], format: str) -> int:
    """Rewrite the files of `paths` whose schema is not the union of all of them; returns how many."""
    if format not in ("parquet", "vortex", "arrow") or len(paths) < 2:
        return 0
    schemas = [file_schema(p, format) for p in paths]
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(_conflict(paths, schemas, exc)) from None
    rewritten = 0
    for path, schema in zip(paths, schemas, strict=True):
        if not schema.equals(unified, check_metadata=False):
            _rewrite(path, format, unified)
            rewritten += 1
    return rewritten


def _rewrite(url: str, format: str, schema: pa.Schema) -> None:
    from zephyr.engine.io.records import read_batches

    def batches() -> Iterator[pa.RecordBatch]:
        count = 0
        for batch in read_batches(url, format=format):
            count += batch.num_rows
            yield conform(batch, schema, f"unifying the schema of {url}")
        if not count:
            yield pa.RecordBatch.from_pylist([], schema=schema)

    {"parquet": write_parquet, "vortex": write_vortex, "arrow": write_arrow}[format](batches(), url)


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
