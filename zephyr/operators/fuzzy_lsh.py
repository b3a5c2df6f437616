"""Fuzzy dedup stages 1-3: MinHash signatures, LSH candidate edges, verification by exact Jaccard.

The map functions and reducers :mod:`zephyr.operators.fuzzy_dedup` chains on the engine (why each is
built as it is: that module's docstring). Every shuffle record is packed per partition and chunk,
not one per (document, band), edge or set.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from zephyr import counters
from zephyr.errors import BadInputError
from zephyr.operators.minhash import MinHashConfig, shingle_sets, sketch_batch

# before edges are deduplicated, and members of streamed hot buckets: how the work was done
counters.internal("fuzzy_dedup/candidate_edges_emitted", "fuzzy_dedup/hot_bucket_members")

__all__ = [
    "FLUSH_ITEMS",
    "BucketEdges",
    "CandidateSets",
    "FanOut",
    "PackBands",
    "PackByNode",
    "Sketch",
    "VerifyPairs",
    "candidate_id_hashes",
    "id_hashes",
    "first",
    "second",
    "tag_other",
]


# --------------------------------------------------------------------------- stage 1: signatures


@dataclass(frozen=True)
class Sketch:
    """map_shard: vectorized signatures per batch; per document with shingles a row of id and LSH band
    keys, as Arrow batches (shingle sets come later, for candidate documents only: `CandidateSets`)."""

    minhash: MinHashConfig
    id_field: str
    text_field: str
    batch_size: int

    def __call__(self, records: Iterable[dict]) -> Iterator[pa.RecordBatch]:
        for ids, texts in _batches(records, self.id_field, self.text_field, self.batch_size):
            sketch = sketch_batch(texts, self.minhash, with_sets=False)
            counters.increment("fuzzy_dedup/documents", len(ids))
            keep = np.flatnonzero(sketch.counts > 0)
            if len(keep) < len(ids):
                counters.increment("fuzzy_dedup/documents_without_shingles", len(ids) - len(keep))
            if not len(keep):
                continue
            # One Arrow batch straight to the parquet writer: no per-document record or array.
            keys = np.ascontiguousarray(sketch.keys[keep])
            bands = pa.Array.from_buffers(pa.binary(keys.shape[1] * 8), len(keep), [None, pa.py_buffer(keys)])
            yield pa.RecordBatch.from_pydict({"id": pa.array([ids[i] for i in keep.tolist()]), "bands": bands})


@dataclass(frozen=True)
class CandidateSets:
    """map_shard over the documents again: each candidate document's sorted 64-bit shingle set, as Arrow
    batches of (id, shingles).

    Why a second pass rather than sets written with the signatures: only documents with a candidate edge
    are verified (a few percent of a corpus: 5,414 of 65,013 in pipeline_scale's 0.25 GB corpus), and a
    set (8 bytes per shingle) outweighs its document's text; written for every document, sets were most of
    fuzzy dedup's disk (22 GB for a 16 GB corpus) and a large share of its time.

    Which documents are candidates: every worker loads the 64-bit hashes (:func:`id_hashes`) of the
    candidate edges' ends as one sorted, unique NumPy array (8 bytes per id, where a Python set of the ids
    took ~200), and tests each batch of documents' id hashes against it with one `np.searchsorted`; the
    other documents are skipped before any hashing of their text. A hash collision can only let a
    non-candidate through (two ids with one hash: probability ~ documents x candidates / 2**64, 1e-7 for
    4.4M documents and 500k candidates): its set is computed and written, and verification's fan-out,
    which sends a set only to the node's edges, ignores it. With `passes` > 1 (candidate hashes beyond the
    memory share: see `find_duplicate_clusters`) pass `pass_index` keeps the ids whose hash is
    `pass_index` modulo `passes`, so each pass holds a part of the array and every candidate is in one.
    """

    minhash: MinHashConfig
    id_field: str
    text_field: str
    batch_size: int
    edge_paths: tuple[str, ...]
    passes: int = 1
    pass_index: int = 0
    # Loaded once per worker process: the engine keeps a stage's objects across its shards.
    _loaded: dict = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, records: Iterable[dict]) -> Iterator[pa.RecordBatch]:
        if "wanted" not in self._loaded:
            self._loaded["wanted"] = candidate_id_hashes(self.edge_paths, self.passes, self.pass_index)
        candidates = _members(records, self.id_field, self._loaded["wanted"], self.batch_size)
        for ids, texts in _batches(candidates, self.id_field, self.text_field, self.batch_size):
            values, offsets = shingle_sets(texts, self.minhash)
            counters.increment("fuzzy_dedup/sets", len(ids))
            sizes = np.diff(offsets)
            keep = np.flatnonzero(sizes > 0)  # no shingles: never a candidate (not bucketed)
            if not len(keep):
                continue
            byte_offsets = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(sizes[keep] * 8, out=byte_offsets[1:])
            # Documents without shingles have empty sets, so the kept ones' values are contiguous.
            data = pa.py_buffer(np.ascontiguousarray(values, dtype="<u8"))
            shingles = pa.Array.from_buffers(pa.large_binary(), len(keep), [None, pa.py_buffer(byte_offsets), data])
            yield pa.RecordBatch.from_pydict({"id": pa.array([ids[i] for i in keep.tolist()]), "shingles": shingles})


def _members(records: Iterable[dict], id_field: str, wanted: np.ndarray, size: int) -> Iterator[dict]:
    """The records whose id hash is in the sorted array `wanted`, tested `size` records at a time."""
    chunk: list[dict] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield from _select(chunk, id_field, wanted)
            chunk = []
    yield from _select(chunk, id_field, wanted)


def _select(chunk: list[dict], id_field: str, wanted: np.ndarray) -> list[dict]:
    if not chunk or not len(wanted):
        return []
    hashes = id_hashes([doc_id(record, id_field) for record in chunk])
    at = np.minimum(np.searchsorted(wanted, hashes), len(wanted) - 1)
    return [chunk[i] for i in np.flatnonzero(wanted[at] == hashes).tolist()]


def _batches(
    records: Iterable[dict], id_field: str, text_field: str, size: int
) -> Iterator[tuple[list[Any], list[str]]]:
    """(ids, texts) of `size` documents at a time, each checked for an id and a str text."""
    ids: list[Any] = []
    texts: list[str] = []
    for record in records:
        ids.append(doc_id(record, id_field))
        text = record.get(text_field)
        if not isinstance(text, str):
            raise BadInputError(
                f"fuzzy dedup expects a str in field {text_field!r} of every document; document "
                f"{ids[-1]!r} has {type(text).__name__}. Set FuzzyDedupConfig(text_field=...) or fill "
                "missing text with ''."
            )
        texts.append(text)
        if len(ids) >= size:
            yield ids, texts
            ids, texts = [], []
    if ids:
        yield ids, texts


def doc_id(record: Any, id_field: str) -> str | int:
    """A document's id from `id_field`: a str or int, else a BadInputError naming the field and the fix."""
    doc_id = record.get(id_field) if isinstance(record, dict) else None
    if isinstance(doc_id, str) or (isinstance(doc_id, int) and not isinstance(doc_id, bool)):
        return doc_id
    fields = sorted(record)[:8] if isinstance(record, dict) else type(record).__name__
    raise BadInputError(
        f"fuzzy dedup needs a unique str or int id in field {id_field!r} of every document; got "
        f"{type(doc_id).__name__} in a record with fields {fields}. Set FuzzyDedupConfig(id_field=...) "
        "or add ids first (e.g. .map(lambda d: {**d, 'id': ...}))."
    )


