"""What a file format is to the engine: one `Format` value, registered once in `formats.py`.

Readers, writers, the planner and the folder-schema pass used to switch on the format's name in six
files; each now asks the format's entry instead, so a new format is one module defining its `Format`
and one line in the registry (`zephyr.engine.io.formats`). An entry gives:

- `suffixes`: file names it is read from (`infer_format`), and whether a compression suffix may follow
  (`compressible`: the reader then decompresses the stream itself, see `compression`);
- one reader: `batches` for a columnar format (Arrow record batches, with the columns and filter pushed
  into the scan where the format can) or `record_lists` for a row format (lists of dicts, in file order);
  the other reading form is derived from it (`records.read_records` / `read_batches`);
- `write`: one file, atomically, from blocks (dict lists for a row format) or from batches that share one
  schema (a columnar format); an empty shard's file is the same writer given no rows (None: read only);
- `schema`: the schema in a file's footer (columnar formats), which one written folder is unified to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from zephyr.engine.expr import Expr
from zephyr.engine.io.schema import WRITE_BLOCK
from zephyr.engine.io.sink import WriteStats

__all__ = ["Format", "BatchReader", "RecordListReader", "Writer"]

BatchReader = Callable[[str, Sequence[str] | None, Expr | None, int, bool], Iterator[pa.RecordBatch]]
"""`(url, columns, filter, batch_size, skip_bad) -> batches`: a columnar scan with push-down."""

RecordListReader = Callable[[str, Sequence[str] | None, Expr | None, bool, str | None], Iterator[list[dict]]]
"""`(url, columns, filter, skip_bad, compression) -> lists of records`, in file order."""

Writer = Callable[[Iterator[Any], str], WriteStats]
"""`(blocks, url) -> stats`: writes one file atomically; blocks are dict lists or Arrow batches (row
formats) or batches of one schema (columnar formats)."""


@dataclass(frozen=True)
class Format:
    """One file format's entry in the registry (`zephyr.engine.io.formats.FORMATS`)."""

    name: str
    suffixes: tuple[str, ...]  # lower-case name endings, e.g. (".parquet", ".pq"); () never inferred
    write: Writer | None = None  # None: a format that is only read
    batches: BatchReader | None = None  # columnar formats read Arrow batches
    record_lists: RecordListReader | None = None  # row formats read lists of dicts
    schema: Callable[[str], pa.Schema] | None = None  # a file's own schema (footer), view types made plain
    compressible: bool = False  # a .gz/.zst/.bz2/.xz suffix may follow (the reader decompresses)
    write_block: int = WRITE_BLOCK  # records per block handed to `write` (row formats: per serialisation pass)

    def __post_init__(self) -> None:
        if (self.batches is None) == (self.record_lists is None):
            raise ValueError(f"format {self.name!r}: give exactly one reader, batches= (columnar) or record_lists=")

    @property
    def columnar(self) -> bool:
        """Reads and writes Arrow batches: a map_batches or a scatter on fields takes them as they come."""
        return self.batches is not None

    def writer(self) -> Writer:
        """`write`, or a ValueError saying this format is only read."""
        if self.write is None:
            raise ValueError(
                f"the {self.name!r} format is only read: write another format "
                "(zephyr.engine.io.written_formats() lists those written)"
            )
        return self.write

    def describe_names(self) -> str:
        """The file names it is read from, for messages: ".parquet/.pq", ".jsonl/... (optionally + .gz/...)"."""
        names = "/".join(self.suffixes)
        return f"{names} (optionally + .gz/.zst/.bz2/.xz)" if self.compressible else names
