"""Fuzzy (MinHash-LSH) deduplication on the engine: buckets, verification, connected components.

Why it is built this way: the usual single-process clustering step (union-find over every
candidate pair) is where fuzzy dedup stops scaling, and chains of weak LSH links are how it
wipes out unrelated documents. Here every step after the signatures is an engine `group_by`, so
memory stays bounded by the engine's budget whatever the corpus size (one exception: step 5
holds the ids of one connected component at a time), and (with verification) only edges whose
exact Jaccard similarity passes the threshold reach the clustering.

Stages (each writes parquet under `work_dir` and a ``_DONE.json``, so a rerun skips finished work):

1. ``signatures/``  one row per document with shingles: id, LSH band keys and, with
   verification, its sorted set of 32-bit shingle hashes, written as Arrow batches of
   `batch_size` documents. Documents without words are never duplicates.
2. ``candidates/``  LSH: the (bucket key, id) entries are packed per partition of the key space
   (bucket key modulo a partition count sized so one partition fits a quarter of a worker's
   memory) and `group_by` partition sorts them with numpy; each bucket links its members to its
   `anchors_per_bucket` smallest ids (star edges: linear in the bucket size, not all pairs). Two
   anchors rather than one keep a pair connected when the smallest member of their bucket is
   itself a false positive that verification will cut. Packing makes the shuffle carry a few
   records per partition instead of one per (document, band). A giant bucket (one page copied
   into 30% of a corpus) would make its partition a straggler holding the bucket in memory: a
   bucket with more than `hot_bucket_members` members in one chunk sends only the chunk's anchors
   as entries, and its other members arrive after every entry and are linked as they stream by
   (same edges; benchmarks/lsh_skew.py).
3. ``verified/``    `group_by` node partition over the candidate edges and the signature files
   together (one `from_files` reads both: the engine's union) sends each node's shingle set to
   its edges (once per distinct edge: a pair found in several bands arrives repeated; when the
   ids of candidate nodes fit in an eighth of a worker's memory, only their sets travel);
   `group_by` edge partition then computes the Jaccard similarity of the two sets of each edge
   and keeps edges >= `threshold` (exact up to 32-bit hash collisions between shingles, ~3e-5
   per pair of 2 KB documents). Both shuffles carry records packed per partition (partitions
   sized to a quarter of a worker's memory), not one per edge or set.
4. ``cc/iter-NNNN/`` connected components by alternating large-star and small-star rounds
   (Kiveris et al., "Connected Components in Map Reduce and Beyond", SoCC 2014), each a
   `group_by` on node id streaming neighbours in sorted order (no neighbour list in memory).
   Rounds repeat until the edges form one star per component centred on its smallest id. That
   fixed point is unique, so components do not depend on shard or worker counts.
5. ``clusters/``    keepers by star clustering inside each component: `group_by` node gives
   every node its component and degree, `group_by` component visits nodes by degree
   (descending, then id); an unclaimed node is kept and claims its unclaimed neighbours. Output:
   (id, cluster) for every non-keeper, where cluster is the id of the document kept for it.

Why step 5: a component is transitive (copy A and copy B of one original may each match it at
>= threshold and not each other; a chain of edits links documents far apart), so removing all
but one member of a component removes text that no kept document matches. Star clustering
removes a document only when it has a graph edge, with verification an exact Jaccard >=
`threshold`, to the very document kept in its place; the highest-degree node (typically the
original its copies came from) is kept first, so one keeper covers a family of copies.

The result annotates each document with ``dup_cluster`` (the id of the document kept for it; its
own id when it is kept) and ``dup_keep`` (True for exactly one document per cluster: the one
whose id is the cluster id). Non-keepers also get ``filter_reason="fuzzy_duplicate"``
unless an earlier operator set a reason; :func:`drop_fuzzy_duplicates` removes them. Without
verification, steps 4-5 run on the raw LSH candidate edges.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from zephyr.engine import counters
from zephyr.engine.context import current_config
from zephyr.engine.dataset import Dataset
from zephyr.fs import atomic_write, join, open_url, url_to_fs
from zephyr.operators.minhash import MinHashConfig, sketch_batch
from zephyr.versioning import fingerprint, marker_exists, read_marker, write_marker

__all__ = [
    "FUZZY_DUPLICATE_REASON",
    "FuzzyDedupConfig",
    "FuzzyDedupReport",
    "fuzzy_dedup",
    "find_duplicate_clusters",
    "annotate_clusters",
    "drop_fuzzy_duplicates",
    "connected_components",
    "lsh_candidate_edges",
]

FUZZY_DUPLICATE_REASON = "fuzzy_duplicate"
"""`filter_reason` of documents that are near-duplicates of their cluster's keeper."""