# --------------------------------------------------------------------------- stage 2: LSH buckets


_ENTRIES, _HOT_MEMBERS = 0, 1  # item tags: a partition's entries arrive before hot buckets' members


@dataclass(frozen=True)
class PackBands:
    """map_shard over signature records: (bucket key, id) entries packed per LSH partition.

    One shuffle record per partition and chunk of `chunk` documents instead of one per (band,
    document): the shuffle's per-record cost is paid ~`chunk * num_bands / partitions` times less.
    A partition is the bucket key modulo `partitions`, so all members of a bucket meet in one.

    Hot buckets (more than `hot_members` members in one chunk: boilerplate, a page copied
    thousands of times): only the chunk's `anchors` smallest members travel as entries; the others
    travel as a (key, ids) list tagged to arrive after every entry, so the partition reducer streams
    them against the bucket's anchors instead of sorting them in memory.
    """

    partitions: int
    anchors: int = 2
    hot_members: int = 64
    chunk: int = 8192

    def __call__(self, records: Iterable[dict]) -> Iterator[tuple]:
        ids: list[Any] = []
        bands: list[bytes] = []
        for record in records:
            ids.append(record["id"])
            bands.append(record["bands"])
            if len(ids) >= self.chunk:
                yield from self._pack(ids, bands)
                ids, bands = [], []
        if ids:
            yield from self._pack(ids, bands)

    def _pack(self, ids: list[Any], bands: list[bytes]) -> Iterator[tuple]:
        keys = np.frombuffer(b"".join(bands), dtype="<i8").reshape(len(ids), -1)
        flat = keys.ravel()
        owner = np.repeat(np.arange(len(ids)), keys.shape[1])
        flat, owner = yield from self._hot_members(ids, flat, owner)
        part = flat.view(np.uint64) % np.uint64(self.partitions)
        order = np.argsort(part, kind="stable")
        part = part[order]
        bounds = np.flatnonzero(np.diff(part)) + 1
        for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(part)].tolist(), strict=False):
            sel = order[lo:hi]
            yield (int(part[lo]), _ENTRIES, flat[sel].tobytes(), [ids[i] for i in owner[sel].tolist()])

    def _hot_members(self, ids: list[Any], flat: np.ndarray, owner: np.ndarray) -> Generator[tuple, None, tuple]:
        """Yield the members of this chunk's hot buckets beyond their `anchors` smallest ids;
        return the entries left to pack (every other entry, and the hot buckets' anchors)."""
        _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
        hot = counts[inverse] > self.hot_members
        if not hot.any():
            return flat, owner
        keep = ~hot
        entries = np.flatnonzero(hot)
        entries = entries[np.argsort(flat[entries], kind="stable")]
        streamed = []
        for group in np.split(entries, np.flatnonzero(np.diff(flat[entries])) + 1):
            members = sorted(set(owner[group].tolist()), key=ids.__getitem__)
            anchors = np.isin(owner[group], members[: self.anchors])
            keep[group[anchors]] = True
            streamed.append(group[~anchors])
        rest = np.concatenate(streamed)
        counters.increment("fuzzy_dedup/hot_bucket_members", len(rest))
        # One record per partition: a member hot in several bands of one partition comes once,
        # so the reducer can link it to the union of those buckets' anchors without repeats.
        part = flat[rest].view(np.uint64) % np.uint64(self.partitions)
        order = np.argsort(part, kind="stable")
        rest, part = rest[order], part[order]
        bounds = np.flatnonzero(np.diff(part)) + 1
        for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(part)].tolist(), strict=False):
            sel = rest[lo:hi]
            yield (int(part[lo]), _HOT_MEMBERS, flat[sel].tobytes(), [ids[i] for i in owner[sel].tolist()])
        return flat[keep], owner[keep]


