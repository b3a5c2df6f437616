"""The local cache of bucket store chunks: bounded in bytes, LRU by chunk, shared by a host's processes.

A ranged reader (:mod:`zephyr.tokenize.store_remote`) fetches 512-byte chunks of ``tokens.bin``; this keeps
them on local disk so that what is read again (eval batches, a second run over the same mixture, the
chunk two neighbouring windows share) is not fetched again, and never holds more than its bound
(``$ZEPHYR_STORE_CACHE_MAX``), whatever the size of the stores.

Layout (``<store cache>/.chunks/<chunk bytes>-<bound>/``): ``slots.bin``, ``capacity`` slots of one chunk
each (a sparse file: it takes disk as it fills); ``index.bin``, a 64-byte header then one 40-byte record per
slot (file key, chunk number, digest, length, stamp); ``lock``. Both files are created at their full size,
which is the bound, so the cache cannot outgrow it. Slots are grouped in sets of ``WAYS``: a chunk may only
live in the set its key hashes to, and a new chunk takes the set's empty or least recently used slot (LRU
within 16 candidates, as CPU caches do: no global list to keep consistent between processes, one lookup
reads one set).

Keys are content addresses: ``file`` is the shard's ``tokens.bin`` digest (the manifest's), so identical
shards of different stores share entries and a rewritten shard never hits an old one.

Crash safety: a record counts only while its ``stamp`` is non-zero. A chunk is written as stamp := 0, key
and digest, the bytes (``pwrite``), stamp := clock; a process killed anywhere in between (``kill -9``) leaves
a record with stamp 0 (empty) or a complete one. Every hit is also checked against the record's digest
(XXH3-64 seeded by the file key, as the store's ``tokens.xxh3`` holds it) before it is returned, so even a
disk that lost writes in a power cut cannot serve wrong bytes: a bad slot is emptied and counts as a miss.
The processes of one host share the cache under an ``flock`` (released by the kernel if a holder dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .store_format import chunk_digest

__all__ = ["ChunkCache", "RECORD", "WAYS", "open_chunk_cache"]

WAYS = 16
RECORD = np.dtype(
    [("file", "<u8"), ("chunk", "<u8"), ("digest", "<u8"), ("length", "<u4"), ("pad", "<u4"), ("stamp", "<u8")]
)
_HEADER = 64  # magic, chunk bytes, capacity, then the clock at offset 24
_MAGIC = b"ZCHUNK01"
_log = logging.getLogger("zephyr.tokenize")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads neighbouring chunk numbers over all sets."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class ChunkCache:
    """One cache directory, opened by one process (reopened after a fork). Thread-safe.

    ``get_many``/``put_many`` take parallel arrays of file keys and chunk numbers; see the module docstring.
    """

    def __init__(self, directory: Path, chunk_bytes: int, capacity: int) -> None:
        self.directory, self.chunk_bytes, self.capacity = directory, chunk_bytes, capacity
        self.sets = capacity // WAYS
        self._pid = -1
        self._mutex = threading.Lock()
        self._disabled = False

    def _open(self) -> None:
        if self._pid == os.getpid():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        with self._flock():
            for dead in self.directory.glob(".tmp-*"):  # of a process killed while creating the index
                dead.unlink(missing_ok=True)
            index = self.directory / "index.bin"
            size = _HEADER + self.capacity * RECORD.itemsize
            if not index.is_file() or index.stat().st_size != size:
                tmp = index.with_name(f".tmp-{os.getpid()}-index.bin")
                with open(tmp, "wb") as handle:
                    header = _MAGIC + np.asarray([self.chunk_bytes, self.capacity], "<u8").tobytes()
                    handle.write(header.ljust(_HEADER, b"\0"))
                    os.posix_fallocate(handle.fileno(), 0, size)  # no SIGBUS on a full disk later
                with open(self.directory / "slots.bin", "wb") as handle:
                    handle.truncate(self.capacity * self.chunk_bytes)  # sparse: disk as it fills
                os.replace(tmp, index)
        self._slots_fd = os.open(self.directory / "slots.bin", os.O_RDWR)
        self._map = np.memmap(self.directory / "index.bin", dtype=np.uint8, mode="r+")
        self._clock = self._map[24:32].view("<u8")
        self._records = self._map[_HEADER:].view(RECORD)
        self._pid = os.getpid()

    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            self._open()
            with self._flock():
                yield

    def _rows(self, files: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """[n, WAYS] slot numbers each key may occupy."""
        sets = _mix(files ^ _mix(chunks + np.uint64(1))) % np.uint64(self.sets)
        return sets.astype(np.int64)[:, None] * WAYS + np.arange(WAYS)

    def get_many(self, files: np.ndarray, chunks: np.ndarray) -> list[bytes | None]:
        """The cached bytes of each (file, chunk), None where absent (or found damaged, then dropped)."""
        files, chunks = np.asarray(files, np.uint64), np.asarray(chunks, np.uint64)
        out: list[bytes | None] = [None] * len(files)
        if self._disabled or not len(files):
            return out
        with self._locked():
            rows = self._rows(files, chunks)
            found = self._records[rows]
            match = (found["file"] == files[:, None]) & (found["chunk"] == chunks[:, None]) & (found["stamp"] != 0)
            stamp = self._tick()
            for i, way in zip(*np.nonzero(match), strict=True):
                slot, record = int(rows[i, way]), found[i, way]
                data = os.pread(self._slots_fd, int(record["length"]), slot * self.chunk_bytes)
                if len(data) != record["length"] or chunk_digest(data, int(record["file"])) != record["digest"]:
                    self._records["stamp"][slot] = 0  # lost writes (a power cut): drop, count as a miss
                    continue
                self._records["stamp"][slot] = stamp
                out[i] = data
        return out

    def put_many(self, files: np.ndarray, chunks: np.ndarray, digests: np.ndarray, data: Sequence[bytes]) -> None:
        """Keep verified chunks (their digests already checked by the caller), evicting the LRU slot of a set."""
        files, chunks = np.asarray(files, np.uint64), np.asarray(chunks, np.uint64)
        if self._disabled or not len(files):
            return
        with self._locked():
            rows = self._rows(files, chunks)
            stamp = self._tick()
            records = self._records
            try:
                for i in range(len(files)):
                    found = records[rows[i]]
                    same = (found["file"] == files[i]) & (found["chunk"] == chunks[i]) & (found["stamp"] != 0)
                    if same.any():  # another process or an earlier item of this call kept it
                        records["stamp"][rows[i][same]] = stamp
                        continue
                    slot = int(rows[i][int(np.argmin(found["stamp"]))])  # an empty slot (0) or the LRU one
                    records["stamp"][slot] = 0  # first: a kill from here on leaves the slot empty
                    records[slot] = (files[i], chunks[i], digests[i], len(data[i]), 0, 0)
                    os.pwrite(self._slots_fd, data[i], slot * self.chunk_bytes)
                    records["stamp"][slot] = stamp  # last: one aligned 8-byte store
            except OSError as exc:  # a full disk: keep reading from the bucket, without the cache
                self._disabled = True
                _log.warning("zephyr: the store chunk cache %s stopped caching: %s", self.directory, exc)

    def _tick(self) -> int:
        self._clock[0] += 1
        return int(self._clock[0])

    def disk_bytes(self) -> int:
        """Bytes the cache's files take on disk now (never above the bound: both are created at its size)."""
        total = 0
        for name in ("index.bin", "slots.bin", "lock"):
            with contextlib.suppress(FileNotFoundError):
                total += (self.directory / name).stat().st_blocks * 512
        return total

    def entries(self) -> Iterator[tuple[int, int, int, bytes]]:
        """Every live record as (file key, chunk, digest, bytes): for checks and tests."""
        with self._locked():
            live = np.nonzero(self._records["stamp"] != 0)[0]
            for slot in live.tolist():
                record = self._records[slot]
                data = os.pread(self._slots_fd, int(record["length"]), slot * self.chunk_bytes)
                yield int(record["file"]), int(record["chunk"]), int(record["digest"]), data


def open_chunk_cache(root: Path, chunk_bytes: int, max_bytes: int) -> ChunkCache | None:
    """The cache under ``root / ".chunks"`` for chunks of ``chunk_bytes``, sized to ``max_bytes`` in all (None when
    the bound cannot hold one set). Caches of another size or bound there are removed: only one bound holds."""
    capacity = (max_bytes - _HEADER - 4096) // (chunk_bytes + RECORD.itemsize) // WAYS * WAYS
    if capacity < WAYS:
        return None
    base = root / ".chunks"
    name = f"{chunk_bytes}-{max_bytes}"
    if base.is_dir():
        for other in base.iterdir():  # a process still using one keeps its open files until it exits
            if other.name != name and not other.name.startswith("."):
                shutil.rmtree(other, ignore_errors=True)
    return ChunkCache(base / name, chunk_bytes, capacity)
