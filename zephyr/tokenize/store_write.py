"""Writing token stores: one shard at a time (:class:`ShardWriter`), then the manifest.

The layout and its completion rules are in :mod:`zephyr.tokenize.store_format`: data files are
renamed into place first, ``shard.json`` (a done marker) last, ``manifest.json`` once every shard
is complete. A bucket store is staged per shard in a local temporary directory and uploaded.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from zephyr.staged import StagedWork

from .store_format import (
    CHUNK_BYTES,
    CHUNK_DIGESTS,
    COPY_CHUNK,
    DOCUMENT_INDEX,
    SHARD_MARKER_KIND,
    STORE_FORMAT,
    STORE_VERSION,
    atomic_bytes,
    atomic_json,
    chunk_digests,
    chunk_seed,
    is_remote,
    json_bytes,
)

__all__ = ["ShardRecord", "ShardWriter", "completed_shard", "remove_temp_files", "write_manifest"]


def _put_bytes(url: str, payload: bytes) -> None:
    from zephyr.fs import atomic_write

    with atomic_write(url, "wb", compression=None) as handle:
        handle.write(payload)


def _upload_file(local: Path, url: str) -> None:
    from zephyr.fs import atomic_write

    with open(local, "rb") as src, atomic_write(url, "wb", compression=None) as dst:
        shutil.copyfileobj(src, dst, COPY_CHUNK)


@dataclass(frozen=True)
class ShardRecord:
    """One completed shard, as listed in the manifest (``path`` relative to the store)."""

    path: str
    documents: int
    tokens: int
    source: str
    skipped: dict[str, int] = field(default_factory=dict, compare=False)  # input records left out, by reason
    xxh3_64: dict[str, str] = field(
        default_factory=dict
    )  # data file name -> digest of its bytes (none in older stores)

    def to_json(self) -> dict[str, Any]:
        digests = {"xxh3_64": dict(self.xxh3_64)} if self.xxh3_64 else {}
        return {"path": self.path, "documents": self.documents, "tokens": self.tokens, "source": self.source, **digests}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ShardRecord:
        """From a manifest entry or a ``shard.json`` (which also keeps ``skipped``)."""
        return ShardRecord(
            d["path"],
            int(d["documents"]),
            int(d["tokens"]),
            str(d["source"]),
            dict(d.get("skipped", {})),
            dict(d.get("xxh3_64", {})),
        )


class ShardWriter:
    """Streams documents into one shard directory; :meth:`close` makes it complete.

    Tokens go straight to a temporary file, so memory stays at one batch plus
    8 bytes per document. Use as a context manager: an exception discards the
    temporary files and leaves no partial shard behind.

    For a remote store (``store_root`` a URL) the shard is built in a local
    temporary directory (``self.dir``) and uploaded by :meth:`close`;
    ``self.location`` names the destination in messages either way.
    """

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        relpath: str,
        *,
        dtype: np.dtype,
        vocab_size: int,
        source: str,
        config_hash: str,
    ) -> None:
        self.relpath = relpath
        self.url: str | None = None
        if is_remote(store_root):
            from zephyr.fs import join

            self.root: Path | str = os.fspath(store_root).rstrip("/")
            self.url = join(self.root, relpath)
            self.dir = Path(tempfile.mkdtemp(prefix="zephyr-shard-"))
            self.location = self.url
        else:
            self.root = Path(store_root)
            self.dir = self.root / relpath
            self.dir.mkdir(parents=True, exist_ok=True)
            self.location = str(self.dir)
            for dead in self.dir.glob(".tmp-*"):  # of an attempt that was killed while writing this shard
                dead.unlink(missing_ok=True)
        self.dtype = np.dtype(dtype)
        self.vocab_size = vocab_size
        self.source = source
        self.config_hash = config_hash
        self._tmp = self.dir / f".tmp-{uuid.uuid4().hex}-tokens.bin"
        self._handle = open(self._tmp, "wb")  # noqa: SIM115 - written by add() calls, closed by close()/abort
        self._digest = xxhash.xxh3_64()  # of tokens.bin, as it is written
        self._ends: list[np.ndarray] = []
        self._tokens = 0
        self._documents = 0
        self._doc_ids: list[str | None] | None = None  # document ids for documents.parquet, when given

    def add(self, documents: Sequence[np.ndarray], ids: Sequence[str | None] | None = None) -> None:
        """Append documents (arrays of ids) in order; ``ids`` (one per document) go to the document index."""
        if not documents:
            return
        lengths = np.fromiter((len(d) for d in documents), dtype=np.int64, count=len(documents))
        flat = np.concatenate(documents) if len(documents) > 1 else np.asarray(documents[0])
        self.add_flat(flat, lengths, ids)

    def add_flat(self, flat: np.ndarray, lengths: np.ndarray, ids: Sequence[str | None] | None = None) -> None:
        """Append documents given back to back in ``flat`` with their ``lengths`` (the fast path).

        ``ids``: each document's id, kept in the shard's document index (``documents.parquet``: id, source,
        start, end), as dolma keeps one per document, so a token range can be traced to its document.
        """
        if not len(lengths):
            return
        if ids is not None:
            if len(ids) != len(lengths):
                raise ValueError(f"add_flat: {len(ids)} ids for {len(lengths)} documents (shard {self.location}).")
            if self._doc_ids is None:
                self._doc_ids = [None] * self._documents
            self._doc_ids.extend(None if i is None else str(i) for i in ids)
        elif self._doc_ids is not None:
            self._doc_ids.extend([None] * len(lengths))
        if int(lengths.sum()) != len(flat):
            raise ValueError(
                f"add_flat: lengths sum to {int(lengths.sum())} but {len(flat)} ids were given (shard {self.location})."
            )
        if flat.size and int(flat.max()) >= self.vocab_size:
            raise ValueError(
                f"token id {int(flat.max())} >= vocab_size {self.vocab_size} while writing shard {self.location}; "
                "the tokenizer and the store's vocab_size disagree."
            )
        ids = np.ascontiguousarray(flat, dtype=self.dtype)
        try:
            ids.tofile(self._handle)
        except OSError as exc:
            raise _with_path(exc, self._tmp) from exc
        self._digest.update(ids)
        self._ends.append(self._tokens + np.cumsum(lengths))
        self._tokens += int(lengths.sum())
        self._documents += len(lengths)

    def close(self, *, skipped: dict[str, int] | None = None) -> ShardRecord:
        """Rename the data files into place, then write ``shard.json`` (the completion mark).

        ``skipped`` (records left out, by reason) is kept in ``shard.json`` so a resumed run that
        reuses this shard still counts them in the manifest.

        Remote: upload ``tokens.bin`` and ``offsets.npy``, then ``shard.json``, after deleting any
        older ``shard.json`` there, so a shard half-replaced by a crash never reads as complete.
        """
        try:
            self._handle.close()  # flushes: a full disk shows here too
        except OSError as exc:
            self._tmp.unlink(missing_ok=True)
            raise _with_path(exc, self._tmp) from exc
        ends = np.concatenate(self._ends) if self._ends else np.zeros(0, dtype=np.int64)
        offsets = io.BytesIO()
        np.save(offsets, ends.astype(np.int64, copy=False))
        offsets_tmp = self.dir / f".tmp-{uuid.uuid4().hex}-offsets.npy"
        chunks_tmp = self.dir / f".tmp-{uuid.uuid4().hex}-{CHUNK_DIGESTS}"
        tokens_digest = self._digest.hexdigest()
        try:
            offsets_tmp.write_bytes(offsets.getvalue())
            chunks = self._chunk_digests(chunk_seed(tokens_digest))
            chunks_tmp.write_bytes(chunks)
            os.replace(self._tmp, self.dir / "tokens.bin")
            os.replace(offsets_tmp, self.dir / "offsets.npy")
            os.replace(chunks_tmp, self.dir / CHUNK_DIGESTS)
        except BaseException as exc:  # e.g. a full disk: leave no temporary file behind
            offsets_tmp.unlink(missing_ok=True)
            chunks_tmp.unlink(missing_ok=True)
            self._tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise _with_path(exc, offsets_tmp) from exc
            raise
        digests = {
            "tokens.bin": tokens_digest,
            "offsets.npy": xxhash.xxh3_64_hexdigest(offsets.getvalue()),
            CHUNK_DIGESTS: xxhash.xxh3_64_hexdigest(chunks),
        }
        if self._doc_ids is not None:
            digests[DOCUMENT_INDEX] = self._write_document_index(ends)
        record = ShardRecord(self.relpath, self._documents, self._tokens, self.source, dict(skipped or {}), digests)
        info = {
            **record.to_json(),
            "dtype": self.dtype.name,
            "config_hash": self.config_hash,
            "skipped": record.skipped,
        }
        if self.url is None:
            shard_work(str(self.dir), self.config_hash).certify(info)
            return record
        try:
            self._upload(info)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        return record

    def _chunk_digests(self, seed: int) -> bytes:
        """``tokens.xxh3``: the digest of every CHUNK_BYTES of the finished ``tokens.bin`` (read back from the
        temporary file, still in the page cache: about 0.3 s per GB)."""
        parts = []
        with open(self._tmp, "rb") as handle:
            while block := handle.read(COPY_CHUNK):  # COPY_CHUNK is a multiple of CHUNK_BYTES
                parts.append(chunk_digests(block, seed).astype("<u8").tobytes())
        return b"".join(parts)

    def _write_document_index(self, ends: np.ndarray) -> str:
        """``documents.parquet``: id, source, start, end (token offsets in this shard) per document."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        starts = np.concatenate([[0], ends[:-1]]) if len(ends) else np.zeros(0, dtype=np.int64)
        table = pa.table(
            {
                "id": pa.array(self._doc_ids, pa.string()),
                "source": pa.array([self.source] * len(ends), pa.string()),
                "start": pa.array(starts, pa.int64()),
                "end": pa.array(ends, pa.int64()),
            }
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        payload = buffer.getvalue()
        atomic_bytes(self.dir / DOCUMENT_INDEX, payload)
        return xxhash.xxh3_64_hexdigest(payload)

    def _upload(self, info: dict[str, Any]) -> None:
        from zephyr.fs import join, url_to_fs

        assert self.url is not None
        fs, path = url_to_fs(join(self.url, "shard.json"))
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)
        for name in ("tokens.bin", "offsets.npy", CHUNK_DIGESTS, DOCUMENT_INDEX):
            if name == DOCUMENT_INDEX and not (self.dir / name).exists():
                continue
            _upload_file(self.dir / name, join(self.url, name))
        shard_work(self.url, self.config_hash).certify(info)

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # the flush of a failed write (a full disk) fails again
            self._handle.close()
        if self.url is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()