@dataclass(frozen=True)
class BucketEdges:
    """Reducer per LSH partition: sort (bucket key, id) entries, link bucket members to anchors.

    Each bucket links every member to its `anchors` smallest ids (star edges: linear in the
    bucket size, not all pairs), vectorized over the whole partition. A pair met in several
    partitions (several bands) is emitted once per partition; verification and connected
    components skip the repeats. Hot buckets' other members arrive last (sorted by tag) and
    are linked to the same anchors as they stream by: the edges are the ones the sorted path
    would give, and memory holds entries only.
    """

    anchors: int

    def __call__(self, partition: int, items: Iterable[tuple]) -> Iterator[dict]:
        key_parts: list[np.ndarray] = []
        ids: list[Any] = []
        buckets: _Buckets | None = None
        for _, tag, keys, chunk_ids in items:
            if tag == _ENTRIES:
                key_parts.append(np.frombuffer(keys, dtype="<i8"))
                ids.extend(chunk_ids)
                continue
            if buckets is None:
                buckets = yield from self._link(key_parts, ids)
                key_parts, ids = [], []
            anchors_of: dict[int, list[Any]] = {}
            pairs: set[tuple[Any, Any]] = set()
            for key, member in zip(np.frombuffer(keys, dtype="<i8").tolist(), chunk_ids, strict=True):
                if key not in anchors_of:
                    anchors_of[key] = buckets.anchors_of(key, self.anchors)
                pairs.update((anchor, member) for anchor in anchors_of[key])
            counters.increment("fuzzy_dedup/candidate_edges_emitted", len(pairs))
            yield from ({"a": a, "b": b, "jaccard": None} for a, b in sorted(pairs))
        if buckets is None:
            yield from self._link(key_parts, ids)

    def _link(self, key_parts: list[np.ndarray], ids: list[Any]) -> Generator[dict, None, _Buckets]:
        """Edges of the entries; returns the sorted buckets, where hot buckets find their anchors."""
        if not key_parts:
            return _Buckets(np.zeros(0, dtype="<i8"), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [])
        keys = np.concatenate(key_parts)
        # Ranks of ids in id order (str or int, Python's order), so one integer sort orders (key,
        # id); a numpy string array would cost the longest id's width for every entry.
        unique_ids = sorted(set(ids))
        rank_of = {doc_id: i for i, doc_id in enumerate(unique_ids)}
        members = np.fromiter(map(rank_of.__getitem__, ids), dtype=np.int64, count=len(ids))
        order = np.lexsort((members, keys))
        keys, members = keys[order], members[order]
        fresh = np.ones(len(keys), dtype=bool)
        fresh[1:] = (keys[1:] != keys[:-1]) | (members[1:] != members[:-1])  # one id twice: a collision
        keys, members = keys[fresh], members[fresh]
        new_bucket = np.ones(len(keys), dtype=bool)
        new_bucket[1:] = keys[1:] != keys[:-1]
        starts = np.flatnonzero(new_bucket)
        bucket = np.cumsum(new_bucket) - 1
        rank = np.arange(len(keys)) - starts[bucket]  # position inside the bucket, in id order
        a_parts, b_parts = [], []
        for j in range(self.anchors):
            later = rank > j
            a_parts.append(members[starts[bucket[later]] + j])
            b_parts.append(members[later])
        pairs = np.unique(np.stack([np.concatenate(a_parts), np.concatenate(b_parts)], axis=1), axis=0)
        counters.increment("fuzzy_dedup/candidate_edges_emitted", len(pairs))
        for a, b in pairs.tolist():
            # "jaccard": unknown until verified (stage 5 tells graph edges from component edges by it)
            yield {"a": unique_ids[a], "b": unique_ids[b], "jaccard": None}
        return _Buckets(keys[starts], members, starts, unique_ids)


