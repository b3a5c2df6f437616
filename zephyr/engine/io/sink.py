"""What every writer shares: a byte-counting view of the output file and the stats it returns."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any


class CountingSink(io.RawIOBase):
    """A write-only view of an open file that counts bytes and never closes it (atomic_write does)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._target.write(data)
        self.count += n
        return n

    def tell(self) -> int:
        return self.count

    def flush(self) -> None:
        self._target.flush()


@dataclass(frozen=True)
class WriteStats:
    """What `write_records` wrote: the final URL, the record count and the file's size in bytes.

    `records == 0` means nothing was written and no file exists: the caller decides whether an
    empty output is an error or needs a placeholder.
    """

    path: str
    records: int
    bytes: int