def _with_path(exc: OSError, path: Path) -> OSError:
    """The OSError with its errno and the file named: numpy's `tofile` reports a full disk as
    "OSError: 29651 requested and 20480 written", with neither."""
    code = exc.errno
    if code is None and "requested and" in str(exc) and "written" in str(exc):
        code = errno.ENOSPC  # a short write: the device is full
    if code is None:
        return exc
    return OSError(code, f"{os.strerror(code)} ({exc})", str(path))


def remove_temp_files(store_root: str | os.PathLike[str]) -> int:
    """Remove the ``.tmp-*`` files killed writers left anywhere in a local store; returns how many.
    Call it only when no writer of the store runs (``tokenize_dataset`` does, once the manifest is written)."""
    if is_remote(store_root):
        return 0  # object stores commit whole objects: no temporary files
    removed = 0
    for dead in Path(store_root).rglob(".tmp-*"):
        if dead.is_file():
            dead.unlink(missing_ok=True)
            removed += 1
    return removed


def shard_work(shard_url: str, config_hash: str) -> StagedWork:
    """A store shard as staged work: done when its ``shard.json`` certifies these settings (``config_hash``)."""
    from zephyr.fs import join

    return StagedWork(join(shard_url, "shard.json"), SHARD_MARKER_KIND, config_hash)