@dataclass(frozen=True)
class _Buckets:
    """A partition's members sorted by (bucket key, id rank): bucket `i` is members[starts[i]:starts[i+1]]."""

    bucket_keys: np.ndarray
    members: np.ndarray
    starts: np.ndarray
    unique_ids: list[Any]

    def anchors_of(self, key: int, anchors: int) -> list[Any]:
        """The `anchors` smallest ids of bucket `key` (its hot chunks sent theirs as entries)."""
        at = int(np.searchsorted(self.bucket_keys, key))
        if at >= len(self.bucket_keys) or self.bucket_keys[at] != key:
            raise RuntimeError(f"LSH bucket {key} has hot members but no anchor entries: a lost shuffle record?")
        end = self.starts[at + 1] if at + 1 < len(self.starts) else len(self.members)
        ranks = self.members[self.starts[at] : min(end, self.starts[at] + anchors)]
        return [self.unique_ids[r] for r in ranks.tolist()]


def first(item: tuple) -> Any:
    """Key function: an item's first element (a shuffle's key)."""
    return item[0]


def second(item: tuple) -> Any:
    """Key function: an item's second element (a sort key)."""
    return item[1]


def tag_other(item: tuple) -> tuple:
    """Sort key: an item's tag, then the other node."""
    return (item[1], item[2])


# --------------------------------------------------------------------------- stage 3: verification

_EDGES, _SETS = 0, 1  # chunk tags: a node partition's edges arrive before its sets
FLUSH_ITEMS = 4096  # entries per packed record


