"""Partitioned writes: one file per value of a field, in one pass, with bounded memory."""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from zephyr.engine.io.records import write_records
from zephyr.engine.io.sink import WriteStats

_PARTITION_BUFFER = 65536  # records held in memory across all partitions before spilling


def _partition_value(value: Any, field: str, where: str) -> str | int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (str, int))
        or value == ""
        or "/" in str(value)
        or str(value) in (".", "..")
    ):
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
                    # One spill file per value, kept open across flushes; closed in the finally below.
                    spill_files[value] = open(os.path.join(spill, f"{len(spill_files)}.pkl"), "wb")  # noqa: SIM115
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
