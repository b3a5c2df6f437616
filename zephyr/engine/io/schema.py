"""Dicts -> Arrow, plain (non-view) types, and holding one schema per written file."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from zephyr.engine.io.bad_input import short_error
from zephyr.errors import BadInputError, ZephyrError

WRITE_BLOCK = 8192  # records per orjson/Arrow conversion when writing


class SchemaMismatchError(ZephyrError, ValueError):
    """Records written to one parquet/vortex file whose fields or types disagree with the file's schema."""


def plain_type(t: pa.DataType) -> pa.DataType:
    """string_view/binary_view -> string/binary, recursively: the types every Arrow consumer takes."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(plain_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        item = t.value_field.with_type(plain_type(t.value_type))
        return pa.large_list(item) if pa.types.is_large_list(t) or pa.types.is_large_list_view(t) else pa.list_(item)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)), t.list_size)
    if pa.types.is_map(t):
        return pa.map_(plain_type(t.key_type), t.item_field.with_type(plain_type(t.item_type)))
    return t


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with view types made plain (`plain_type`), its metadata kept."""
    return pa.schema([f.with_type(plain_type(f.type)) for f in schema], metadata=schema.metadata)


def batch_from_dicts(rows: list[dict], *, where: str, error: type[Exception]) -> pa.RecordBatch:
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
                    f"put in one column ({short_error(field_exc)}). Give the field one type in a map() (e.g. str(x)), "
                    "or write jsonl, which keeps each record as it is"
                ) from None
        raise error(f"{where}: the records cannot be converted to Arrow ({short_error(exc)})") from None


def unified_schema(schemas: Sequence[pa.Schema], *, where: str) -> pa.Schema:
    """One schema that holds every one of `schemas`: fields in first-seen order, a field's types widened
    as a reader of all of them needs (int64 and double -> double, null -> the other type). Types that
    do not widen into one (int and string) raise BadInputError naming the field and `where`."""
    try:
        return plain_schema(pa.unify_schemas([plain_schema(s) for s in schemas], promote_options="permissive"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise BadInputError(
            f"{where}: a field holds types that do not widen into one ({short_error(exc)}); give it one type "
            "in a map() (e.g. float(x) or str(x)) before asking for one schema"
        ) from None


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


def conform(batch: pa.RecordBatch, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """`batch` with exactly `schema`: columns reordered, missing ones null, types cast losslessly."""
    if batch.schema.equals(schema):
        return batch
    conflict = _field_conflict(schema, plain_schema(batch.schema))
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


def item_blocks(
    items: Iterable[dict | pa.RecordBatch], size: int = WRITE_BLOCK
) -> Iterator[list[dict] | pa.RecordBatch]:
    """Group consecutive dicts into lists of up to `size`; pass record batches through."""
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
        if len(block) >= size:
            yield block
            block = []
    if block:
        yield block


def conformed_batches(
    blocks: Iterable[list[dict] | pa.RecordBatch], url: str, schema: pa.Schema | None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches that all share one schema: `schema`, or the first batch's (view types made plain)."""
    written = 0
    for block in blocks:
        n = len(block) if isinstance(block, list) else block.num_rows
        where = f"writing {url}, records {written + 1}-{written + n}"
        batch = (
            block
            if isinstance(block, pa.RecordBatch)
            else batch_from_dicts(block, where=where, error=SchemaMismatchError)
        )
        if schema is None:
            schema = plain_schema(batch.schema)
        yield conform(batch, schema, where)
        written += n


# ------------------------------------------------------------------------------------------------
