"""Exact deduplication on the engine's group_by: whole documents and repeated paragraphs.

Both keep the FIRST occurrence by a deterministic order (`order_key(doc)`, default the document id),
not by arrival order, so the result is identical whatever the number of shards or workers. Both run
on `Dataset.group_by`, whose shuffle spills to disk, so they scale past one machine's memory.

Document level (`dedup_documents`): the key is a 128-bit xxh3 hash of the normalized text (NFKC,
case-folded, punctuation removed, whitespace collapsed), so trivially re-formatted copies collide. No text
goes through a shuffle: a decision pass shuffles (hash, order key + position, id) per document, as Arrow
batches, and the documents are annotated by looking their position up in the table of duplicate
clusters' members. Cost (benchmarks/exact_dedup.py): the input is read twice, the text hashed once.
Each document gets `dup_cluster` (the hash) and `dup_keep`; the kept one also `dup_count` (cluster
size, for FineWeb-2-style re-hydration); the others get `filter_reason="exact_duplicate"` (unless an
earlier stage set one). `drop=True` emits only the kept documents. Memory per cluster is O(1).

Paragraph level (`dedup_paragraphs`, CCNet-style): text is split on `separator`; every normalized
paragraph seen earlier in the corpus order (doc order, then position) is removed from later documents.
Three shuffles: paragraphs by hash (find the repeats), repeats by document (collect per doc), and a
sorted-merge join back to the documents. Documents get `dup_paragraphs` (indices removed) and, when
everything was a repeat, `filter_reason="exact_duplicate_paragraphs"`. Document ids must be unique.
"""

from __future__ import annotations

import functools
import re
import struct
import unicodedata
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from zephyr import counters
from zephyr.engine.context import current_config
from zephyr.engine.dataset import Dataset
from zephyr.engine.io import read_batches
from zephyr.engine.sortkey import decode, encode
from zephyr.engine.task import ShardContext
from zephyr.fs import atomic_write, join, url_to_fs
from zephyr.versioning import describe, digest

__all__ = ["dedup_documents", "dedup_paragraphs", "normalize_for_hash", "text_hash"]


