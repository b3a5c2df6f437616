"""Record files: JSON Lines (plain or compressed), Parquet, Vortex and Arrow IPC, behind three front doors.

`read_records` / `read_batches` stream one file (dicts or Arrow batches), `write_records` writes one file
atomically, `write_partitioned` one file per value of a field. The modules behind them, one concept each:
`format` (what a format is), `formats` (the registry, and formats from names), `jsonl`, `parquet`,
`vortex`, `hf` (Arrow IPC and Hugging Face folders), `paths` (one format each), `compression`
(damage-aware decompression), `bad_input` (raise or count), `schema` (dicts -> Arrow, one schema per file),
`scan` (what the columnar scans share), `sink` (byte counting, WriteStats), `partitioned`, `folder_schema`
(one schema per written folder), `listing`.
"""

from zephyr.engine.io.formats import FORMATS, format_named, infer_format, written_formats
from zephyr.engine.io.partitioned import write_partitioned
from zephyr.engine.io.records import read_batches, read_records, write_empty, write_records
from zephyr.engine.io.schema import SchemaMismatchError, batch_from_dicts
from zephyr.engine.io.sink import WriteStats

__all__ = [
    "FORMATS",
    "SchemaMismatchError",
    "WriteStats",
    "batch_from_dicts",
    "format_named",
    "infer_format",
    "read_batches",
    "read_records",
    "write_empty",
    "write_partitioned",
    "write_records",
    "written_formats",
]
