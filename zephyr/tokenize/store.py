"""The token store: tokenized documents on disk, memory-mappable, readable with numpy alone.

Layout (a local directory)::

    STORE/
      manifest.json                 what is in the store (below); written last
      shards/00000/tokens.bin       flat token ids, native little-endian, dtype from the manifest
      shards/00000/offsets.npy      int64 [documents]: END offset of each document in tokens.bin
      shards/00000/documents.parquet  per document: id, source (input file), start, end (token offsets)
      shards/00000/shard.json       the shard's own record, written after its data files: a done marker
                                    (zephyr.versioning, kind "token-store-shard", fingerprint = config_hash,
                                    payload = the record)
      shards/00001/...
      validation/                   optional held-out split: a complete store of the same layout

Document ``j`` of a shard is ``tokens[offsets[j-1] : offsets[j]]`` (with
``offsets[-1]`` read as 0 for ``j == 0``). Documents follow input order; the
store's documents are the shards' documents in shard order. Ids are ``uint16``
when the vocabulary has at most 65535 entries, else ``uint32``. BOS/EOS, if
configured, are already inside each document.

``manifest.json`` fields: ``format`` ("zephyr-token-store"), ``version`` (1),
``dtype``, ``vocab_size``, ``documents``, ``tokens``, ``tokenizer`` (name,
source, content_hash, vocab_size, bos/eos token and id, parse_special),
``shards`` (list of {path, documents, tokens, source, xxh3_64}, the last the
XXH3-64 digest of each data file's bytes), ``sources`` (input
globs), ``split`` ("train" or "validation"), ``config`` and ``config_hash``
(the tokenization settings; a resumed run only reuses shards with the same
hash), ``skipped`` (documents dropped, by reason).

Reading without Zephyr::

    import json, numpy as np
    m = json.load(open(f"{store}/manifest.json"))
    shard = m["shards"][0]
    tokens = np.memmap(f"{store}/{shard['path']}/tokens.bin", dtype=m["dtype"], mode="r")
    ends = np.load(f"{store}/{shard['path']}/offsets.npy")
    doc0 = tokens[0:ends[0]]

Every file is written to a temporary name and renamed into place; a shard
counts as complete only once its ``shard.json`` exists, and the store only
once ``manifest.json`` exists.

Stores on buckets (``gs://``, ``s3://``, any fsspec URL): writers stage each
shard in a local temporary directory and upload it on :meth:`ShardWriter.close`
(data files first, ``shard.json`` last, each an atomic object write), so the
completion rules above hold unchanged. Readers cannot memory-map a bucket, so
:class:`TokenStore` copies a remote store once into a local cache
(``$ZEPHYR_STORE_CACHE``, default ``~/.cache/zephyr/stores``), one directory per
URL and manifest content hash (the manifest holds every data file's digest, so
a store rewritten with other contents is fetched again), filled under
:func:`zephyr.fs.copy_once.run_once` so that the processes of one host copy
it once, and maps it there.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from zephyr.versioning import read_marker, write_marker

__all__ = [
    "DOCUMENT_INDEX",
    "STORE_FORMAT",
    "load_store_tokenizer",
    "ShardWriter",
    "ShardRecord",
    "TokenStore",
    "open_store",
    "token_dtype",
    "write_manifest",
    "verify_store",
    "VerifyReport",
    "inspect_store",
    "STORE_CACHE_ENV",
    "store_cache_root",
    "is_remote",
    "materialize_store",
]

STORE_FORMAT = "zephyr-token-store"
STORE_VERSION = 1
STORE_CACHE_ENV = "ZEPHYR_STORE_CACHE"
_COPY_CHUNK = 8 << 20
_PESSIMISTIC_COPY_RATE = 20e6  # bytes/s, stretches the copy lock's lifetime for big stores
_log = logging.getLogger("zephyr.tokenize")


DOCUMENT_INDEX = "documents.parquet"  # per shard: id, source, start, end of every document


def is_remote(location: str | os.PathLike[str]) -> bool:
    """True for a URL (``gs://``, ``s3://``, ``memory://`` ...): stored through fsspec, not a local directory."""
    return "://" in os.fspath(location)


def store_cache_root() -> Path:
    """Where remote stores are materialised: ``$ZEPHYR_STORE_CACHE``, default ``$ZEPHYR_CACHE_DIR/stores``."""
    from zephyr.cache import cache_root

    return Path(os.environ.get(STORE_CACHE_ENV) or cache_root() / "stores").expanduser()


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits with room to spare (vocab <= 65535), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


def _atomic_bytes(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
    with open(tmp, "wb") as handle:
        handle.write(payload)
    os.replace(tmp, path)


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def _atomic_json(path: Path, obj: Any) -> None:
    _atomic_bytes(path, _json_bytes(obj))


def _put_bytes(url: str, payload: bytes) -> None:
    from zephyr.fs import atomic_write

    with atomic_write(url, "wb", compression=None) as handle:
        handle.write(payload)


def _upload_file(local: Path, url: str) -> None:
    from zephyr.fs import atomic_write

    with open(local, "rb") as src, atomic_write(url, "wb", compression=None) as dst:
        shutil.copyfileobj(src, dst, _COPY_CHUNK)


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
        try:
            offsets_tmp.write_bytes(offsets.getvalue())
            os.replace(self._tmp, self.dir / "tokens.bin")
            os.replace(offsets_tmp, self.dir / "offsets.npy")
        except BaseException as exc:  # e.g. a full disk: leave no temporary file behind
            offsets_tmp.unlink(missing_ok=True)
            self._tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise _with_path(exc, offsets_tmp) from exc
            raise
        digests = {"tokens.bin": self._digest.hexdigest(), "offsets.npy": xxhash.xxh3_64_hexdigest(offsets.getvalue())}
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
            write_marker(str(self.dir / "shard.json"), SHARD_MARKER_KIND, self.config_hash, info)
            return record
        try:
            self._upload(info)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        return record

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
        _atomic_bytes(self.dir / DOCUMENT_INDEX, payload)
        return xxhash.xxh3_64_hexdigest(payload)

    def _upload(self, info: dict[str, Any]) -> None:
        from zephyr.fs import join, url_to_fs

        assert self.url is not None
        fs, path = url_to_fs(join(self.url, "shard.json"))
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)
        for name in ("tokens.bin", "offsets.npy", DOCUMENT_INDEX):
            if name == DOCUMENT_INDEX and not (self.dir / name).exists():
                continue
            _upload_file(self.dir / name, join(self.url, name))
        write_marker(join(self.url, "shard.json"), SHARD_MARKER_KIND, self.config_hash, info)

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


# shard.json: the one done-marker type (zephyr.versioning), fingerprint = the config hash
SHARD_MARKER_KIND = "token-store-shard"


def completed_shard(store_root: str | os.PathLike[str], relpath: str, config_hash: str) -> ShardRecord | None:
    """The shard's record if it was completed with the same settings (so a rerun can skip it)."""
    from zephyr.fs import join, url_to_fs

    url = join(os.fspath(store_root), relpath)
    fs, path = url_to_fs(url)
    fs.invalidate_cache(path)
    try:
        marker = read_marker(join(url, "shard.json"), SHARD_MARKER_KIND, config_hash)
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
    manifest = {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "dtype": np.dtype(dtype).name,
        "vocab_size": int(tokenizer["vocab_size"]),
        "documents": sum(s.documents for s in shard_list),
        "tokens": sum(s.tokens for s in shard_list),
        "tokenizer": tokenizer,
        "shards": [s.to_json() for s in shard_list],
        "sources": list(sources),
        "split": split,
        "config": config,
        "config_hash": config_hash,
        "skipped": dict(sorted((skipped or {}).items())),
    }
    if is_remote(store_root):
        from zephyr.fs import join

        _put_bytes(join(os.fspath(store_root), "manifest.json"), _json_bytes(manifest))
        return manifest
    root = Path(store_root)
    root.mkdir(parents=True, exist_ok=True)
    _atomic_json(root / "manifest.json", manifest)
    return manifest


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


@dataclass
class _Shard:
    path: Path
    dtype: np.dtype
    documents: int
    tokens: int
    _tokens: np.ndarray | None = field(default=None, repr=False)
    _ends: np.ndarray | None = field(default=None, repr=False)

    @property
    def token_array(self) -> np.ndarray:
        if self._tokens is None:
            if self.tokens == 0:
                self._tokens = np.zeros(0, dtype=self.dtype)
            else:
                self._tokens = np.memmap(self.path / "tokens.bin", dtype=self.dtype, mode="r", shape=(self.tokens,))
        return self._tokens

    @property
    def ends(self) -> np.ndarray:
        if self._ends is None:
            self._ends = np.load(self.path / "offsets.npy", mmap_mode="r")
        return self._ends


class TokenStore:
    """Read access to a token store (memory-mapped; nothing is loaded up front).

    The store is one concatenated token stream (shards in order). Documents
    are addressed by a global index; fixed-length training windows by
    :meth:`window` (``seq_len + 1`` tokens so inputs and shifted targets come
    from one slice; consecutive windows overlap by one token, so every token
    but the first is a target exactly once per pass).

    ``path`` may be a URL (``gs://...``): the store is then copied once into
    the local cache (see the module docstring) and ``self.path`` is that copy;
    ``self.url`` keeps the URL (None for a local store) and ``self.location``
    names the store in messages either way.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.url: str | None = None
        if is_remote(path):
            self.url = os.fspath(path).rstrip("/")
            self.path = materialize_store(self.url)
        else:
            self.path = Path(path)
        manifest_path = self.path / "manifest.json"
        if not manifest_path.is_file():
            hint = " (a tokenize run that has not finished yet?)" if (self.path / "shards").is_dir() else ""
            raise FileNotFoundError(f"{manifest_path} not found: {self.path} is not a complete token store{hint}.")
        self.manifest: dict[str, Any] = _parse_manifest(self.location, manifest_path.read_bytes())
        self.dtype = np.dtype(self.manifest["dtype"])
        self.vocab_size = int(self.manifest["vocab_size"])
        self.tokenizer: dict[str, Any] = self.manifest["tokenizer"]
        self._shards = [
            _Shard(self.path / s["path"], self.dtype, int(s["documents"]), int(s["tokens"]))
            for s in self.manifest["shards"]
        ]
        self._doc_starts = np.concatenate([[0], np.cumsum([s.documents for s in self._shards], dtype=np.int64)])
        self._tok_starts = np.concatenate([[0], np.cumsum([s.tokens for s in self._shards], dtype=np.int64)])

    @property
    def location(self) -> str:
        """The URL the store was opened from, else its local path (for messages)."""
        return self.url if self.url is not None else str(self.path)

    @property
    def num_documents(self) -> int:
        return int(self._doc_starts[-1])

    @property
    def num_tokens(self) -> int:
        return int(self._tok_starts[-1])

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    @property
    def validation(self) -> TokenStore | None:
        """The ``validation/`` sub-store written by ``--validation-fraction``, if any."""
        sub = self.path / "validation"
        if not (sub / "manifest.json").is_file():
            return None
        store = TokenStore(sub)
        if self.url is not None:
            store.url = f"{self.url}/validation"
        return store

    def __len__(self) -> int:
        return self.num_documents

    def __repr__(self) -> str:
        return (
            f"TokenStore({self.location!r}, documents={self.num_documents}, tokens={self.num_tokens}, "
            f"dtype={self.dtype.name}, tokenizer={self.tokenizer.get('name')!r})"
        )

    def _locate_doc(self, i: int) -> tuple[_Shard, int]:
        n = self.num_documents
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range: store {self.location} has {n} documents.")
        i %= n
        k = int(np.searchsorted(self._doc_starts, i, side="right")) - 1
        return self._shards[k], i - int(self._doc_starts[k])

    def document(self, i: int) -> np.ndarray:
        """Token ids of document ``i`` (a read-only memory-mapped view; copy to keep)."""
        shard, j = self._locate_doc(i)
        start = int(shard.ends[j - 1]) if j > 0 else 0
        return shard.token_array[start : int(shard.ends[j])]

    def document_index(self) -> Any:
        """Every document as a pyarrow Table: document (global index), shard, id, source, start, end.

        ``start``/``end`` are token offsets within the store's concatenated stream. ``id`` is null where
        the shard was written without ids (stores from before the document index).
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = []
        for number, (shard, info) in enumerate(zip(self._shards, self.manifest["shards"], strict=True)):
            if not shard.documents:
                continue
            offset = int(self._tok_starts[number])
            path = shard.path / DOCUMENT_INDEX
            if path.is_file():
                table = pq.read_table(path)
                ids, sources = table.column("id"), table.column("source")
                starts = table.column("start").to_numpy() + offset
                ends = table.column("end").to_numpy() + offset
            else:
                ends = np.asarray(shard.ends, dtype=np.int64) + offset
                starts = np.concatenate([[offset], ends[:-1]])
                ids = pa.nulls(shard.documents, pa.string())
                sources = pa.array([str(info.get("source", ""))] * shard.documents, pa.string())
            first = int(self._doc_starts[number])
            tables.append(
                pa.table(
                    {
                        "document": pa.array(np.arange(first, first + shard.documents, dtype=np.int64)),
                        "shard": pa.array([info["path"]] * shard.documents, pa.string()),
                        "id": ids,
                        "source": sources,
                        "start": pa.array(starts, pa.int64()),
                        "end": pa.array(ends, pa.int64()),
                    }
                )
            )
        if not tables:
            return pa.table(
                {
                    "document": pa.array([], pa.int64()),
                    "shard": pa.array([], pa.string()),
                    "id": pa.array([], pa.string()),
                    "source": pa.array([], pa.string()),
                    "start": pa.array([], pa.int64()),
                    "end": pa.array([], pa.int64()),
                }
            )
        return pa.concat_tables(tables)

    def document_lengths(self) -> np.ndarray:
        """Tokens per document, for the whole store (int64)."""
        parts = [np.diff(np.asarray(s.ends), prepend=0) for s in self._shards if s.documents]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the concatenated stream (a view inside one shard, else a copy)."""
        if not 0 <= start <= stop <= self.num_tokens:
            raise IndexError(f"token range [{start}, {stop}) outside [0, {self.num_tokens}] of store {self.location}.")
        if start == stop:
            return np.zeros(0, dtype=self.dtype)
        k = int(np.searchsorted(self._tok_starts, start, side="right")) - 1
        k = min(k, len(self._shards) - 1)
        local = start - int(self._tok_starts[k])
        if stop - int(self._tok_starts[k]) <= self._shards[k].tokens:
            return self._shards[k].token_array[local : stop - int(self._tok_starts[k])]
        pieces, pos = [], start
        while pos < stop:
            k = int(np.searchsorted(self._tok_starts, pos, side="right")) - 1
            base = int(self._tok_starts[k])
            end = min(stop, base + self._shards[k].tokens)
            pieces.append(self._shards[k].token_array[pos - base : end - base])
            pos = end
        return np.concatenate(pieces)

    def num_windows(self, seq_len: int) -> int:
        """How many ``seq_len + 1``-token windows (stride ``seq_len``) the stream holds."""
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}.")
        return max(0, (self.num_tokens - 1) // seq_len)

    def window(self, i: int, seq_len: int) -> np.ndarray:
        """Tokens ``[i * seq_len, i * seq_len + seq_len + 1)``: inputs ``w[:-1]``, targets ``w[1:]``."""
        n = self.num_windows(seq_len)
        if not 0 <= i < n:
            raise IndexError(f"window {i} out of range: store {self.location} has {n} windows of seq_len {seq_len}.")
        return self.tokens(i * seq_len, i * seq_len + seq_len + 1)


def open_store(path: str | os.PathLike[str]) -> TokenStore:
    """Open the token store at ``path``, a local directory or a URL (see :class:`TokenStore`)."""
    return TokenStore(path)


# ---------------------------------------------------------------------------------------------
# Remote stores: materialised once per host into the local cache
# ---------------------------------------------------------------------------------------------


def materialize_store(url: str) -> Path:
    """The local copy of the remote store at ``url``, fetching it first unless the cache has it.

    The copy lives in ``store_cache_root() / <name>-<url hash>-<manifest hash>``: a store rewritten
    at the same URL (a different ``manifest.json``, which lists every data file's digest) gets a new
    directory and is fetched again (older copies stay: a process may still map them). The
    processes of one host fetch it once (:func:`zephyr.fs.copy_once.run_once`, lock under the
    cache root); the others wait and map the same copy.
    """
    import fsspec

    from zephyr.fs.copy_once import LOCK_DIRNAME, run_once

    url = url.rstrip("/")
    manifest_bytes = _remote_manifest(url)
    manifest = _parse_manifest(url, manifest_bytes)
    root = store_cache_root()
    name = (
        re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[-1])[-60:].strip("_")
        + "-"
        + xxhash.xxh3_64_hexdigest(url.encode())[:12]
        + "-"
        + xxhash.xxh3_64_hexdigest(manifest_bytes)
    )
    dest = root / name
    done = (dest / "manifest.json").is_file
    if done():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    size = sum(int(s["tokens"]) * np.dtype(manifest["dtype"]).itemsize for s in manifest["shards"])
    ttl = 300.0 + size / _PESSIMISTIC_COPY_RATE
    run_once(
        key=str(dest),
        lock_fs=fsspec.filesystem("file"),
        lock_path=str(root / LOCK_DIRNAME / f"{name}.lock"),
        done=done,
        action=lambda: _fetch_store(url, manifest_bytes, dest),
        ttl_s=ttl,
        wait_timeout_s=2 * ttl + 30,
    )
    return dest


def _remote_manifest(url: str) -> bytes:
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


def _parse_manifest(url: str, payload: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(payload)
    except ValueError as exc:
        raise ValueError(
            f"{url}/manifest.json is not valid JSON ({exc}); rewrite the store with tokenize_dataset."
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ValueError(f"{url}/manifest.json: expected format {STORE_FORMAT!r}, found {found!r}.")
    return manifest


def _fetch_store(url: str, manifest_bytes: bytes, dest: Path) -> None:
    """Copy the store (and its ``validation/`` split, if any) into a temporary sibling of ``dest``, then
    rename it into place: ``dest/manifest.json`` exists only once everything was copied and checked."""
    from zephyr.fs import join, url_to_fs

    tmp = dest.with_name(f".tmp-{uuid.uuid4().hex}-{dest.name}")
    _log.info("zephyr: copying token store %s into the local cache %s", url, dest)
    try:
        _fetch_tree(url, manifest_bytes, tmp)
        fs, vpath = url_to_fs(join(url, "validation", "manifest.json"))
        try:
            val_bytes = fs.cat_file(vpath)
        except FileNotFoundError:
            val_bytes = None
        if val_bytes is not None:
            _fetch_tree(join(url, "validation"), val_bytes, tmp / "validation")
            _atomic_bytes(tmp / "validation" / "manifest.json", val_bytes)
        if _remote_manifest(url) != manifest_bytes:
            raise RuntimeError(f"token store {url} was rewritten while it was being copied to {dest}; open it again.")
        _atomic_bytes(tmp / "manifest.json", manifest_bytes)
        if dest.exists():  # an incomplete leftover (no manifest.json): replace it
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fetch_tree(url: str, manifest_bytes: bytes, dest: Path) -> None:
    """Download every shard the manifest lists into ``dest`` and check each against it (sizes, entries)."""
    from zephyr.fs import join, url_to_fs

    manifest = _parse_manifest(url, manifest_bytes)
    dtype = np.dtype(manifest["dtype"])
    dest.mkdir(parents=True, exist_ok=True)
    for shard in manifest["shards"]:
        local = dest / shard["path"]
        local.mkdir(parents=True, exist_ok=True)
        names = ("tokens.bin", "offsets.npy") + (
            (DOCUMENT_INDEX,) if DOCUMENT_INDEX in shard.get("xxh3_64", {}) else ()
        )
        for name in names:
            remote = join(url, shard["path"], name)
            fs, path = url_to_fs(remote)
            try:
                with fs.open(path, "rb") as src, open(local / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, _COPY_CHUNK)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{remote} not found although {url}/manifest.json lists shard {shard['path']}: "
                    "the store is damaged or being rewritten; rerun tokenize_dataset on it."
                ) from None
        got, want = (local / "tokens.bin").stat().st_size, int(shard["tokens"]) * dtype.itemsize
        if got != want:
            raise ValueError(
                f"{join(url, shard['path'], 'tokens.bin')} has {got} bytes, the manifest says {want} "
                f"({shard['tokens']} tokens x {dtype.itemsize}): the store is damaged or being rewritten; "
                "rerun tokenize_dataset on it."
            )
        try:
            ends = np.load(local / "offsets.npy", mmap_mode="r")
            entries = len(ends)
        except ValueError:
            entries = -1
        if entries != int(shard["documents"]):
            raise ValueError(
                f"{join(url, shard['path'], 'offsets.npy')} has {entries} entries, the manifest says "
                f"{shard['documents']} documents: the store is damaged or being rewritten; rerun "
                "tokenize_dataset on it."
            )
        for name, want in shard.get("xxh3_64", {}).items():
            if (got := _file_digest(local / name)) != want:
                raise ValueError(
                    f"{join(url, shard['path'], name)} has XXH3-64 digest {got}, the manifest says {want}: "
                    "the store is damaged or being rewritten; rerun tokenize_dataset on it."
                )


def _file_digest(path: Path) -> str:
    """XXH3-64 hex digest of a file's bytes, as the manifest records it for each data file."""
    digest = xxhash.xxh3_64()
    with open(path, "rb") as handle:
        while chunk := handle.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# verify / inspect
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyReport:
    """Result of :func:`verify_store`; ``ok`` is true when ``problems`` is empty."""

    path: str
    documents: int
    tokens: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(path: str | os.PathLike[str], *, check_ids: bool = True) -> VerifyReport:
    """Check a store against its manifest: files, sizes, offsets, counts, ids < vocab_size.

    Looks at everything and reports every problem (each naming the shard)
    instead of stopping at the first. A ``validation/`` sub-store is checked too.
    A remote store is checked in its local cache copy (fetched first).
    """
    problems: list[str] = []
    try:
        store = TokenStore(path)
    except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError) as exc:
        return VerifyReport(os.fspath(path), 0, 0, (f"cannot open store: {exc}",))
    root = store.path
    m = store.manifest
    for key in ("dtype", "vocab_size", "documents", "tokens", "tokenizer", "shards", "config_hash"):
        if key not in m:
            problems.append(f"manifest.json lacks field {key!r}")
    if store.dtype != token_dtype(store.vocab_size):
        problems.append(
            f"dtype {store.dtype.name} does not match vocab_size {store.vocab_size} "
            f"(expected {token_dtype(store.vocab_size).name})"
        )
    doc_total = tok_total = 0
    from zephyr.progress import TaskProgress

    progress = TaskProgress(f"verify {store.location}", len(m["shards"]), "shards", log_every_s=10.0, min_log_s=5.0)
    for s in m["shards"]:
        progress.advance()
        where = f"shard {s['path']}"
        d = root / s["path"]
        tb, ob = d / "tokens.bin", d / "offsets.npy"
        if not tb.is_file() or not ob.is_file():
            problems.append(f"{where}: missing {'tokens.bin' if not tb.is_file() else 'offsets.npy'}")
            continue
        expected = int(s["tokens"]) * store.dtype.itemsize
        if tb.stat().st_size != expected:
            problems.append(
                f"{where}: tokens.bin has {tb.stat().st_size} bytes, expected {expected} "
                f"({s['tokens']} tokens x {store.dtype.itemsize})"
            )
        try:
            ends = np.load(ob, mmap_mode="r")
        except ValueError as exc:
            problems.append(f"{where}: offsets.npy unreadable: {exc}")
            continue
        if ends.dtype != np.int64 or ends.ndim != 1:
            problems.append(f"{where}: offsets.npy is {ends.dtype}{list(ends.shape)}, expected int64 1-D")
        if len(ends) != int(s["documents"]):
            problems.append(f"{where}: offsets.npy has {len(ends)} entries, manifest says {s['documents']} documents")
        if len(ends):
            steps = np.diff(np.asarray(ends), prepend=0)
            if (steps < 0).any():
                bad = int(np.argmax(steps < 0))
                problems.append(
                    f"{where}: offsets decrease at document {bad} ({int(ends[bad - 1])} -> {int(ends[bad])})"
                )
            if int(ends[-1]) != int(s["tokens"]):
                problems.append(f"{where}: last offset {int(ends[-1])} != manifest tokens {s['tokens']}")
        elif int(s["tokens"]):
            problems.append(f"{where}: no documents but {s['tokens']} tokens")
        for name, want in s.get("xxh3_64", {}).items():
            if (got := _file_digest(d / name)) != want:
                problems.append(
                    f"{where}: {name} has XXH3-64 digest {got}, the manifest says {want} (changed after it was written)"
                )
        if check_ids and tb.is_file() and tb.stat().st_size == expected and expected:
            arr = np.memmap(tb, dtype=store.dtype, mode="r")
            top = max(int(arr[i : i + (1 << 24)].max()) for i in range(0, len(arr), 1 << 24))
            if top >= store.vocab_size:
                problems.append(f"{where}: token id {top} >= vocab_size {store.vocab_size}")
        doc_total += int(s["documents"])
        tok_total += int(s["tokens"])
    progress.finish()
    if doc_total != m.get("documents"):
        problems.append(f"manifest documents {m.get('documents')} != sum over shards {doc_total}")
    if tok_total != m.get("tokens"):
        problems.append(f"manifest tokens {m.get('tokens')} != sum over shards {tok_total}")
    problems.extend(_stray_files(root, [s["path"] for s in m["shards"]]))
    if (root / "validation").is_dir():
        sub = verify_store(root / "validation", check_ids=check_ids)
        problems.extend(f"validation/: {p}" for p in sub.problems)
    return VerifyReport(store.location, doc_total, tok_total, tuple(problems))


def _stray_files(root: Path, shard_paths: Sequence[str]) -> list[str]:
    """Files in the store that its manifest does not account for: a killed writer's ``.tmp-*`` file, a shard
    directory of another run. A reader that globs the store (or copies it) would pick them up.
    ``validation/`` is checked as a store of its own; ``.next/`` is an unfinished replacement's staging."""
    expected = {"manifest.json"} | {
        f"{p}/{name}" for p in shard_paths for name in ("tokens.bin", "offsets.npy", "shard.json", DOCUMENT_INDEX)
    }
    stray = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir() or rel.startswith(("validation/", ".next/")) or rel in expected:
            continue
        stray.append(
            f"stray file {rel}: not in the manifest (a temporary file of a killed run, or a shard of another "
            "run); remove it, or rerun tokenize on the store, which removes it"
        )
    return stray


def _histogram_lines(lengths: np.ndarray, width: int = 40) -> list[str]:
    if not len(lengths):
        return ["  (no documents)"]
    top = int(lengths.max())
    edges = [0] + [1 << k for k in range(0, max(1, top.bit_length()) + 1)]
    counts = np.histogram(lengths, bins=np.asarray(edges + [edges[-1] * 2]))[0]
    lines, peak = [], max(1, int(counts.max()))
    for lo, hi, c in zip(edges, edges[1:] + [edges[-1] * 2], counts, strict=False):
        if c:
            lines.append(f"  [{lo:>9,}, {hi:>9,}) {int(c):>9,} {'#' * max(1, round(width * int(c) / peak))}")
    return lines


def inspect_store(path: str | os.PathLike[str], *, samples: int = 3, max_chars: int = 400, decode: bool = True) -> str:
    """A readable report: counts, tokenizer, document-length histogram, decoded samples.

    Samples are decoded with the tokenizer named in the manifest when it can be
    loaded and its content hash matches; otherwise their first ids are shown.
    """
    store = TokenStore(path)
    lengths = store.document_lengths()
    tok = store.tokenizer
    lines = [
        f"store      {store.location}" + (f" (cached at {store.path})" if store.url else ""),
        f"split      {store.manifest.get('split')}   shards {store.num_shards}   dtype {store.dtype.name}",
        f"documents  {store.num_documents:,}",
        f"tokens     {store.num_tokens:,}",
        f"tokenizer  {tok.get('name')} (vocab {tok.get('vocab_size'):,}, hash {tok.get('content_hash')}, "
        f"bos {tok.get('bos_token')!r}, eos {tok.get('eos_token')!r})",
    ]
    if len(lengths):
        q = np.percentile(lengths, [50, 90, 99])
        lines.append(
            f"doc length mean {lengths.mean():,.1f}  p50 {q[0]:,.0f}  p90 {q[1]:,.0f}  p99 {q[2]:,.0f}  "
            f"max {int(lengths.max()):,}"
        )
    if store.manifest.get("skipped"):
        lines.append("skipped    " + ", ".join(f"{k}={v}" for k, v in store.manifest["skipped"].items()))
    lines.append("document length histogram (tokens):")
    lines.extend(_histogram_lines(lengths))
    if store.validation is not None:
        v = store.validation
        lines.append(f"validation {v.num_documents:,} documents, {v.num_tokens:,} tokens")
    decoder = None
    if decode and samples:
        decoder = _decoder_for(tok)
    if samples and store.num_documents:
        picks = np.linspace(0, store.num_documents - 1, num=min(samples, store.num_documents)).astype(int)
        lines.append("samples:" + ("" if decoder else " (tokenizer unavailable or hash differs: showing ids)"))
        for i in sorted(set(picks.tolist())):
            ids = np.asarray(store.document(i))
            if decoder is not None:
                text = decoder(ids[: max_chars * 2])
                shown = repr(text[:max_chars]) + (" ..." if len(text) > max_chars or len(ids) > max_chars * 2 else "")
            else:
                shown = str(ids[:32].tolist()) + (" ..." if len(ids) > 32 else "")
            lines.append(f"  doc {i} ({len(ids):,} tokens): {shown}")
    return "\n".join(lines)


def _decoder_for(tok: dict[str, Any]) -> Any:
    try:
        from .tokenizer import TokenizerSpec, load_tokenizer

        loaded = load_tokenizer(TokenizerSpec(source=tok.get("source") or tok["name"], engine="tokenizers"))
    except Exception:  # noqa: BLE001 - inspection must work without the tokenizer
        return None
    if loaded.info.content_hash != tok.get("content_hash"):
        return None
    return loaded.decode


def load_store_tokenizer(store: TokenStore) -> Any:
    """The tokenizer that wrote `store` (the manifest's ``tokenizer.source``), to decode its tokens.

    Here so that readers of stores (the trainer's bits per byte) need the store module only.
    """
    from .tokenizer import load_tokenizer

    return load_tokenizer(store.tokenizer.get("source"))