def stable_hash(value: Any) -> int:
    """A 64-bit hash that is the same in every process (Python's own hash of str is salted per process):
    xxh3 of a str's UTF-8 bytes, of anything else's repr (an int id, an edge's tuple of ids)."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else repr(value).encode("utf-8")
    return xxhash.xxh3_64_intdigest(data)


def partition_of(value: Any, partitions: int) -> int:
    """A partition from a stable hash."""
    return stable_hash(value) % partitions


def id_hashes(ids: Sequence[Any]) -> np.ndarray:
    """`stable_hash` of each id, as uint64 (an int id and its decimal str share one: harmless where a
    collision only costs work, as in `CandidateSets`; ids are all str or all int anyway)."""
    return np.fromiter(map(stable_hash, ids), dtype=np.uint64, count=len(ids))


@dataclass(frozen=True)
class PackByNode:
    """map_shard over candidate edges and shingle sets: pack both per partition of node ids.

    One shuffle record per partition and chunk, not per item.
    """

    partitions: int

    def __call__(self, records: Iterable[dict]) -> Iterator[tuple]:
        chunks: dict[tuple[int, int], tuple[list, list]] = {}
        pending = 0
        for record in records:
            if "shingles" in record:  # a sets file's record
                node = record["id"]
                keys, values = chunks.setdefault((partition_of(node, self.partitions), _SETS), ([], []))
                keys.append(node)
                values.append(record["shingles"])
            else:  # a candidate edge, both directions
                for node, other in ((record["a"], record["b"]), (record["b"], record["a"])):
                    keys, values = chunks.setdefault((partition_of(node, self.partitions), _EDGES), ([], []))
                    keys.append(node)
                    values.append(other)
            pending += 1
            if pending >= FLUSH_ITEMS:
                yield from ((part, tag, keys, values) for (part, tag), (keys, values) in chunks.items())
                chunks, pending = {}, 0
        yield from ((part, tag, keys, values) for (part, tag), (keys, values) in chunks.items())


def candidate_id_hashes(paths: Sequence[str], passes: int = 1, pass_index: int = 0) -> np.ndarray:
    """Sorted unique `id_hashes` of every node of the candidate edges in the parquet files `paths` (both
    ends), those equal to `pass_index` modulo `passes` only.

    Memory: 8 bytes per edge end (repeats included) while the hashes are sorted in place, then the unique
    ones copied out: at most 16 bytes per edge end, 8 per distinct id once built.
    """
    from zephyr.engine.io import read_batches

    parts: list[np.ndarray] = []
    for path in paths:
        for batch in read_batches(path, format="parquet", columns=["a", "b"]):
            for column in ("a", "b"):
                hashes = id_hashes(batch.column(column).to_pylist())
                parts.append(hashes[hashes % np.uint64(passes) == pass_index] if passes > 1 else hashes)
    hashes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    del parts
    hashes.sort()
    fresh = np.ones(len(hashes), dtype=bool)
    fresh[1:] = hashes[1:] != hashes[:-1]
    return hashes[fresh]


@dataclass(frozen=True)
class FanOut:
    """Reducer per node partition: send each node's shingle set to each of its distinct edges.

    Chunks arrive edges first (a pair found in several LSH partitions arrives repeated: kept
    once), then sets; out come (edge partition, a's, b's, sets) records packed per partition.
    Memory: the partition's adjacency plus one chunk of output per edge partition.
    """

    partitions: int

    def __call__(self, partition: int, chunks: Iterable[tuple]) -> Iterator[tuple]:
        neighbours: dict[Any, set[Any]] = {}
        out: dict[int, tuple[list, list, list]] = {}
        for _, tag, keys, values in chunks:
            if tag == _EDGES:
                for node, other in zip(keys, values, strict=False):
                    neighbours.setdefault(node, set()).add(other)
                continue
            for node, shingles in zip(keys, values, strict=False):
                for other in sorted(neighbours.get(node, ())):
                    edge = (node, other) if node < other else (other, node)
                    part = partition_of(edge, self.partitions)
                    target = out.setdefault(part, ([], [], []))
                    target[0].append(edge[0])
                    target[1].append(edge[1])
                    target[2].append(shingles)
                    if len(target[0]) >= FLUSH_ITEMS:
                        yield (part, *out.pop(part))
        for part, (a_ids, b_ids, sets) in out.items():
            yield (part, a_ids, b_ids, sets)


@dataclass(frozen=True)
class VerifyPairs:
    """Reducer per edge partition: each edge meets its two shingle sets (sorted uint64 as bytes);
    keep it when their Jaccard similarity is >= threshold. Memory: edges still waiting for their
    second set."""

    threshold: float

    def __call__(self, partition: int, chunks: Iterable[tuple]) -> Iterator[dict]:
        waiting: dict[tuple, bytes] = {}
        for _, a_ids, b_ids, sets in chunks:
            for a, b, shingles in zip(a_ids, b_ids, sets, strict=False):
                first = waiting.pop((a, b), None)
                if first is None:
                    waiting[(a, b)] = shingles
                    continue
                x, y = np.frombuffer(first, dtype="<u8"), np.frombuffer(shingles, dtype="<u8")
                inter = len(np.intersect1d(x, y, assume_unique=True))
                similarity = inter / (len(x) + len(y) - inter)
                counters.increment("fuzzy_dedup/candidate_edges")
                if similarity < self.threshold:
                    counters.increment("fuzzy_dedup/edges_rejected")
                    continue
                counters.increment("fuzzy_dedup/edges_verified")
                yield {"a": a, "b": b, "jaccard": similarity}
        if waiting:
            edge = next(iter(waiting))
            raise RuntimeError(
                f"candidate edge {edge!r} met 1 shingle set, expected 2: are document ids unique, and the "
                f"signature files complete? ({len(waiting)} such edges in partition {partition})"
            )