@functools.lru_cache(maxsize=1)
def _punctuation_re() -> re.Pattern:
    """A character class of every punctuation code point of the Basic Multilingual Plane, built once
    per process (~20 ms): `str.translate` over all of Unicode would need a million-entry table."""
    ranges: list[list[int]] = []
    for cp in range(0x10000):
        if unicodedata.category(chr(cp)).startswith("P"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    body = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return re.compile(f"[{body}]+")


def normalize_for_hash(text: str) -> str:
    """NFKC, case-fold, drop punctuation, collapse whitespace: copies differing only in those collide."""
    text = _punctuation_re().sub(" ", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(text.split())


@functools.lru_cache(maxsize=1)
def _ascii_table() -> bytes:
    """bytes.translate table giving, for ASCII text, what normalize_for_hash does before its whitespace
    collapse: upper case to lower (NFKC and casefold change nothing else in ASCII), punctuation (Unicode
    category P*, not symbols such as $+<=>^`|~) to a space, and the separators \x1c-\x1f that str.split
    treats as whitespace (bytes.split does not) to a space."""
    table = bytearray(range(256))
    for cp in range(128):
        char = chr(cp)
        if unicodedata.category(char).startswith("P") or char.isspace():
            table[cp] = 0x20
        else:
            table[cp] = ord(char.casefold())
    return bytes(table)


def _normalized_bytes(text: str) -> bytes:
    """normalize_for_hash(text) as UTF-8, without a regex over the text or a list of words (~5x quicker).
    One bytes.translate maps case, ASCII punctuation and every ASCII whitespace character (str.isspace,
    what str.split splits on) to their normalized bytes; non-ASCII text (NFKC first, when needed) has
    only its runs of non-ASCII characters case-folded and their separators mapped in Python; then numpy
    drops each space that follows a space."""
    if text.isascii():
        return _collapsed(text.encode("ascii").translate(_ascii_table()))
    return _normalized_unicode(text)


def _collapsed(data: bytes) -> bytes:
    """Runs of spaces to one space, no space at either end."""
    if not data:
        return b""
    array = np.frombuffer(data, np.uint8)
    space = array == 32
    keep = np.empty(len(array), bool)
    keep[0] = True
    np.logical_not(space[1:] & space[:-1], out=keep[1:])
    return array[keep].tobytes().strip(b" ")


@functools.lru_cache(maxsize=1)
def _separator_map() -> dict[int, str]:
    """str.translate map of every non-ASCII code point of the Basic Multilingual Plane that
    normalize_for_hash turns into a space (punctuation, as _punctuation_re, or whitespace, as str.split)."""
    separators = {}
    for cp in range(0x80, 0x10000):
        char = chr(cp)
        if char.isspace() or unicodedata.category(char).startswith("P"):
            separators[cp] = " "
    return separators


def _fold(unit: bytes) -> bytes:
    """NFKC, case fold and separators to spaces, for a run of non-ASCII characters (with the ASCII
    character before it)."""
    return unicodedata.normalize("NFKC", unit.decode("utf-8")).casefold().translate(_separator_map()).encode("utf-8")


_fold_cached = functools.lru_cache(maxsize=1 << 14)(_fold)  # the same few runs (quotes, dashes) recur
_CACHED_UNIT = 48  # bytes: longer runs (a whole paragraph of CJK text) are folded without the cache


def _normalized_unicode(text: str) -> bytes:
    """normalize_for_hash(text) as UTF-8 for non-ASCII text. Only the runs of non-ASCII characters go
    through NFKC, case folding and the separator map in Python; the ASCII table does the rest (it
    leaves bytes >= 0x80 alone). Why runs apart equal the whole text: UTF-8 bytes >= 0x80 never belong
    to an ASCII character, so a run is whole characters; NFKC may be applied piecewise between
    normalization boundaries, and every ASCII character has a boundary before it (ccc 0, NFKC_QC yes),
    so each run is normalized together with the one ASCII character before it (a base that a combining
    mark composes with); case folding maps each character on its own (no context, unlike lower())."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: the plain path (which raises the same way when encoding)
        return normalize_for_hash(text).encode("utf-8")
    high = np.flatnonzero(np.frombuffer(data, np.uint8) >= 0x80)
    gaps = np.flatnonzero(np.diff(high) != 1)
    starts = high[np.concatenate(([0], gaps + 1))].tolist()
    ends = (high[np.concatenate((gaps, [len(high) - 1]))] + 1).tolist()
    pieces = []
    position = 0
    for start, end in zip(starts, ends, strict=True):
        start = max(0, start - 1)
        pieces.append(data[position:start])
        pieces.append((_fold_cached if end - start <= _CACHED_UNIT else _fold)(data[start:end]))
        position = end
    pieces.append(data[position:])
    return _collapsed(b"".join(pieces).translate(_ascii_table()))


def text_hash(text: str) -> str:
    """128-bit xxh3 of the normalized text, hex (32 chars)."""
    return xxhash.xxh3_128_hexdigest(_normalized_bytes(text))


# --- document level -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FieldOrder:
    field: str

    def __call__(self, doc: dict) -> Any:
        value = doc.get(self.field)
        if value is None or isinstance(value, (bool, int, float, str, bytes, tuple)):
            return value
        raise TypeError(
            f"exact dedup orders documents by {self.field!r}, which must be a str/int/float/bytes/tuple; "
            f"got {type(value).__name__} in document {doc.get('id')!r}. Pass order_key=... returning one"
        )


@dataclass(frozen=True)
class _DocKey:
    text_field: str

    def __call__(self, doc: dict) -> str:
        return text_hash(doc.get(self.text_field) or "")


def _mark_kept(doc: dict, cluster: str, size: int) -> dict:
    kept = dict(doc)
    kept["dup_cluster"] = cluster
    kept["dup_count"] = size
    kept["dup_keep"] = True
    return kept


def _mark_duplicate(doc: dict, cluster: str, keeper: Any) -> dict:
    out = dict(doc)
    out["dup_cluster"] = cluster
    out["dup_keep"] = False
    out["dup_keeper"] = keeper  # lineage: the id of the copy kept for it (zephyr.operators.lineage)
    if not out.get("filter_reason"):
        out["filter_reason"] = "exact_duplicate"
    return out


@dataclass(frozen=True)
class _MarkDocs:
    """The whole-document shuffle (used when the duplicates table does not fit a worker's memory)."""

    drop: bool

    def __call__(self, key: str, docs: Iterable[dict]) -> Iterator[dict]:
        # Items arrive sorted by the order key, so the first one is the earliest by corpus order. Only
        # that first document is held back (to learn the cluster size); the duplicates stream through,
        # so a cluster of millions of identical boilerplate pages needs no memory.
        iterator = iter(docs)
        first = next(iterator, None)
        if first is None:
            return
        size = 1
        for doc in iterator:
            size += 1
            if self.drop:
                counters.increment("dedup/exact_documents_dropped")
                continue
            counters.increment("dedup/exact_documents_duplicate")
            yield _mark_duplicate(doc, key, first.get("id"))
        yield _mark_kept(first, key, size)


def _hashes_url(table_url: str, shard: int) -> str:
    return join(table_url, f"hashes-{shard:05d}.txt")


@dataclass(frozen=True)
class _HashRank:
    """map_shard of the decision pass: per document only its hash, its rank and its id; no text.

    `s` is the 16-byte hash, the order key's byte encoding (zephyr.engine.sortkey, self-delimiting) and
    the unique position (shard, index) as fixed-width big-endian integers: bytes order = (hash, order
    key, shard, index) order; the hash comes back from the first 16 bytes, the position from the last
    16. `b` is a bucket of hashes (the shuffle's key): a bucket's records reach the reducer sorted by `s`,
    so each hash's members are consecutive and in corpus order, and a few hundred buckets mean a few
    hundred reducer calls instead of one per document. `k` is the id (encoded, any plain type), for the
    lineage of each duplicate: which document was kept for it. Plain fields let the shuffle run on Arrow
    batches (no per-record pickling or key encoding). The shard's hashes are also kept in a small file,
    so the annotation pass need not hash again."""

    text_field: str
    order_key: Callable[[dict], Any]
    table_url: str
    buckets: int

    def __call__(self, docs: Iterable[dict], context: ShardContext) -> Iterator[dict]:
        shard = context.shard
        field_name, order, buckets = self.text_field, self.order_key, self.buckets
        position = _POSITION.pack
        hashes = []
        for index, doc in enumerate(docs):
            digest = text_hash(doc.get(field_name) or "")
            hashes.append(digest)
            raw = bytes.fromhex(digest)
            yield {
                "b": int.from_bytes(raw[:4], "big") % buckets,
                "s": raw + encode(order(doc)) + position(shard, index),
                "k": encode(_plain_id(doc.get("id"))),
            }
        with atomic_write(_hashes_url(self.table_url, shard), "wb", compression=None) as handle:
            handle.write("\n".join(hashes).encode("ascii"))


_POSITION = struct.Struct(">QQ")


def _batches(batch: Any) -> Any:
    """map_batches identity: the decision records become Arrow batches for the columnar shuffle."""
    return batch


def _cached_hashes(table_url: str, shard: int) -> list[str]:
    """The decision pass's hashes of this shard's documents, read once and removed (a rerun or retry of
    the annotation, or a shard past the cached ones, hashes its documents again)."""
    url = _hashes_url(table_url, shard)
    fs, path = url_to_fs(url)
    try:
        with fs.open(path, "rb") as handle:
            data = handle.read().decode("ascii")
    except FileNotFoundError:
        return []
    fs.rm(path)
    return data.split("\n") if data else []


def _plain_id(value: Any) -> Any:
    """An id the shuffle can carry in a sort key (str/int/bytes); anything else is not recorded."""
    return value if isinstance(value, (str, int, bytes)) and not isinstance(value, bool) else None


def _decide(bucket: int, batches: Iterable[Any]) -> Iterator[dict]:
    """Batch reducer of the decision pass: a bucket's records, sorted by (hash, order key, position).
    The first member of each hash is kept. Singletons (almost every document) emit nothing; a cluster
    emits each duplicate and then its keeper's size. Streams: of the current hash only its first member
    is held, so a bucket may be larger than memory."""
    unpack = _POSITION.unpack
    current = b""  # the hash of the group being read (no hash is empty)
    first_rank, first_id = b"", None  # its first member
    size = 0
    keeper: Any = None
    for batch in batches:
        ranks, ids = batch.column("s").to_pylist(), batch.column("k").to_pylist()
        for row, rank in enumerate(ranks):
            if rank[:16] == current:
                if size == 1:
                    keeper = decode(first_id)
                size += 1
                shard, index = unpack(rank[-16:])
                yield {"shard": shard, "index": index, "size": 0, "keeper": keeper}
                continue
            if size > 1:
                shard, index = unpack(first_rank[-16:])
                yield {"shard": shard, "index": index, "size": size, "keeper": None}
            current, first_rank, first_id, size = rank[:16], rank, ids[row], 1
    if size > 1:
        shard, index = unpack(first_rank[-16:])
        yield {"shard": shard, "index": index, "size": size, "keeper": None}


@dataclass(frozen=True)
class _ShardDecisions:
    """The decisions of one input shard's documents that are in a duplicate cluster: their indices in the
    shard (ascending), cluster size for a keeper and 0 for a duplicate, and each duplicate's keeper id
    (None for a keeper). Arrays, not a dict per position: ~440k entries (half of them duplicates with a
    16-character id) took 104 MB unpickled as the two (shard, index) dicts this replaced and 23 MB here, the
    keepers' ids most of it; at 16 GB of generated Nemotron-CC text (448k entries) the dicts were about a
    quarter of the worker's 1 GB budget, and the table was shipped in every annotation task's stage."""

    indices: np.ndarray  # int64
    sizes: np.ndarray  # int32
    keepers: list[Any]


def _shard_decisions(shards: np.ndarray, indices: np.ndarray, sizes: np.ndarray, keepers: list[Any]) -> dict:
    """The decision pass's entries grouped by input shard: {shard: _ShardDecisions}."""
    if not len(shards):
        return {}
    order = np.lexsort((indices, shards))
    shards, indices, sizes = shards[order], indices[order], sizes[order]
    firsts = np.flatnonzero(np.diff(shards, prepend=-1)).tolist()
    ends = [*firsts[1:], len(shards)]
    return {
        int(shards[lo]): _ShardDecisions(indices[lo:hi], sizes[lo:hi], [keepers[i] for i in order[lo:hi].tolist()])
        for lo, hi in zip(firsts, ends, strict=True)
    }


@dataclass(frozen=True)
class _Annotate:
    """map_shard of the annotation pass: each document's decision by lookup of its position."""

    text_field: str
    decisions: dict  # input shard -> _ShardDecisions; a position absent from them: a singleton
    drop: bool
    table_url: str

    def __fingerprint__(self) -> list:
        # the decisions are what the decision pass computed, and the table's name digests its work:
        # describing the (possibly million-entry) lookups again would cost seconds per plan
        return ["exact-dedup-annotate", self.text_field, self.drop, self.table_url.rsplit("/", 1)[-1]]

    def __call__(self, docs: Iterable[dict], context: ShardContext) -> Iterator[dict]:
        shard = context.shard
        field_name, drop = self.text_field, self.drop
        found = self.decisions.get(shard)
        indices = [] if found is None else found.indices.tolist()
        sizes = [] if found is None else found.sizes.tolist()
        keepers = [] if found is None else found.keepers
        indices.append(-1)  # past the last entry: no document index matches it
        cached = _cached_hashes(self.table_url, shard)
        entry = 0
        for index, doc in enumerate(docs):
            size = 1  # a singleton
            if index == indices[entry]:  # the shard's entries are visited in index order, once each
                size, keeper = sizes[entry], keepers[entry]
                entry += 1
            if not size and drop:
                counters.increment("dedup/exact_documents_dropped")
                continue
            digest = cached[index] if index < len(cached) else text_hash(doc.get(field_name) or "")
            if size:
                yield _mark_kept(doc, digest, size)
            else:
                counters.increment("dedup/exact_documents_duplicate")
                yield _mark_duplicate(doc, digest, keeper)


_DECISION_BATCH = 16384  # decision records per Arrow batch (~1 MB)
_BUCKETS_PER_SHARD = 64  # hash buckets (the decision shuffle's keys) per reduce shard
_LOOKUP_BYTES = 64  # a decision entry in _ShardDecisions, unpickled (measured 54: index, size, list slot, half an id)


def dedup_documents(
    ds: Dataset,
    *,
    text_field: str = "text",
    order_key: Callable[[dict], Any] | None = None,
    drop: bool = False,
    num_shards: int | None = None,
) -> Dataset:
    """Mark (or with `drop=True`, remove) documents whose normalized text appeared earlier.

    order_key: defines "earlier" (default: the `id` field); must return a str/int/float/bytes or a
    tuple of them. Ties (equal order keys) go to the earlier document in input order.

    Two passes over `ds`, and no text in any shuffle: a decision pass, run NOW on the current
    `execution(...)`, shuffles only (hash, order key, position) per document and keeps the positions
    of the duplicate clusters' members; the returned (lazy) dataset reads `ds` again and annotates each
    document by looking its position up, so it keeps `ds`'s shards and order. `ds` must give the same
    records in the same order both times (files and lists do). When the duplicates table would not fit
    in an eighth of a worker's memory, the documents themselves are shuffled by hash instead (one pass,
    output grouped by hash).
    """
    order = order_key or _FieldOrder("id")
    config = current_config()
    buckets = _BUCKETS_PER_SHARD * (num_shards or config.num_workers)
    table_url = join(config.scratch_url, f"exact-dedup-{_table_name(ds, text_field, order, buckets, num_shards)}")
    try:
        run = (
            ds.map_shard(_HashRank(text_field, order, table_url, buckets), with_context=True)
            .map_batches(_batches, batch_size=_DECISION_BATCH)
            .group_by("b", _decide, sort_by="s", num_shards=num_shards, batch=True)
            .write(join(table_url, "part-{shard:05d}.parquet"), format="parquet")
            .execute()
        )
        # a dry run printed the decision pass's plan and ran nothing: no entries, nothing to read back
        entries = run.stages[-1].records_out
        if entries * _LOOKUP_BYTES > config.memory_per_worker // 8:
            _remove(table_url)
            return ds.group_by(_DocKey(text_field), _MarkDocs(drop), sort_by=order, num_shards=num_shards)
        shards, indices, sizes, keepers = [], [], [], []
        for path in run.outputs:
            for batch in read_batches(path, format="parquet"):
                shards.append(batch.column("shard").to_numpy(zero_copy_only=False))
                indices.append(batch.column("index").to_numpy(zero_copy_only=False))
                sizes.append(batch.column("size").to_numpy(zero_copy_only=False))
                keepers.extend(batch.column("keeper").to_pylist())
            url_to_fs(path)[0].rm(url_to_fs(path)[1])
        decisions = _shard_decisions(
            np.concatenate(shards or [np.zeros(0, np.int64)]).astype(np.int64),
            np.concatenate(indices or [np.zeros(0, np.int64)]).astype(np.int64),
            np.concatenate(sizes or [np.zeros(0, np.int32)]).astype(np.int32),
            keepers,
        )
    except BaseException:
        _remove(table_url)
        raise
    # The per-shard hash files stay for the annotation pass, which removes each once read. The folder
    # goes when the annotation is no longer referenced (the returned dataset and those built on it are
    # gone, or at exit): also when the dataset is never run, or a shard is never read.
    annotate = _Annotate(text_field, decisions, drop, table_url)
    weakref.finalize(annotate, _remove, table_url)
    return ds.map_shard(annotate, with_context=True)


def _table_name(
    ds: Dataset, text_field: str, order: Callable[[dict], Any], buckets: int, num_shards: int | None
) -> str:
    """The decision pass's scratch folder name: a digest of what it computes (the input's plan and the
    settings), so a rerun of the same work plans the same decision pass and resumes its checkpoints, and
    its success removes what a killed run left (a random name made every run a new job)."""
    from zephyr.engine.plan import plan

    source = plan(ds, current_config()).fingerprint
    return digest([source, text_field, describe(order), buckets, num_shards, describe(_HashRank)])[:12]


def _remove(url: str) -> None:
    fs, path = url_to_fs(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


# --- paragraph level ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Paragraphs:
    text_field: str
    id_field: str
    separator: str
    min_chars: int
    order_key: Callable[[dict], Any]

    def __call__(self, doc: dict) -> Iterator[dict]:
        order = self.order_key(doc)
        doc_id = doc[self.id_field]
        for index, para in enumerate((doc.get(self.text_field) or "").split(self.separator)):
            normalized = normalize_for_hash(para)
            if len(normalized) < self.min_chars:
                continue
            yield {
                "h": xxhash.xxh3_128_hexdigest(normalized.encode("utf-8")),
                "order": (order, index),
                "doc": doc_id,
                "i": index,
            }


def _paragraph_hash(record: dict) -> str:
    return record["h"]


def _paragraph_order(record: dict) -> Any:
    return record["order"]


def _repeats(key: str, occurrences: Iterable[dict]) -> Iterator[dict]:
    first = True
    for occ in occurrences:
        if first:
            first = False
            continue
        yield {"doc": occ["doc"], "i": occ["i"]}


def _record_doc(record: dict) -> Any:
    return record["doc"]


def _collect_indices(doc_id: Any, repeats: Iterable[dict]) -> dict:
    return {"doc": doc_id, "drop": sorted({r["i"] for r in repeats})}


@dataclass(frozen=True)
class _DocId:
    id_field: str

    def __call__(self, doc: dict) -> Any:
        return doc[self.id_field]


@dataclass(frozen=True)
class _ApplyRemovals:
    text_field: str
    separator: str

    def __call__(self, doc: dict, removal: dict | None) -> dict:
        out = dict(doc)
        indices = removal["drop"] if removal else []
        out["dup_paragraphs"] = indices
        if not indices:
            return out
        drop = set(indices)
        parts = (doc.get(self.text_field) or "").split(self.separator)
        kept = [p for i, p in enumerate(parts) if i not in drop]
        counters.increment("dedup/exact_paragraphs_removed", len(drop))
        out[self.text_field] = self.separator.join(kept)
        if not out[self.text_field].strip():
            counters.increment("dedup/exact_paragraphs_emptied_documents")
            if not out.get("filter_reason"):
                out["filter_reason"] = "exact_duplicate_paragraphs"
        return out


def dedup_paragraphs(
    ds: Dataset,
    *,
    text_field: str = "text",
    id_field: str = "id",
    separator: str = "\n",
    min_paragraph_chars: int = 1,
    order_key: Callable[[dict], Any] | None = None,
    num_shards: int | None = None,
) -> Dataset:
    """Remove paragraphs whose normalized form appeared earlier in the corpus (keep the first).

    Paragraphs whose normalized form is shorter than `min_paragraph_chars` are never removed.
    `ds` is read twice (paragraph hashes, then the join back), so put an expensive upstream behind a
    write/read if it should not run twice.
    """
    if min_paragraph_chars < 0:
        raise ValueError(f"dedup_paragraphs: min_paragraph_chars must be >= 0, got {min_paragraph_chars}")
    if not separator:
        raise ValueError("dedup_paragraphs: separator must be a non-empty string, e.g. '\\n' or '\\n\\n'")
    order = order_key or _FieldOrder(id_field)
    removals = (
        ds.flat_map(_Paragraphs(text_field, id_field, separator, min_paragraph_chars, order))
        .group_by(_paragraph_hash, _repeats, sort_by=_paragraph_order, num_shards=num_shards)
        .group_by(_record_doc, _collect_indices, num_shards=num_shards)
    )
    return ds.sorted_merge_join(
        removals,
        left_key=_DocId(id_field),
        right_key=_record_doc,
        how="left",
        combine=_ApplyRemovals(text_field, separator),
        num_shards=num_shards,
    )