_DONE = "_DONE.json"
_WORK_DIR_FORMAT = 2
# Done markers (`zephyr.versioning`): a stage's carries the work_dir settings' fingerprint; a
# connected-components round's the layout version (rounds are the same work for any settings).
_STAGE_KIND = "fuzzy-dedup-stage"
_ROUND_KIND = "fuzzy-dedup-cc-round"
_WORK_DIR_KIND = "fuzzy-dedup-work-dir"
_ROUND_VERSION = f"cc-format-{_WORK_DIR_FORMAT}"
_LOOKUP_BYTES = 200  # memory per entry of an in-memory id table (set or dict slot, id strings)


@dataclass(frozen=True)
class FuzzyDedupConfig:
    """Fuzzy dedup settings; the defaults follow common practice for web text.

    minhash: shingling, permutations and LSH banding (default word 5-grams, 14 bands x 8 rows).
    verify: re-check candidate pairs against the exact Jaccard of their shingle sets, so LSH
        false positives and chains of weak links cannot merge unrelated documents.
    threshold: minimum exact Jaccard of a verified edge (used only with `verify`).
    anchors_per_bucket: each LSH bucket links every member to this many of its smallest ids.
    id_field / text_field: where documents keep their unique id (all str or all int) and their
        text.
    batch_size: documents per vectorized signature batch.
    max_iterations: connected-components rounds before giving up (a handful is typical: rounds
        grow with the logarithm of the largest cluster's size).
    num_shards: shard count of the shuffles (None: one per engine worker; each reducer streams,
        so a shard's size does not bound memory).
    hot_bucket_members: an LSH bucket with more members than this among one chunk of 8,192
        signatures (boilerplate, a page copied thousands of times) is linked inside the chunk, and
        only the chunk's anchors travel to the bucket's partition; so a bucket holding 30% of a
        corpus costs its partition two entries per chunk instead of one per member (no straggler,
        no partition beyond its memory share). Members are still linked to the same component.
    """

    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    verify: bool = True
    threshold: float = 0.8
    anchors_per_bucket: int = 2
    id_field: str = "id"
    text_field: str = "text"
    batch_size: int = 512
    max_iterations: int = 64
    num_shards: int | None = None
    hot_bucket_members: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.minhash, MinHashConfig):
            raise TypeError(f"FuzzyDedupConfig.minhash must be a MinHashConfig, got {type(self.minhash).__name__}.")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"FuzzyDedupConfig.threshold must be in (0, 1], got {self.threshold!r}; e.g. 0.8.")
        for name in ("anchors_per_bucket", "batch_size", "max_iterations", "hot_bucket_members"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"FuzzyDedupConfig.{name} must be a positive int, got {value!r}.")
        if self.num_shards is not None and self.num_shards < 1:
            raise ValueError(f"FuzzyDedupConfig.num_shards must be None or >= 1, got {self.num_shards!r}.")


@dataclass(frozen=True)
class FuzzyDedupReport:
    """What a cluster-finding run found; also saved as ``work_dir/report.json``.

    candidate_edges: distinct candidate pairs from LSH when verifying; without verification, the
        edges the LSH partitions emitted (a pair found in partitions of several bands counts once
        per partition).
    verified_edges: edges of the similarity graph (without verification: the candidate edges).
    duplicates: documents removed (non-keepers).
    clusters_paths: parquet files of {"id", "cluster"} for every non-keeper, cluster being the id
        of the document kept for it (none: no duplicates).
    """

    documents: int
    documents_without_shingles: int
    candidate_edges: int
    verified_edges: int
    cc_iterations: int
    duplicates: int
    clusters_paths: tuple[str, ...]


# --------------------------------------------------------------------------- stage 1: signatures


