"""Exact deduplication on the engine's group_by: whole documents and repeated paragraphs.

Both keep the FIRST occurrence by a deterministic order (`order_key(doc)`, default the document id),
not by arrival order, so the result is identical whatever the number of shards or workers. Both run
on `Dataset.group_by`, whose shuffle spills to disk, so they scale past one machine's memory.

Document level (`dedup_documents`): the key is a 128-bit xxh3 hash of the normalized text (NFKC,
case-folded, punctuation removed, whitespace collapsed), so trivially re-formatted copies collide.
Each document gets `dup_cluster` (the hash) and `dup_keep`; the kept one also `dup_count` (cluster
size, for FineWeb-2-style re-hydration); the others get `filter_reason="exact_duplicate"` (unless an
earlier stage set one) and `dup_keeper` (the kept document's `id`, for lineage). `drop=True` emits only the kept documents. Memory per cluster is O(1).

Paragraph level (`dedup_paragraphs`, CCNet-style): text is split on `separator`; every normalized
paragraph seen earlier in the corpus order (doc order, then position) is removed from later documents.
Three shuffles: paragraphs by hash (find the repeats), repeats by document (collect per doc), and a
sorted-merge join back to the documents. Documents get `dup_paragraphs` (indices removed) and, when
everything was a repeat, `filter_reason="exact_duplicate_paragraphs"`. Document ids must be unique.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import xxhash

from zephyr.engine import counters
from zephyr.engine.dataset import Dataset

__all__ = ["normalize_for_hash", "text_hash", "dedup_documents", "dedup_paragraphs"]

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


def text_hash(text: str) -> str:
    """128-bit xxh3 of the normalized text, hex (32 chars)."""
    return xxhash.xxh3_128_hexdigest(normalize_for_hash(text).encode("utf-8"))


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


@dataclass(frozen=True)
class _MarkDocs:
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
            out = dict(doc)
            out["dup_cluster"] = key
            out["dup_keep"] = False
            out["dup_keeper"] = first.get("id")  # lineage: the copy kept for it (zephyr.operators.lineage)
            if not out.get("filter_reason"):
                out["filter_reason"] = "exact_duplicate"
            yield out
        kept = dict(first)
        kept["dup_cluster"] = key
        kept["dup_count"] = size
        kept["dup_keep"] = True
        yield kept


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
    tuple of them. Output order is the shuffle's (deterministic, grouped by hash), not input order.
    """
    return ds.group_by(
        _DocKey(text_field),
        _MarkDocs(drop),
        sort_by=order_key or _FieldOrder("id"),
        num_shards=num_shards,
    )


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
