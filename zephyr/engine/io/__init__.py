"""Record files: JSON Lines (plain or compressed), Parquet and Vortex, behind three front doors.

`read_records` / `read_batches` stream one file (dicts or Arrow batches), `write_records` writes one file
atomically, `write_partitioned` one file per value of a field. The modules behind them, one concept each:
`compression` (formats from names, damage-aware decompression), `bad_input` (raise or count),
`jsonl`, `parquet`, `vortex`, `schema` (dicts -> Arrow, one schema per file), `scan` (filters the scan
could not push down), `sink` (byte counting, WriteStats), `partitioned`.
"""

from zephyr.engine.io.compression import FORMATS, infer_format
from zephyr.engine.io.partitioned import write_partitioned
from zephyr.engine.io.records import read_batches, read_records, write_empty, write_records
from zephyr.engine.io.schema import SchemaMismatchError, batch_from_dicts
from zephyr.engine.io.sink import WriteStats

__all__ = [
    "FORMATS",
    "SchemaMismatchError",
    "WriteStats",
    "batch_from_dicts",
    "infer_format",
    "read_batches",
    "read_records",
    "write_empty",
    "write_partitioned",
    "write_records",
]