@dataclass(frozen=True)
class _Sketch:
    """map_shard: vectorized signatures per batch; per document with shingles a row of id, band
    keys and (with verification) its set of 32-bit shingle hashes, as Arrow batches."""

    config: FuzzyDedupConfig

    def __call__(self, records: Iterable[dict]) -> Iterator[pa.RecordBatch]:
        batch: list[dict] = []
        for record in records:
            batch.append(record)
            if len(batch) >= self.config.batch_size:
                yield from self._batch(batch)
                batch = []
        if batch:
            yield from self._batch(batch)

    def _batch(self, batch: list[dict]) -> Iterator[pa.RecordBatch]:
        cfg = self.config
        ids, texts = [], []
        for record in batch:
            ids.append(_doc_id(record, cfg.id_field))
            text = record.get(cfg.text_field)
            if not isinstance(text, str):
                raise TypeError(
                    f"fuzzy dedup expects a str in field {cfg.text_field!r} of every document; document "
                    f"{ids[-1]!r} has {type(text).__name__}. Set FuzzyDedupConfig(text_field=...) or fill "
                    "missing text with ''."
                )
            texts.append(text)
        sketch = sketch_batch(texts, cfg.minhash)
        counters.increment("fuzzy_dedup/documents", len(batch))
        keep = np.flatnonzero(sketch.counts > 0)
        if len(keep) < len(batch):
            counters.increment("fuzzy_dedup/documents_without_shingles", len(batch) - len(keep))
        if not len(keep):
            return
        # One Arrow batch straight to the parquet writer: no per-document record or array.
        keys = np.ascontiguousarray(sketch.keys[keep])
        columns = {
            "id": pa.array([ids[i] for i in keep.tolist()]),
            "bands": pa.Array.from_buffers(pa.binary(keys.shape[1] * 8), len(keep), [None, pa.py_buffer(keys)]),
        }
        if cfg.verify:
            # Documents without shingles have empty sets, so the kept ones' values are contiguous.
            sizes = np.diff(sketch.set_offsets)[keep]
            offsets = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(sizes * 4, out=offsets[1:])
            values = np.ascontiguousarray(sketch.set_values, dtype="<u4")
            columns["shingles"] = pa.Array.from_buffers(
                pa.large_binary(), len(keep), [None, pa.py_buffer(offsets), pa.py_buffer(values)]
            )
        yield pa.RecordBatch.from_pydict(columns)


def _doc_id(record: Any, id_field: str) -> str | int:
    doc_id = record.get(id_field) if isinstance(record, dict) else None
    if isinstance(doc_id, str) or (isinstance(doc_id, int) and not isinstance(doc_id, bool)):
        return doc_id
    fields = sorted(record)[:8] if isinstance(record, dict) else type(record).__name__
    raise TypeError(
        f"fuzzy dedup needs a unique str or int id in field {id_field!r} of every document; got "
        f"{type(doc_id).__name__} in a record with fields {fields}. Set FuzzyDedupConfig(id_field=...) "
        "or add ids first (e.g. .map(lambda d: {**d, 'id': ...}))."
    )


# --------------------------------------------------------------------------- stage 2: LSH buckets

_ENTRY_BYTES = 96  # memory per (bucket key, document) entry in a partition reducer, ids included


_ENTRIES, _HOT_MEMBERS = 0, 1  # item tags: a partition's entries arrive before hot buckets' members


@dataclass(frozen=True)
class _PackBands:
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
class _BucketEdges:
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


def _first(item: tuple) -> Any:
    return item[0]


def _second(item: tuple) -> Any:
    return item[1]


def _tag_other(item: tuple) -> tuple:
    return (item[1], item[2])


# --------------------------------------------------------------------------- stage 3: verification

_EDGES, _SETS = 0, 1  # chunk tags: a node partition's edges arrive before its sets
_FLUSH_ITEMS = 4096  # entries per packed record


