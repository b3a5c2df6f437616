"""Bucket token stores (``gs://``, ``s3://``) read by byte ranges: a step fetches what it trains on, no more.

A trillion-token store is terabytes; copying it to every host before the first step (what
:mod:`~zephyr.tokenize.store_copy` does, still there as an explicit choice) costs hosts x store bytes of
transfer and a store's size of disk per host. :class:`RangedStore` instead serves token slices from the
bucket itself:

- every 512-byte chunk of a shard's ``tokens.bin`` has its digest in the shard's ``tokens.xxh3`` (written
  by :class:`~zephyr.tokenize.store_write.ShardWriter`, seeded by the ``tokens.bin`` digest the manifest
  lists, so digests of one version of a shard never vouch for another's bytes);
- a read of many slices (a batch of windows) looks its chunks up in the local chunk cache
  (:mod:`~zephyr.tokenize.chunk_cache`, bounded by ``$ZEPHYR_STORE_CACHE_MAX``), groups the missing ones
  into runs of consecutive chunks and fetches every run and its digests in one ``cat_ranges`` call
  (concurrent requests), checks each chunk against its digest, keeps it in the cache, then cuts the slices
  out. A window of seq_len 2048 costs about 1.14x its bytes (whole chunks at both ends, plus digests).
- offsets and the document index (small) are fetched whole when asked for and checked against the
  manifest's digests; ``verify`` and ``export`` stream shards in 8 MiB blocks past the cache.

A store written before chunk digests has none to check ranges against: :func:`open_ranged` returns None
and says so, and the store is read from a whole local copy, verified shard by shard, as before.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from .chunk_cache import ChunkCache, open_chunk_cache
from .store_format import CHUNK_DIGESTS, chunk_digests, chunk_seed, parse_manifest, store_cache_max, store_cache_root

__all__ = ["FetchStats", "RangedStore", "StreamBlock", "open_ranged", "remote_manifest", "stream_tokens_file"]

STREAM_BYTES = 8 << 20  # verify and export read shards in blocks of this size (a multiple of the chunk size)
_ENDS_KEPT = 16  # shards whose offsets stay in memory (8 bytes per document each)
_log = logging.getLogger("zephyr.tokenize")


def remote_manifest(url: str) -> bytes:
    """The bytes of ``url/manifest.json``, fresh from the bucket (a clear error when there is none)."""
    from zephyr.fs import join, url_to_fs

    fs, path = url_to_fs(join(url, "manifest.json"))
    fs.invalidate_cache(path)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        try:
            unfinished = fs.exists(join(path.rsplit("/", 1)[0], "shards"))
        except OSError:
            unfinished = False
        hint = " (shards/ exists: a tokenize run that has not finished yet, or one that died?)" if unfinished else ""
        raise FileNotFoundError(
            f"{url}/manifest.json not found: {url} is not a complete token store{hint}. Point at a store that "
            f"tokenize_dataset(..., output={url!r}) finished writing, or rerun it (complete shards are reused)."
        ) from None


@dataclass
class FetchStats:
    """What a ranged store has read so far: payload bytes from the bucket (data, digests, small files),
    requests, and chunks served by the bucket or by the local cache."""

    bytes_fetched: int = 0
    requests: int = 0
    chunks_fetched: int = 0
    chunks_cached: int = 0


@dataclass(frozen=True)
class StreamBlock:
    """One block of a streamed shard: its byte offset in ``tokens.bin``, its bytes, and the chunk numbers whose
    bytes do not match ``tokens.xxh3`` (empty for a sound block)."""

    offset: int
    data: bytes
    bad_chunks: tuple[int, ...]


def open_ranged(url: str, manifest_bytes: bytes) -> RangedStore | None:
    """A ranged reader of the store at ``url``, or None (with a warning) when it has no chunk digests."""
    manifest = parse_manifest(url, manifest_bytes)
    if "chunk_bytes" in manifest:
        return RangedStore(url, manifest_bytes)
    _log.warning(
        "zephyr: token store %s has no per-chunk digests (written before them, or resumed from such shards), so "
        "byte ranges of it cannot be checked: reading it from a whole local copy instead, verified shard by shard. "
        "Rewrite it (tokenize with --no-resume) to read it by ranges.",
        url,
    )
    return None


class RangedStore:
    """Token slices of a bucket store, fetched by byte range and checked chunk by chunk (module docstring).

    Thread-safe; picklable (the filesystem and the cache are reopened where it is unpickled).
    """

    def __init__(self, url: str, manifest_bytes: bytes) -> None:
        self.url = url
        self._manifest_bytes = manifest_bytes
        self.manifest: dict[str, Any] = parse_manifest(url, manifest_bytes)
        self.dtype = np.dtype(self.manifest["dtype"])
        self.chunk_bytes = int(self.manifest["chunk_bytes"])
        shards = self.manifest["shards"]
        self._paths = [str(s["path"]) for s in shards]
        self._seeds = np.asarray([chunk_seed(s["xxh3_64"]["tokens.bin"]) for s in shards], dtype=np.uint64)
        self._sizes = [int(s["tokens"]) * self.dtype.itemsize for s in shards]
        self.stats = FetchStats()
        self._lock = threading.Lock()
        self._ends: OrderedDict[int, np.ndarray] = OrderedDict()
        self._fs: Any = None
        self._root = ""
        self._cache: ChunkCache | None = None
        self._cache_opened = False

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "manifest_bytes": self._manifest_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["manifest_bytes"])  # type: ignore[misc]

    # -- plumbing ----------------------------------------------------------------------------------

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None:
            from zephyr.fs import url_to_fs

            self._fs, self._root = url_to_fs(self.url)
        return self._fs, self._root

    @property
    def cache(self) -> ChunkCache | None:
        """The host's chunk cache (:class:`~zephyr.tokenize.chunk_cache.ChunkCache`), None when the bound is 0."""
        if not self._cache_opened:
            self._cache = open_chunk_cache(store_cache_root(), self.chunk_bytes, store_cache_max())
            self._cache_opened = True
        return self._cache

    def _file(self, shard: int, name: str) -> str:
        return f"{self._root}/{self._paths[shard]}/{name}"

    def _where(self, shard: int) -> str:
        return f"token store {self.url}, shard {self._paths[shard]}"

    def _damaged(self, shard: int, chunk: int, detail: str) -> str:
        step = self.chunk_bytes
        return (
            f"{self._where(shard)}, chunk {chunk} (bytes [{chunk * step}, {(chunk + 1) * step}) of tokens.bin) "
            f"{detail}. Open the store again; `zephyr verify {self.url}` lists every damaged chunk."
        )

    def _missing(self, shard: int, name: str) -> FileNotFoundError:
        return FileNotFoundError(
            f"{self.url}/{self._paths[shard]}/{name} not found although {self.url}/manifest.json lists shard "
            f"{self._paths[shard]}: the store is damaged or being rewritten; rerun tokenize_dataset on it."
        )

    def _count(self, payloads: Sequence[bytes], chunks_fetched: int = 0, chunks_cached: int = 0) -> None:
        with self._lock:
            self.stats.bytes_fetched += sum(len(p) for p in payloads)
            self.stats.requests += len(payloads)
            self.stats.chunks_fetched += chunks_fetched
            self.stats.chunks_cached += chunks_cached

    def _cat_ranges(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        """Fetch (shard, file name, start, end) byte ranges concurrently; errors name the store and shard."""
        fs, _ = self._filesystem()
        paths = [self._file(shard, name) for shard, name, _, _ in requests]
        results = fs.cat_ranges(paths, [r[2] for r in requests], [r[3] for r in requests], on_error="return")
        for (shard, name, start, end), result in zip(requests, results, strict=True):
            if isinstance(result, FileNotFoundError):
                raise self._missing(shard, name) from None
            if isinstance(result, BaseException):
                result.add_note(f"while reading bytes [{start}, {end}) of {name} of {self._where(shard)}")
                raise result
            if len(result) != end - start:
                raise ValueError(
                    f"{self._where(shard)}: bytes [{start}, {end}) of {name} came back as {len(result)} bytes: the "
                    "object is shorter than its manifest says (the store is damaged or being rewritten); run "
                    f"`zephyr verify {self.url}`."
                )
        self._count(results)
        return results

    # -- token slices ------------------------------------------------------------------------------

    def read(self, pieces: Sequence[tuple[int, int, int]]) -> list[np.ndarray]:
        """Token slices ``(shard, start, stop)`` (token offsets within the shard) as arrays, in order.

        All chunks the slices touch are looked up in the cache, and the missing ones fetched in one batch of
        concurrent ranged requests: call it with a whole batch, not window by window.
        """
        size, step = self.dtype.itemsize, self.chunk_bytes
        wanted: dict[tuple[int, int], bytes | None] = {}
        for shard, start, stop in pieces:
            if stop > start:
                for chunk in range(start * size // step, (stop * size - 1) // step + 1):
                    wanted[(shard, chunk)] = None
        keys = sorted(wanted)
        cache = self.cache
        if cache is not None and keys:
            shards = np.asarray([k[0] for k in keys], dtype=np.int64)
            hits = cache.get_many(self._seeds[shards], np.asarray([k[1] for k in keys], dtype=np.uint64))
            wanted.update((key, data) for key, data in zip(keys, hits, strict=True) if data is not None)
        missing = [key for key in keys if wanted[key] is None]
        fetched = self._fetch_chunks(missing)
        wanted.update(fetched)
        self._count([], chunks_fetched=len(missing), chunks_cached=len(keys) - len(missing))
        out = []
        for shard, start, stop in pieces:
            if stop <= start:
                out.append(np.zeros(0, dtype=self.dtype))
                continue
            first, last = start * size // step, (stop * size - 1) // step
            joined = b"".join(wanted[(shard, c)] for c in range(first, last + 1))  # type: ignore[misc]
            base = first * step
            out.append(np.frombuffer(joined[start * size - base : stop * size - base], dtype=self.dtype))
        return out

    def _fetch_chunks(self, missing: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Fetch sorted (shard, chunk) keys as runs of consecutive chunks, check them, keep them in the cache."""
        runs: list[list[int]] = []  # [shard, first chunk, last chunk]
        for shard, chunk in missing:
            if runs and runs[-1][0] == shard and runs[-1][2] == chunk - 1:
                runs[-1][2] = chunk
            else:
                runs.append([shard, chunk, chunk])
        out: dict[tuple[int, int], tuple[bytes, int]] = {}
        if not runs:
            return {}
        bad = self._fetch_runs(runs, out)
        # Once more: a torn response. A second mismatch is the bucket's bytes.
        again = self._fetch_runs([[shard, chunk, chunk] for shard, chunk, _, _ in bad], out) if bad else []
        keys = sorted(out)
        if self.cache is not None:  # only chunks that matched their digests
            self.cache.put_many(
                self._seeds[np.asarray([k[0] for k in keys], dtype=np.int64)],
                np.asarray([k[1] for k in keys], dtype=np.uint64),
                np.asarray([out[k][1] for k in keys], dtype=np.uint64),
                [out[k][0] for k in keys],
            )
        if again:
            shard, chunk, got, want = again[0]
            raise ValueError(
                self._damaged(
                    shard,
                    chunk,
                    f"XXH3-64 {got:016x}, {CHUNK_DIGESTS} says {want:016x} (fetched twice; {len(again)} chunk(s) "
                    "so): the store changed since it was opened (rewritten?) or is damaged",
                )
            )
        return {k: out[k][0] for k in keys}

    def _fetch_runs(
        self, runs: Sequence[Sequence[int]], out: dict[tuple[int, int], tuple[bytes, int]]
    ) -> list[tuple[int, int, int, int]]:
        """Fetch runs and their digests; put each sound chunk in ``out`` as (bytes, digest); return the
        (shard, chunk, got, want) of those that do not match."""
        step = self.chunk_bytes
        requests: list[tuple[int, str, int, int]] = []
        for shard, first, last in runs:
            requests.append((shard, "tokens.bin", first * step, min((last + 1) * step, self._sizes[shard])))
            requests.append((shard, CHUNK_DIGESTS, first * 8, (last + 1) * 8))
        results = self._cat_ranges(requests)
        bad = []
        for (shard, first, _), data, raw in zip(runs, results[0::2], results[1::2], strict=True):
            want = np.frombuffer(raw, dtype="<u8")
            got = chunk_digests(data, int(self._seeds[shard]), step)
            view = memoryview(data)
            for i, (g, w) in enumerate(zip(got.tolist(), want.tolist(), strict=True)):
                if g == w:
                    out[(shard, first + i)] = (bytes(view[i * step : (i + 1) * step]), g)
                else:
                    bad.append((shard, first + i, g, w))
        return bad

    # -- whole small files, and streams ------------------------------------------------------------

    def file_bytes(self, shard: int, name: str) -> bytes:
        """A small file of a shard (``offsets.npy``, ``documents.parquet``), checked against the manifest's digest."""
        fs, _ = self._filesystem()
        try:
            data = fs.cat_file(self._file(shard, name))
        except FileNotFoundError:
            raise self._missing(shard, name) from None
        self._count([data])
        want = self.manifest["shards"][shard].get("xxh3_64", {}).get(name)
        if want is not None and xxhash.xxh3_64_hexdigest(data) != want:
            raise ValueError(
                f"{self._where(shard)}: {name} has XXH3-64 digest {xxhash.xxh3_64_hexdigest(data)}, the manifest says "
                f"{want}: the store changed since it was opened (rewritten?) or is damaged; open it again, or run "
                f"`zephyr verify {self.url}`."
            )
        return data

    def ends(self, shard: int) -> np.ndarray:
        """The shard's document end offsets (``offsets.npy``), fetched once and kept for a few shards."""
        with self._lock:
            hit = self._ends.get(shard)
            if hit is not None:
                self._ends.move_to_end(shard)
                return hit
        ends = np.load(io.BytesIO(self.file_bytes(shard, "offsets.npy")))
        documents = int(self.manifest["shards"][shard]["documents"])
        if len(ends) != documents:
            raise ValueError(
                f"{self._where(shard)}: offsets.npy has {len(ends)} entries, the manifest says {documents} documents: "
                "the store is damaged or being rewritten; rerun tokenize_dataset on it."
            )
        with self._lock:
            self._ends[shard] = ends
            if len(self._ends) > _ENDS_KEPT:
                self._ends.popitem(last=False)
        return ends

    def check_stream(self, shard: int) -> Iterator[np.ndarray]:
        """The shard's tokens in blocks, past the cache, raising on the first chunk that does not match its digest."""
        fs, _ = self._filesystem()
        digests = np.frombuffer(self.file_bytes(shard, CHUNK_DIGESTS), dtype="<u8")
        blocks = stream_tokens_file(
            fs,
            self._file(shard, "tokens.bin"),
            chunk_bytes=self.chunk_bytes,
            seed=int(self._seeds[shard]),
            digests=digests,
        )
        for block in blocks:
            self._count([block.data])
            if block.bad_chunks:
                detail = f"does not match its digest in {CHUNK_DIGESTS}: the store is damaged or being rewritten"
                raise ValueError(self._damaged(shard, block.bad_chunks[0], detail))
            yield np.frombuffer(block.data, dtype=self.dtype)


def stream_tokens_file(
    fs: Any, path: str, *, chunk_bytes: int, seed: int, digests: np.ndarray | None, block_bytes: int = STREAM_BYTES
) -> Iterator[StreamBlock]:
    """A ``tokens.bin`` (local or in a bucket) read front to back in blocks, each block's chunks compared with
    ``digests`` (its ``tokens.xxh3``; None: not compared): what ``verify`` and ``export`` read, past the cache."""
    block_bytes = max(chunk_bytes, block_bytes // chunk_bytes * chunk_bytes)
    with fs.open(path, "rb") as handle:
        offset = 0
        while data := handle.read(block_bytes):
            bad: tuple[int, ...] = ()
            if digests is not None:
                first = offset // chunk_bytes
                got = chunk_digests(data, seed, chunk_bytes)
                want = digests[first : first + len(got)]  # shorter when tokens.xxh3 is: the rest is unchecked, bad
                bad = tuple((np.nonzero(got[: len(want)] != want)[0] + first).tolist()) + tuple(
                    range(first + len(want), first + len(got))
                )
            yield StreamBlock(offset, data, bad)
            offset += len(data)
