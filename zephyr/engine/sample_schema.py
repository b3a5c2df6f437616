"""`Dataset.schema()`: one Arrow schema for the records, from file footers or from a sample of every shard.

A user's `ds.schema()` said `score: int64` over files where half the values are floats: it read the first
1,000 records, all from the first file, and took the types it saw there. Now files that keep a schema
(parquet, vortex, arrow: the registry's `Format.schema`) give their own (footers only), unified across
the files; other inputs are sampled from every shard (the first records of each), and each field's types
are unified across the sample with Arrow's permissive promotion (int64 and double -> double, null -> the
other type). The schema's metadata says what it was
read from, so a reader knows how much was seen.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from zephyr.engine import ops as O
from zephyr.engine.io.schema import batch_from_dicts, unified_schema
from zephyr.errors import BadInputError

__all__ = ["SCHEMA_FROM", "dataset_schema"]

SCHEMA_FROM = "zephyr.schema_from"
"""The schema metadata key saying what the schema was read from (files, or a sample of how many records)."""

_SCHEMA_FILES = 256  # footers read: every file of most folders, a bounded number of requests on huge ones


def dataset_schema(dataset: Any, sample: int) -> pa.Schema:
    """The schema of `dataset`'s records (see the module docstring); `sample` records in all, about."""
    if sample < 1:
        raise ValueError(f"schema needs sample >= 1, got {sample}")
    if not dataset.ops and isinstance(dataset.source, O.FilesSource):
        from_files = _footer_schema(dataset.source)
        if from_files is not None:
            return from_files
    from zephyr.engine.context import current_config
    from zephyr.engine.plan import plan

    shards = max(1, plan(dataset, current_config()).stages[-1].num_shards)
    per_shard = max(1, math.ceil(sample / shards))
    parts = [p for p in dataset.map_shard(_FirstRecords(per_shard)).collect() if p]
    seen = sum(len(p) for p in parts)
    note = f"a sample of {seen:,} records: up to the first {per_shard:,} of each of {shards:,} shard(s)"
    if not parts:
        return pa.schema([], metadata={SCHEMA_FROM: "no records"})
    if not all(isinstance(r, dict) for p in parts for r in p):
        values = [r for p in parts for r in p]
        return pa.schema([pa.field("value", pa.array(values).type)], metadata={SCHEMA_FROM: note})
    where = f"schema() over {note}"
    schemas = [batch_from_dicts(p, where=where, error=BadInputError).schema for p in parts]
    return unified_schema(schemas, where=where).with_metadata({SCHEMA_FROM: note})


@dataclass(frozen=True)
class _FirstRecords:
    """The first `n` records of a shard, as one list."""

    n: int

    def __call__(self, records: Iterable[Any]) -> Iterable[Any]:
        yield list(itertools.islice(records, self.n))


def _footer_schema(source: O.FilesSource) -> pa.Schema | None:
    """The unified schema of files read as they are, from their own schemas (parquet and vortex footers, arrow
    headers: every format whose registry entry has `schema`); None when a file's format keeps no schema."""
    from zephyr.engine.io import format_named, infer_format
    from zephyr.engine.io.listing import data_files

    files = [f for pattern in source.patterns for f in data_files(pattern, source.format)]
    try:
        names = {source.format or infer_format(f) for f in files}
    except BadInputError:
        return None
    if not files or len(names) != 1:
        return None
    fmt = format_named(names.pop())
    if fmt.schema is None:
        return None
    read = files[:_SCHEMA_FILES]
    schema = unified_schema([fmt.schema(path) for path in read], where=f"schema() of {source.patterns[0]!r}")
    if source.columns is not None:
        schema = pa.schema([schema.field(c) for c in source.columns if c in schema.names])
    more = f" (the first {len(read):,} of {len(files):,})" if len(files) > len(read) else ""
    return schema.with_metadata({SCHEMA_FROM: f"the footers of {len(read):,} {fmt.name} file(s){more}"})