def _partition_of(value: Any, partitions: int) -> int:
    """A partition from a stable hash (Python's own hash of str differs between processes)."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else repr(value).encode("utf-8")
    return xxhash.xxh3_64_intdigest(data) % partitions


@dataclass(frozen=True)
class _PackByNode:
    """map_shard over candidate edges and signatures: pack both per partition of node ids.

    With `edge_paths` (when the candidate nodes fit in memory), a signature shard first loads the
    set of ids that have a candidate edge and ships only their shingle sets: the others (most of
    a corpus) have nothing to verify. One shuffle record per partition and chunk, not per item.
    """

    partitions: int
    edge_paths: tuple[str, ...] | None
    # Loaded once per worker process: the engine keeps a stage's objects across its shards.
    _loaded: dict = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, records: Iterable[dict]) -> Iterator[tuple]:
        wanted: set[Any] | None = None
        chunks: dict[tuple[int, int], tuple[list, list]] = {}
        pending = 0
        for record in records:
            if "shingles" in record:  # a signature file's record
                if wanted is None and self.edge_paths is not None:
                    if "nodes" not in self._loaded:
                        self._loaded["nodes"] = _candidate_nodes(self.edge_paths)
                    wanted = self._loaded["nodes"]
                node = record["id"]
                if wanted is not None and node not in wanted:
                    continue
                keys, values = chunks.setdefault((_partition_of(node, self.partitions), _SETS), ([], []))
                keys.append(node)
                values.append(record["shingles"])
            else:  # a candidate edge, both directions
                for node, other in ((record["a"], record["b"]), (record["b"], record["a"])):
                    keys, values = chunks.setdefault((_partition_of(node, self.partitions), _EDGES), ([], []))
                    keys.append(node)
                    values.append(other)
            pending += 1
            if pending >= _FLUSH_ITEMS:
                yield from ((part, tag, keys, values) for (part, tag), (keys, values) in chunks.items())
                chunks, pending = {}, 0
        yield from ((part, tag, keys, values) for (part, tag), (keys, values) in chunks.items())


def _candidate_nodes(paths: Sequence[str]) -> set[Any]:
    from zephyr.engine.io import read_batches

    nodes: set[Any] = set()
    for path in paths:
        for batch in read_batches(path, format="parquet", columns=["a", "b"]):
            nodes.update(batch.column("a").to_pylist())
            nodes.update(batch.column("b").to_pylist())
    return nodes


@dataclass(frozen=True)
class _FanOut:
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
                    part = _partition_of(edge, self.partitions)
                    target = out.setdefault(part, ([], [], []))
                    target[0].append(edge[0])
                    target[1].append(edge[1])
                    target[2].append(shingles)
                    if len(target[0]) >= _FLUSH_ITEMS:
                        yield (part, *out.pop(part))
        for part, (a_ids, b_ids, sets) in out.items():
            yield (part, a_ids, b_ids, sets)


@dataclass(frozen=True)
class _VerifyPairs:
    """Reducer per edge partition: each edge meets its two shingle sets (sorted uint32 as bytes);
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
                x, y = np.frombuffer(first, dtype=np.uint32), np.frombuffer(shingles, dtype=np.uint32)
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


# --------------------------------------------------------------------------- stage 4: components


def _both_directions(edge: dict) -> Iterator[tuple[Any, Any]]:
    yield (edge["a"], edge["b"])
    yield (edge["b"], edge["a"])


