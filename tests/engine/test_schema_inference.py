"""`ds.schema()` sees every shard and unifies types: ints in one file and floats in another are double.

A user's `ds.schema()` said `score: int64` for files where half the values are floats: the first 1,000
records all came from the first file.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from zephyr import Dataset, execution
from zephyr.engine.sample_schema import SCHEMA_FROM


@pytest.fixture(autouse=True)
def _local():
    with execution(backend="local", summary=False, progress=False):
        yield


def _write(tmp_path: Path, fmt: str) -> str:
    ints = [{"id": i, "score": i} for i in range(2000)]
    floats = [{"id": 2000 + i, "score": i + 0.5, "lang": "en"} for i in range(2000)]
    suffix = "jsonl.zst" if fmt == "jsonl" else fmt
    for n, rows in enumerate((ints, floats)):
        Dataset.from_list(rows).write(str(tmp_path / f"f{n}-{{shard}}.{suffix}")).execute()
    return str(tmp_path / f"*.{suffix}")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "vortex"])
def test_mixed_int_and_float_files_give_double(tmp_path: Path, fmt: str):
    schema = Dataset.from_files(_write(tmp_path, fmt)).schema()
    assert schema.field("score").type == pa.float64()
    assert schema.field("id").type == pa.int64()
    assert schema.field("lang").type in (pa.string(), pa.large_string())  # a field of the second file only
    said = schema.metadata[SCHEMA_FROM.encode()].decode()
    assert (f"2 {fmt} file(s)" in said) if fmt != "jsonl" else ("of each of 2 shard(s)" in said), said


def test_the_sample_is_spread_over_shards_and_reported():
    records = [{"v": 1}] * 50 + [{"v": 2.5, "w": "x"}] * 50
    schema = Dataset.from_list(records, num_shards=4).schema(sample=8)
    assert schema.field("v").type == pa.float64() and "w" in schema.names
    assert schema.metadata[SCHEMA_FROM.encode()] == b"a sample of 8 records: up to the first 2 of each of 4 shard(s)"


def test_types_that_do_not_widen_name_the_field():
    from zephyr.errors import BadInputError

    with pytest.raises(BadInputError, match="do not widen"):
        Dataset.from_list([{"v": 1}, {"v": "one"}], num_shards=2).schema()