def completed_shard(store_root: str | os.PathLike[str], relpath: str, config_hash: str) -> ShardRecord | None:
    """The shard's record if it was completed with the same settings (so a rerun can skip it)."""
    from zephyr.fs import join, url_to_fs

    url = join(os.fspath(store_root), relpath)
    fs, path = url_to_fs(url)
    fs.invalidate_cache(path)
    try:
        marker = shard_work(url, config_hash).done()
        size = fs.size(f"{path}/tokens.bin") if marker is not None else None
    except FileNotFoundError:
        return None
    if marker is None:
        return None
    info = marker.payload
    if size != info["tokens"] * np.dtype(info["dtype"]).itemsize:
        return None
    return ShardRecord.from_json({**info, "path": relpath})


def write_manifest(
    store_root: str | os.PathLike[str],
    *,
    shards: Iterable[ShardRecord],
    dtype: np.dtype,
    tokenizer: dict[str, Any],
    sources: Sequence[str],
    split: str,
    config: dict[str, Any],
    config_hash: str,
    skipped: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Write ``manifest.json`` (atomically) listing ``shards`` in the given order; returns it."""
    shard_list = list(shards)
    # Ranged readers need every shard's chunk digests; a store resumed from shards written before them
    # has none for those, and is read by a whole copy (store_remote.open_ranged says so).
    chunked = all(CHUNK_DIGESTS in s.xxh3_64 for s in shard_list)
    manifest = {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "dtype": np.dtype(dtype).name,
        "vocab_size": int(tokenizer["vocab_size"]),
        "documents": sum(s.documents for s in shard_list),
        "tokens": sum(s.tokens for s in shard_list),
        "tokenizer": tokenizer,
        "shards": [s.to_json() for s in shard_list],
        **({"chunk_bytes": CHUNK_BYTES} if chunked else {}),
        "sources": list(sources),
        "split": split,
        "config": config,
        "config_hash": config_hash,
        "skipped": dict(sorted((skipped or {}).items())),
    }
    if is_remote(store_root):
        from zephyr.fs import join

        _put_bytes(join(os.fspath(store_root), "manifest.json"), json_bytes(manifest))
        return manifest
    root = Path(store_root)
    root.mkdir(parents=True, exist_ok=True)
    atomic_json(root / "manifest.json", manifest)
    return manifest
