"""Fuzzy (MinHash-LSH) deduplication on the engine: buckets, verification, connected components.

Why it is built this way: the usual single-process clustering step (union-find over every
candidate pair) is where fuzzy dedup stops scaling, and chains of weak LSH links are how it
wipes out unrelated documents. Here every step after the signatures is an engine `group_by`, so
memory stays bounded by the engine's budget whatever the corpus size (one exception: step 5
holds the ids of one connected component at a time), and (with verification) only edges whose
exact Jaccard similarity passes the threshold reach the clustering.

Stages (each writes parquet under `work_dir` and a ``_DONE.json``, so a rerun skips finished work;
the map functions and reducers of stages 1-3 are in :mod:`zephyr.operators.fuzzy_lsh`, of 4-5 in
:mod:`zephyr.operators.fuzzy_graph`):

1. ``signatures/``  one row per document with shingles: id and LSH band keys, written as Arrow
   batches of `batch_size` documents. Documents without words are never duplicates.
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
3. ``sets/``        (with verification) a second pass over the documents computes the sorted set of
   64-bit shingle hashes of each document with a candidate edge, and of no other: every worker holds
   the candidate ids as a sorted array of their 64-bit hashes (8 bytes per id; a Python set of the ids
   took ~200) and skips every other document before hashing its text. A set (8 bytes per shingle)
   outweighs its document's text, and only a few percent of a corpus are candidates (pipeline_scale's
   4 GB corpus: 79,846 of 1,047,906 documents, 394 MB of sets); computed for every document, sets were
   22 GB for its 16 GB corpus, which verification's shuffle then carried through scratch: that run
   filled the disk. The old Python set fit an eighth of a 1 GB worker up to ~335k emitted candidate
   edges (284k at 4 GB, past it at 16 GB); the hashes fit up to ~3.9M (17 bytes per edge end while the
   array is built). Beyond that the documents are read in passes (``sets/pass-KKK-of-NNN/``, a stage
   each), pass k for the ids whose hash is k modulo the pass count: memory stays within its share and
   only candidates get sets, for one more read of the documents per pass (logged as a warning).
   ``verified/``    `group_by` node partition over the candidate edges and the sets files together
   (one `from_files` reads both: the engine's union) sends each node's shingle set to its edges
   (once per distinct edge: a pair found in several bands arrives repeated); `group_by` edge
   partition then computes the Jaccard similarity of the two sets of each edge and keeps edges >=
   `threshold`. That is the exact Jaccard of the two documents' word n-gram sets, words as
   :func:`zephyr.operators.minhash.normalize_text` gives them (64-bit shingle hashes: a collision,
   which could only raise a pair's similarity, has probability ~1e-12 per pair of 100 KB
   documents). Both shuffles carry records packed per partition (partitions sized to a quarter of a
   worker's memory), not one per edge or set.
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
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from zephyr import counters
from zephyr.engine.context import current_config
from zephyr.engine.dataset import Dataset
from zephyr.fs import atomic_write, join, open_url, url_to_fs
from zephyr.operators.fuzzy_graph import (
    DONE,
    connected_components,
    node_summary,
    priority,
    route_to_components,
    star_clusters,
    write_stage,
)
from zephyr.operators.fuzzy_lsh import (
    BucketEdges,
    CandidateSets,
    FanOut,
    PackBands,
    PackByNode,
    Sketch,
    VerifyPairs,
    first,
    second,
    tag_other,
)
from zephyr.operators.minhash import MinHashConfig
from zephyr.staged import StagedWork
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

log = logging.getLogger(__name__)

FUZZY_DUPLICATE_REASON = "fuzzy_duplicate"
"""`filter_reason` of documents that are near-duplicates of their cluster's keeper."""

_WORK_DIR_FORMAT = 3
# Done markers (`zephyr.versioning`): a stage's carries the work_dir settings' fingerprint.
_STAGE_KIND = "fuzzy-dedup-stage"
_WORK_DIR_KIND = "fuzzy-dedup-work-dir"
_LOOKUP_BYTES = 200  # memory per entry of an in-memory id table (set or dict slot, id strings)
# Memory per end of an emitted candidate edge while `candidate_id_hashes` builds its sorted array: the
# 8-byte hash, a 1-byte "first of its value" mask and the 8-byte unique copy (8 per distinct id once built).
_CANDIDATE_ID_BYTES = 17
# Memory per (bucket key, document) entry in an LSH partition reducer, ids included: each entry's id is a
# str object of its own (~100 bytes for a 47-character record id), the partition's distinct ids are
# sorted and ranked in a dict. Measured (benchmarks/pipeline_scale.py, 40-character ids): the fuzzy step's
# peak RSS grew ~290 bytes per entry of its largest partition (376, 512 and 955 MB at 0.25, 1 and 4 GB
# with the 96 bytes assumed before: 0.23, 0.92 and 2.45 million entries per partition).
_ENTRY_BYTES = 300


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


# --------------------------------------------------------------------------- storage helpers


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


def _stage(out_dir: str, version: str, build: Any) -> dict:
    """Run `build() -> (paths, counters)` unless `out_dir` already holds a finished run of it.

    Finished means a done marker of this work_dir's settings (`version`); files without one are
    what a killed run left, and are removed before the stage runs again, so they never mix into it.
    """

    def built() -> dict[str, Any]:
        paths, found = build()
        return {"paths": paths, "counters": found}

    return StagedWork(join(out_dir, DONE), _STAGE_KIND, version).run(built, clear_first=out_dir)