def _large_star(node: Any, neighbours: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """Link every larger neighbour of `node` to the smallest id of its closed neighbourhood.

    Also counts (``fuzzy_dedup/cc_unsettled``) whether `node` breaks the star-forest shape: more
    than one smaller neighbour, or a smaller and a larger one. A round in which no node is
    unsettled started from the fixed point.
    """
    smallest = None
    previous = None
    smaller = larger = 0
    for _, other in neighbours:  # sorted ascending
        if other == previous:
            continue
        previous = other
        if smallest is None:
            smallest = other if other < node else node
        if other < node:
            smaller += 1
        else:
            larger += 1
            yield (other, smallest)  # keyed by the larger endpoint, for small-star
    if smaller > 1 or (smaller and larger):
        counters.increment("fuzzy_dedup/cc_unsettled")


def _small_star(node: Any, neighbours: Iterable[tuple[Any, Any]]) -> Iterator[dict]:
    """Link `node` and all its (smaller) neighbours to the smallest of them."""
    smallest = None
    previous = None
    for _, other in neighbours:  # sorted ascending
        if other == previous:
            continue
        previous = other
        if smallest is None:
            smallest = other
        else:
            yield {"a": smallest, "b": other}
    if smallest is not None:
        yield {"a": smallest, "b": node}


def connected_components(
    edges: Dataset | Sequence[str],
    *,
    work_dir: str,
    max_iterations: int = 64,
    num_shards: int | None = None,
) -> tuple[list[str], int]:
    """Connected components of an undirected graph of records {"a", "b"} (a != b), on the engine.

    `edges` is a Dataset or a list of parquet files. Returns (parquet files of the converged star
    edges {"a": component minimum, "b": every other member}, rounds run). Each round is one
    large-star and one small-star `group_by`, written to ``work_dir/iter-NNNN/``; a rerun skips
    rounds whose ``_DONE.json`` exists. Node ids must be all str or all int. The last round is
    the one that finds nothing left to change.
    """
    paths: list[str] | None = None
    for iteration in range(1, max_iterations + 1):
        out_dir = join(work_dir, f"iter-{iteration:04d}")
        marker = read_marker(join(out_dir, _DONE), _ROUND_KIND, _ROUND_VERSION)
        if marker is None:
            _clear(out_dir)  # a killed round's files belong to no finished round
            if paths is None and isinstance(edges, Dataset):
                source: Dataset | None = edges
            else:
                files = list(edges) if paths is None else paths
                source = Dataset.from_files(files, format="parquet", columns=["a", "b"]) if files else None
            new_paths: list[str] = []
            unsettled = 0
            if source is not None:
                new_paths, found = _write_stage(
                    source.flat_map(_both_directions)
                    .group_by(_first, _large_star, sort_by=_second, num_shards=num_shards)
                    .group_by(_first, _small_star, sort_by=_second, num_shards=num_shards),
                    out_dir,
                )
                unsettled = found.get("fuzzy_dedup/cc_unsettled", 0)
            marker = write_marker(
                join(out_dir, _DONE), _ROUND_KIND, _ROUND_VERSION, {"paths": new_paths, "unsettled": unsettled}
            )
        done = marker.payload
        paths = done["paths"]
        if done["unsettled"] == 0:
            # This round started from a star forest, so its output equals its input: converged.
            return paths, iteration
    raise RuntimeError(
        f"connected components did not converge in {max_iterations} rounds (work_dir {work_dir!r}); "
        "raise FuzzyDedupConfig.max_iterations, or look for an enormous chain-shaped cluster."
    )


# --------------------------------------------------------------------------- stage 5: star clusters

_COMPONENT, _NEIGHBOUR = 0, 1


def _route_to_components(record: dict) -> Iterator[tuple]:
    if "jaccard" in record:  # an edge of the similarity graph (verified, or a raw candidate)
        yield (record["a"], _NEIGHBOUR, record["b"])
        yield (record["b"], _NEIGHBOUR, record["a"])
    else:  # a converged component edge: member b belongs to the component of a
        yield (record["b"], _COMPONENT, record["a"])


def _node_summary(node: Any, items: Iterable[tuple]) -> tuple:
    """Items sorted by (tag, other): a node's component (absent: it is the component's minimum),
    then its graph neighbours in id order. Out: (component, -degree, node, neighbours)."""
    component = node
    neighbours: list[Any] = []
    for _, tag, other in items:
        if tag == _COMPONENT:
            component = other
        elif not neighbours or other != neighbours[-1]:
            neighbours.append(other)
    return (component, -len(neighbours), node, neighbours)


def _priority(item: tuple) -> tuple:
    return (item[1], item[2])  # highest degree first, ties to the smallest id


def _star_clusters(component: Any, nodes: Iterable[tuple]) -> Iterator[dict]:
    """Reducer per component: greedy star clustering (Aslam, Pelekhov and Rus, "The Star
    Clustering Algorithm for Static and Dynamic Information Organization", JGAA 2004).

    Nodes arrive by priority (degree descending, then id). A node not yet claimed becomes a keeper
    and claims every unclaimed neighbour as its duplicate. So every removed document has an edge
    (with verification: exact Jaccard >= threshold) to the very document kept in its place; chains
    of links never remove a document on a keeper's account it does not itself match. The
    highest-degree node is the family's centre (typically the original its copies were made from),
    so one keeper covers its copies. Memory: the set of claimed ids of one component.
    """
    claimed: set[Any] = set()
    for _, _, node, neighbours in nodes:
        if node in claimed:
            continue
        claimed.add(node)
        for other in neighbours:
            if other not in claimed:
                claimed.add(other)
                counters.increment("fuzzy_dedup/duplicates")
                yield {"id": other, "cluster": node}


# --------------------------------------------------------------------------- storage helpers


def _write_stage(ds: Dataset, out_dir: str) -> tuple[list[str], dict[str, int]]:
    """Write `ds` as parquet under `out_dir`; return (written paths, the run's counters).

    The counters carry the stage's figures (documents, edges, convergence).
    """
    pattern = join(out_dir, "part-{shard:05d}-of-{total:05d}.parquet")
    run = ds.write(pattern, format="parquet").execute()
    return list(run.outputs), dict(run.counters)


def _bytes_of(paths: Sequence[str]) -> int:
    total = 0
    for url in paths:
        fs, path = url_to_fs(url)
        total += fs.size(path)
    return total


def _read_json(url: str) -> dict | None:
    fs, path = url_to_fs(url)
    if not fs.exists(path):
        return None
    with open_url(url, "rb", compression=None) as handle:
        return json.loads(handle.read())


def _write_json(url: str, info: dict) -> dict:
    with atomic_write(url, "wb", compression=None) as handle:
        handle.write(json.dumps(info, indent=1).encode("utf-8"))
    return info


def _clear(url: str) -> None:
    fs, path = url_to_fs(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def _stage(out_dir: str, version: str, build: Any) -> dict:
    """Run `build() -> (paths, counters)` unless `out_dir` already holds a finished run of it.

    Finished means a done marker of this work_dir's settings (`version`); files without one are
    what a killed run left, and are removed before the stage runs again, so they never mix into it.
    """
    marker = read_marker(join(out_dir, _DONE), _STAGE_KIND, version)
    if marker is None:
        _clear(out_dir)
        paths, found = build()
        marker = write_marker(join(out_dir, _DONE), _STAGE_KIND, version, {"paths": paths, "counters": found})
    return marker.payload


def _check_work_dir(work_dir: str, config: FuzzyDedupConfig) -> str:
    """A work_dir belongs to one configuration: resuming with another would mix results.

    Returns the settings' fingerprint, which every stage's done marker carries. ``format`` names the
    layout of the stage files (2: Arrow signature batches with 32-bit sets and batch word hashes,
    candidate edges with "jaccard", star-clustering keepers), so a work_dir left by an older
    version is refused rather than half reused.
    """
    settings = json.loads(json.dumps(asdict(config), default=str))
    for tuning_only in ("batch_size", "max_iterations", "num_shards"):
        settings.pop(tuning_only)
    if settings["hot_bucket_members"] == FuzzyDedupConfig.hot_bucket_members:
        settings.pop("hot_bucket_members")  # the default: work dirs of earlier versions stay valid
    settings["format"] = _WORK_DIR_FORMAT
    version = fingerprint(settings)
    url = join(work_dir, "config.json")
    saved = read_marker(url, _WORK_DIR_KIND)
    if saved is None and marker_exists(url):
        saved_settings: Any = _read_json(url)  # written by an older Zephyr
    else:
        saved_settings = None if saved is None else saved.payload
    if saved_settings is None:
        write_marker(url, _WORK_DIR_KIND, version, settings)
    elif saved_settings != settings:
        raise ValueError(
            f"work_dir {work_dir!r} holds a fuzzy dedup run with other settings:\n"
            f"  saved:     {saved_settings}\n  requested: {settings}\n"
            "Use a fresh work_dir for new settings (or delete the old one)."
        )
    return version


# --------------------------------------------------------------------------- public API


def find_duplicate_clusters(ds: Dataset, *, config: FuzzyDedupConfig, work_dir: str) -> FuzzyDedupReport:
    """Run stages 1-5 now, on the current `execution(...)` backend, and report what they found.

    Reads `ds` once. Resumable: every stage writes under `work_dir` and is skipped on a rerun
    once complete (and the engine resumes a stage's finished shards), so a killed run continues
    where it stopped. A work_dir belongs to one input and one configuration.
    """
    version = _check_work_dir(work_dir, config)
    engine = current_config()
    # Shuffle targets: one per worker unless set; every reducer streams, so memory does not grow
    # with a target's size.
    shards = config.num_shards or engine.num_workers

    sig = _stage(
        join(work_dir, "signatures"),
        version,
        lambda: _write_stage(ds.map_shard(_Sketch(config)), join(work_dir, "signatures")),
    )
    documents = sig["counters"].get("fuzzy_dedup/documents", 0)

    def candidates() -> tuple[list[str], dict[str, int]]:
        if not sig["paths"]:
            return [], {}
        return lsh_candidate_edges(sig["paths"], documents, config=config, out_dir=join(work_dir, "candidates"))

    cand = _stage(join(work_dir, "candidates"), version, candidates)
    edge_paths: list[str] = cand["paths"]
    candidate_edges = cand["counters"].get("fuzzy_dedup/candidate_edges_emitted", 0)
    graph_edges = candidate_edges

    if config.verify:

        def verified() -> tuple[list[str], dict[str, int]]:
            if not edge_paths:
                return [], {}
            # Each candidate edge adds at most two ids to the set of nodes a signature shard loads.
            fits_in_memory = 2 * candidate_edges * _LOOKUP_BYTES <= engine.memory_per_worker // 8
            # Enough partitions that one holds its edges' sets in a quarter of a worker's memory.
            set_bytes = _bytes_of(sig["paths"]) // max(1, documents) + _LOOKUP_BYTES
            partitions = max(shards, -(-2 * candidate_edges * set_bytes // (engine.memory_per_worker // 4)))
            return _write_stage(
                Dataset.from_files([*edge_paths, *sig["paths"]], format="parquet")
                .map_shard(_PackByNode(partitions, tuple(edge_paths) if fits_in_memory else None))
                .group_by(_first, _FanOut(partitions), sort_by=_second, num_shards=shards)
                .group_by(_first, _VerifyPairs(config.threshold), num_shards=shards),
                join(work_dir, "verified"),
            )

        ver = _stage(join(work_dir, "verified"), version, verified)
        edge_paths = ver["paths"]
        candidate_edges = ver["counters"].get("fuzzy_dedup/candidate_edges", 0)
        graph_edges = ver["counters"].get("fuzzy_dedup/edges_verified", 0)

    star_paths, iterations = connected_components(
        edge_paths, work_dir=join(work_dir, "cc"), max_iterations=config.max_iterations, num_shards=shards
    )

    def clusters() -> tuple[list[str], dict[str, int]]:
        if not star_paths:
            return [], {}
        return _write_stage(
            Dataset.from_files([*edge_paths, *star_paths], format="parquet")
            .flat_map(_route_to_components)
            .group_by(_first, _node_summary, sort_by=_tag_other, num_shards=shards)
            .group_by(_first, _star_clusters, sort_by=_priority, num_shards=shards),
            join(work_dir, "clusters"),
        )

    cl = _stage(join(work_dir, "clusters"), version, clusters)
    found = sig["counters"]
    report = FuzzyDedupReport(
        documents=documents,
        documents_without_shingles=found.get("fuzzy_dedup/documents_without_shingles", 0),
        candidate_edges=candidate_edges,
        verified_edges=graph_edges,
        cc_iterations=iterations,
        duplicates=cl["counters"].get("fuzzy_dedup/duplicates", 0),
        clusters_paths=tuple(cl["paths"]),
    )
    _write_json(join(work_dir, "report.json"), asdict(report))
    return report


def lsh_candidate_edges(
    signature_paths: Sequence[str], documents: int, *, config: FuzzyDedupConfig, out_dir: str
) -> tuple[list[str], dict[str, int]]:
    """Stage 2 on its own: LSH candidate edges {"a", "b", "jaccard": None} from signature files.

    `signature_paths` are parquet files of {"id", "bands"} (band keys as int64 bytes, as stage 1
    writes them); `documents` sizes the partitions. Returns (edge files, counters). Public so that
    benchmarks/lsh_skew.py can measure a giant bucket without computing MinHash first.
    """
    engine = current_config()
    shards = config.num_shards or engine.num_workers
    # Enough LSH partitions that one partition's entries fit in a quarter of a worker's memory.
    entries = documents * config.minhash.num_bands
    partitions = max(shards, -(-entries * _ENTRY_BYTES // (engine.memory_per_worker // 4)))
    return _write_stage(
        Dataset.from_files(list(signature_paths), format="parquet", columns=["id", "bands"])
        .map_shard(_PackBands(partitions, config.anchors_per_bucket, config.hot_bucket_members))
        .group_by(_first, _BucketEdges(config.anchors_per_bucket), sort_by=_second, num_shards=shards),
        out_dir,
    )


@dataclass(frozen=True)
class _Annotate:
    """Join combine (or map when nothing was duplicated): add dup_cluster / dup_keep."""

    id_field: str

    def __call__(self, doc: dict, assignment: dict | None = None) -> dict:
        return _annotated(doc, self.id_field, None if assignment is None else assignment["cluster"])


def _annotated(doc: dict, id_field: str, cluster: Any) -> dict:
    out = dict(doc)
    if cluster is None:
        out["dup_cluster"] = doc[id_field]
        out["dup_keep"] = True
    else:
        out["dup_cluster"] = cluster
        out["dup_keep"] = False
        if not out.get("filter_reason"):
            out["filter_reason"] = FUZZY_DUPLICATE_REASON
    return out


@dataclass(frozen=True)
class _AnnotateFromTable:
    """map_shard: load the (id -> cluster) table of non-keepers once per shard, annotate by lookup."""

    paths: tuple[str, ...]
    id_field: str
    # Loaded once per worker process: the engine keeps a stage's objects across its shards.
    _loaded: dict = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, docs: Iterable[dict]) -> Iterator[dict]:
        from zephyr.engine.io import read_batches

        if "table" not in self._loaded:
            table: dict[Any, Any] = {}
            for path in self.paths:
                for batch in read_batches(path, format="parquet", columns=["id", "cluster"]):
                    table.update(zip(batch.column("id").to_pylist(), batch.column("cluster").to_pylist(), strict=False))
            self._loaded["table"] = table
        cluster_of = self._loaded["table"]
        id_field = self.id_field
        for doc in docs:
            yield _annotated(doc, id_field, cluster_of.get(doc[id_field]))


@dataclass(frozen=True)
class _Field:
    name: str

    def __call__(self, record: dict) -> Any:
        return record[self.name]


def annotate_clusters(ds: Dataset, report: FuzzyDedupReport, *, config: FuzzyDedupConfig) -> Dataset:
    """`ds` with ``dup_cluster`` / ``dup_keep`` (and ``filter_reason`` on non-keepers); lazy.

    When the (id, cluster) table of non-keepers fits in an eighth of a worker's memory, every
    shard loads it and annotates by lookup: no shuffle of the documents, and input order is kept.
    Otherwise a `sorted_merge_join` of the documents with that table, so output shards follow the
    join's order, not the input's.
    """
    if not report.clusters_paths:
        return ds.map(_Annotate(config.id_field))
    if report.duplicates * _LOOKUP_BYTES <= current_config().memory_per_worker // 8:
        return ds.map_shard(_AnnotateFromTable(report.clusters_paths, config.id_field))
    return ds.sorted_merge_join(
        Dataset.from_files(list(report.clusters_paths), format="parquet"),
        left_key=_Field(config.id_field),
        right_key=_Field("id"),
        how="left",
        combine=_Annotate(config.id_field),
        num_shards=config.num_shards,
    )


def fuzzy_dedup(ds: Dataset, *, config: FuzzyDedupConfig = FuzzyDedupConfig(), work_dir: str) -> Dataset:
    """Find near-duplicate clusters in `ds` now and return `ds` annotated (lazy).

    Every document gets ``dup_cluster`` and ``dup_keep``; follow with
    :func:`drop_fuzzy_duplicates` (or ``.filter(zephyr.operators.keep)``) to remove non-keepers.
    `ds` is read twice (signatures now, annotation later): materialize an expensive upstream
    pipeline first. The run's figures are in ``work_dir/report.json``
    (see :func:`find_duplicate_clusters` to get them as a :class:`FuzzyDedupReport`).

    Example:
        >>> with execution(backend="processes"):
        ...     docs = fuzzy_dedup(Dataset.from_files("docs/*.jsonl.zst"), work_dir="out/fuzzy")
        ...     drop_fuzzy_duplicates(docs).write_jsonl("out/dedup/part-{shard:05d}.jsonl.zst")
    """
    report = find_duplicate_clusters(ds, config=config, work_dir=work_dir)
    return annotate_clusters(ds, report, config=config)


def _is_keeper(doc: dict) -> bool:
    if doc.get("dup_keep", True):
        return True
    counters.increment(f"filter/{FUZZY_DUPLICATE_REASON}")
    return False


def drop_fuzzy_duplicates(ds: Dataset) -> Dataset:
    """Drop documents annotated ``dup_keep=False``; counted as ``filter/fuzzy_duplicate``."""
    return ds.filter(_is_keeper)
