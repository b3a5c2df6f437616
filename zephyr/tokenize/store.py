"""The token store: tokenized documents on disk, memory-mappable, readable with numpy alone.

This module reads stores; :mod:`~zephyr.tokenize.store_write` writes them, :mod:`~zephyr.tokenize.store_check`
verifies and describes them, :mod:`~zephyr.tokenize.store_remote` reads bucket stores by byte ranges.

Layout (a local directory)::

    STORE/
      manifest.json                 what is in the store (below); written last
      shards/00000/tokens.bin       flat token ids, native little-endian, dtype from the manifest
      shards/00000/offsets.npy      int64 [documents]: END offset of each document in tokens.bin
      shards/00000/tokens.xxh3      uint64 [chunks]: digest of each 512-byte chunk of tokens.bin (see below)
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
hash), ``skipped`` (documents dropped, by reason), ``chunk_bytes`` (the chunk
size of every shard's ``tokens.xxh3``; absent in stores written before them).

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
completion rules above hold unchanged. Every shard also has ``tokens.xxh3``
(uint64 per 512-byte chunk of ``tokens.bin``: XXH3-64 seeded by the file's
digest; the manifest's ``chunk_bytes`` says the chunk size), so a reader can
check any byte range it fetched. :class:`TokenStore` reads a bucket store by
byte ranges (:mod:`~zephyr.tokenize.store_remote`), through a local chunk cache
bounded by ``$ZEPHYR_STORE_CACHE_MAX`` (:mod:`~zephyr.tokenize.chunk_cache`);
``TokenStore(url, copy=True)`` copies it whole into ``$ZEPHYR_STORE_CACHE``
instead and maps the copy (:mod:`~zephyr.tokenize.store_copy`), which is also
how a store written before chunk digests is read.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .store_copy import materialize_store
from .store_format import DOCUMENT_INDEX, is_remote, parse_manifest
from .store_remote import FetchStats, RangedStore, open_ranged, remote_manifest

__all__ = ["TokenStore", "load_store_tokenizer", "open_store"]


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
    """Read access to a token store (memory-mapped, or by byte ranges from a bucket; nothing loaded up front).

    The store is one concatenated token stream (shards in order). Documents
    are addressed by a global index; fixed-length training windows by
    :meth:`window` / :meth:`windows` (``seq_len + 1`` tokens so inputs and shifted targets come
    from one slice; consecutive windows overlap by one token, so every token
    but the first is a target exactly once per pass).

    ``path`` may be a URL (``gs://...``): the store is then read by byte ranges through the local chunk
    cache (``self.path`` is None; :attr:`fetch_stats` counts what came from the bucket), or, with
    ``copy=True`` (or for a store without chunk digests), copied once into the local store cache and
    mapped there (``self.path`` is that copy). ``self.url`` keeps the URL (None for a local store) and
    ``self.location`` names the store in messages either way.
    """

    def __init__(self, path: str | os.PathLike[str], *, copy: bool = False) -> None:
        self.url: str | None = None
        self.path: Path | None = None
        self._ranged: RangedStore | None = None
        if is_remote(path):
            self.url = os.fspath(path).rstrip("/")
            manifest_bytes = remote_manifest(self.url)
            self._ranged = None if copy else open_ranged(self.url, manifest_bytes)
            if self._ranged is None:
                self.path = materialize_store(self.url)
        else:
            self.path = Path(path)
        if self._ranged is not None:
            self.manifest: dict[str, Any] = self._ranged.manifest
        else:
            assert self.path is not None
            manifest_path = self.path / "manifest.json"
            if not manifest_path.is_file():
                hint = " (a tokenize run that has not finished yet?)" if (self.path / "shards").is_dir() else ""
                raise FileNotFoundError(f"{manifest_path} not found: {self.path} is not a complete token store{hint}.")
            self.manifest = parse_manifest(self.location, manifest_path.read_bytes())
        self.copy = copy
        self.dtype = np.dtype(self.manifest["dtype"])
        self.vocab_size = int(self.manifest["vocab_size"])
        self.tokenizer: dict[str, Any] = self.manifest["tokenizer"]
        root = self.path if self.path is not None else Path(".")  # a ranged store reads no local shard
        self._shards = [
            _Shard(root / s["path"], self.dtype, int(s["documents"]), int(s["tokens"])) for s in self.manifest["shards"]
        ]
        self._doc_starts = np.concatenate([[0], np.cumsum([s.documents for s in self._shards], dtype=np.int64)])
        self._tok_starts = np.concatenate([[0], np.cumsum([s.tokens for s in self._shards], dtype=np.int64)])

    @property
    def location(self) -> str:
        """The URL the store was opened from, else its local path (for messages)."""
        return self.url if self.url is not None else str(self.path)

    @property
    def fetch_stats(self) -> FetchStats | None:
        """Bytes, requests and chunks read from the bucket so far (None unless read by byte ranges)."""
        return self._ranged.stats if self._ranged is not None else None

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
        """The ``validation/`` sub-store written by ``--validation-fraction``, if any (read the same way)."""
        if self._ranged is not None:
            assert self.url is not None
            try:
                return TokenStore(f"{self.url}/validation", copy=self.copy)
            except FileNotFoundError:
                return None
        assert self.path is not None
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

    # -- reading: every read goes through _read (slices of shards) or _ends --------------------------

    def _read(self, pieces: Sequence[tuple[int, int, int]]) -> list[np.ndarray]:
        """Token slices (shard, start, stop) in shard offsets: views of the maps, or one batch of ranged reads."""
        if self._ranged is not None:
            return self._ranged.read(pieces)
        return [self._shards[k].token_array[a:b] for k, a, b in pieces]

    def _ends(self, k: int) -> np.ndarray:
        return self._ranged.ends(k) if self._ranged is not None else self._shards[k].ends

    def _pieces(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """The shard slices holding tokens ``[start, stop)`` of the stream."""
        pieces, pos = [], start
        while pos < stop:
            k = min(int(np.searchsorted(self._tok_starts, pos, side="right")) - 1, len(self._shards) - 1)
            base = int(self._tok_starts[k])
            end = min(stop, base + self._shards[k].tokens)
            if end > pos:
                pieces.append((k, pos - base, end - base))
            pos = max(end, base + self._shards[k].tokens)
        return pieces

    def _locate_doc(self, i: int) -> tuple[int, int]:
        n = self.num_documents
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range: store {self.location} has {n} documents.")
        i %= n
        k = int(np.searchsorted(self._doc_starts, i, side="right")) - 1
        return k, i - int(self._doc_starts[k])

    def document(self, i: int) -> np.ndarray:
        """Token ids of document ``i`` (read-only: a memory-mapped view, or the bytes fetched; copy to keep)."""
        k, j = self._locate_doc(i)
        ends = self._ends(k)
        start = int(ends[j - 1]) if j > 0 else 0
        return self._read([(k, start, int(ends[j]))])[0]

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
            if self._ranged is not None:
                indexed = DOCUMENT_INDEX in info.get("xxh3_64", {})
                source: Any = io.BytesIO(self._ranged.file_bytes(number, DOCUMENT_INDEX)) if indexed else None
            else:
                source = shard.path / DOCUMENT_INDEX if (shard.path / DOCUMENT_INDEX).is_file() else None
            if source is not None:
                table = pq.read_table(source)
                ids, sources = table.column("id"), table.column("source")
                starts = table.column("start").to_numpy() + offset
                ends = table.column("end").to_numpy() + offset
            else:
                ends = np.asarray(self._ends(number), dtype=np.int64) + offset
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
        parts = [np.diff(np.asarray(self._ends(k)), prepend=0) for k, s in enumerate(self._shards) if s.documents]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the concatenated stream (a view inside one local shard, else a copy)."""
        if not 0 <= start <= stop <= self.num_tokens:
            raise IndexError(f"token range [{start}, {stop}) outside [0, {self.num_tokens}] of store {self.location}.")
        pieces = self._read(self._pieces(start, stop))
        if not pieces:
            return np.zeros(0, dtype=self.dtype)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def iter_shard_tokens(self) -> Iterator[np.ndarray]:
        """Every shard's tokens in order, in blocks of at most 16M tokens (bounded memory on huge shards);
        a bucket store streams them past the chunk cache, each block checked against its chunk digests."""
        for k, shard in enumerate(self._shards):
            if not shard.tokens:
                continue
            if self._ranged is not None:
                yield from self._ranged.check_stream(k)
                continue
            array = shard.token_array
            for start in range(0, len(array), 1 << 24):
                yield array[start : start + (1 << 24)]

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

    def windows(self, indices: Sequence[int] | np.ndarray, seq_len: int) -> np.ndarray:
        """Windows ``indices`` stacked, ``[len(indices), seq_len + 1]`` in the store's dtype: one batch of
        ranged reads for a bucket store (its concurrent requests are what makes it fast)."""
        n = self.num_windows(seq_len)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise IndexError(f"window {bad} out of range: store {self.location} has {n} windows of seq_len {seq_len}.")
        spans = [self._pieces(int(i) * seq_len, int(i) * seq_len + seq_len + 1) for i in idx.tolist()]
        flat = self._read([p for span in spans for p in span])
        out = np.empty((len(idx), seq_len + 1), dtype=self.dtype)
        at = 0
        for row, span in enumerate(spans):
            parts = flat[at : at + len(span)]
            at += len(span)
            out[row] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return out


def open_store(path: str | os.PathLike[str], *, copy: bool = False) -> TokenStore:
    """Open the token store at ``path``, a local directory or a URL (see :class:`TokenStore`)."""
    return TokenStore(path, copy=copy)


def load_store_tokenizer(store: TokenStore) -> Any:
    """The tokenizer that wrote `store` (the manifest's ``tokenizer.source``), to decode its tokens.

    Here so that readers of stores (the trainer's bits per byte) need the store module only.
    """
    from .tokenizer import load_tokenizer

    return load_tokenizer(store.tokenizer.get("source"))