def _check_work_dir(work_dir: str, config: FuzzyDedupConfig) -> str:
    """A work_dir belongs to one configuration: resuming with another would mix results.

    Returns the settings' fingerprint, which every stage's done marker carries. ``format`` names the
    layout of the stage files (3: Arrow signature batches of band keys, 64-bit sets of candidates in
    sets/, candidate edges with "jaccard", star-clustering keepers; 2 had 32-bit sets beside every
    signature), so a work_dir left by an older version is refused rather than half reused. Sets now lie
    in sets/pass-KKK-of-NNN/ (the same sets): a format-3 work_dir's sets/ files are redone if its
    verification did not finish, and unused if it did.
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

    Reads `ds` once, and with verification a second time for the candidate documents' shingle sets (more
    times only when the candidate ids' hashes pass a worker's memory share: step 3 of the module docstring).
    Resumable: every stage writes under `work_dir` and is skipped on a rerun once complete (and the
    engine resumes a stage's finished shards), so a killed run continues where it stopped. A work_dir
    belongs to one input and one configuration.
    """
    version = _check_work_dir(work_dir, config)
    engine = current_config()
    # Shuffle targets: one per worker unless set; every reducer streams, so memory does not grow
    # with a target's size.
    shards = config.num_shards or engine.num_workers

    sketch = Sketch(config.minhash, config.id_field, config.text_field, config.batch_size)
    sig = _stage(
        join(work_dir, "signatures"),
        version,
        lambda: write_stage(ds.map_shard(sketch), join(work_dir, "signatures")),
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
            set_paths, with_sets = _candidate_sets(ds, config, work_dir, version, edge_paths, candidate_edges)
            # Enough partitions that one holds its edges' sets in a quarter of a worker's memory.
            set_bytes = _bytes_of(set_paths) // max(1, with_sets) + _LOOKUP_BYTES
            partitions = max(shards, -(-2 * candidate_edges * set_bytes // (engine.memory_per_worker // 4)))
            return write_stage(
                Dataset.from_files([*edge_paths, *set_paths], format="parquet")
                .map_shard(PackByNode(partitions))
                .group_by(first, FanOut(partitions), sort_by=second, num_shards=shards)
                .group_by(first, VerifyPairs(config.threshold), num_shards=shards),
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
        return write_stage(
            Dataset.from_files([*edge_paths, *star_paths], format="parquet")
            .flat_map(route_to_components)
            .group_by(first, node_summary, sort_by=tag_other, num_shards=shards)
            .group_by(first, star_clusters, sort_by=priority, num_shards=shards),
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


def set_passes(candidate_edges: int, memory_per_worker: int) -> int:
    """Passes of step 3's second read of the documents: one unless the candidate ids' hashes (at most two
    per emitted edge, `_CANDIDATE_ID_BYTES` each while the array is built) pass an eighth of a worker's
    memory; then each pass loads and serves one residue class of the hashes."""
    return max(1, -(-2 * candidate_edges * _CANDIDATE_ID_BYTES // (memory_per_worker // 8)))


def _candidate_sets(
    ds: Dataset, config: FuzzyDedupConfig, work_dir: str, version: str, edge_paths: Sequence[str], edges: int
) -> tuple[list[str], int]:
    """Step 3's ``sets/``: the candidate documents' shingle sets; returns (files, documents with a set).

    Each pass is a stage of its own (``sets/pass-KKK-of-NNN/``), so a killed run keeps its finished passes;
    folders of another plan (other memory settings, an older layout) are removed first.
    """
    memory = current_config().memory_per_worker
    passes = set_passes(edges, memory)
    if passes > 1:
        log.warning(
            "fuzzy dedup: the hashes of up to %s candidate ids pass an eighth of memory_per_worker (%s MB): "
            "reading the documents %d times for their shingle sets, one share of the ids each; a larger "
            "memory_per_worker reads them once",
            f"{2 * edges:,}",
            memory >> 20,
            passes,
        )
    sets_dir = join(work_dir, "sets")
    names = [f"pass-{k:03d}-of-{passes:03d}" for k in range(passes)]
    fs, path = url_to_fs(sets_dir)
    if fs.exists(path):
        for entry in fs.ls(path, detail=False):
            if entry.rstrip("/").rsplit("/", 1)[-1] not in names:
                fs.rm(entry, recursive=True)
    paths: list[str] = []
    with_sets = 0
    for k, name in enumerate(names):
        out = join(sets_dir, name)
        sets = CandidateSets(
            config.minhash, config.id_field, config.text_field, config.batch_size, tuple(edge_paths), passes, k
        )
        done = _stage(out, version, lambda out=out, sets=sets: write_stage(ds.map_shard(sets), out))
        paths.extend(done["paths"])
        with_sets += done["counters"].get("fuzzy_dedup/sets", 0)
    return paths, with_sets


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
    return write_stage(
        Dataset.from_files(list(signature_paths), format="parquet", columns=["id", "bands"])
        .map_shard(PackBands(partitions, config.anchors_per_bucket, config.hot_bucket_members))
        .group_by(first, BucketEdges(config.anchors_per_bucket), sort_by=second, num_shards=shards),
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
    `ds` is read two or three times (signatures and candidates' sets now, annotation later):
    materialize an expensive upstream pipeline first. The run's figures are in ``work_dir/report.json``
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
