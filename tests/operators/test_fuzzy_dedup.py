"""Fuzzy dedup on the engine: connected components, quality on planted near-duplicates of real
text, determinism across shard and worker counts, resume, annotations and the filter."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from minhash_corpus import (
    article_chunks,
    exact_similar_pairs,
    load_article_bodies,
    plant_near_duplicates,
    recombined_documents,
    reference_jaccard,
    reference_shingles,
    score_clusters,
)

from zephyr import Dataset, execution
from zephyr.engine.io import read_records
from zephyr.errors import BadInputError
from zephyr.operators import keep
from zephyr.operators.fuzzy_dedup import (
    FUZZY_DUPLICATE_REASON,
    FuzzyDedupConfig,
    connected_components,
    drop_fuzzy_duplicates,
    find_duplicate_clusters,
    fuzzy_dedup,
)
from zephyr.operators.minhash import jaccard, shingle_set


@pytest.fixture
def local(scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False) as config:
        yield config


@pytest.fixture(scope="module")
def articles(shared_data) -> list[str]:
    return load_article_bodies(shared_data / "aeb-dev" / "ground-truth.json")


@pytest.fixture(scope="module")
def small_corpus(articles) -> list[dict]:
    """~300 documents: every ~2 KB chunk of the 60 real articles plus planted edited copies."""
    return plant_near_duplicates(article_chunks(articles), seed=0)


def _clusters(records: list[dict]) -> dict[str, str]:
    return {r["id"]: r["dup_cluster"] for r in records}


# --------------------------------------------------------------------------- connected components


def _union_find(edges, nodes):
    parent = {n: n for n in nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {n: find(n) for n in nodes}


def _components(paths) -> dict:
    if not paths:
        return {}
    assigned = {}
    for record in Dataset.from_files(paths).collect():
        assert record["b"] not in assigned, "every member appears in exactly one star edge"
        assert record["a"] < record["b"]
        assigned[record["b"]] = record["a"]
    return assigned


@pytest.mark.parametrize("kind", ["chain", "random-int", "random-str"])
def test_connected_components_match_union_find(local, tmp_path, kind):
    rng = random.Random(kind)
    n = 300
    if kind == "chain":  # a long path in shuffled id order: the slow case for label propagation
        order = list(range(n))
        rng.shuffle(order)
        edges = [(order[i], order[i + 1]) for i in range(n - 1)]
    else:
        edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(260)]
        edges = [(a, b) for a, b in edges if a != b]
        edges += edges[:20]  # repeated edges are fine
    if kind == "random-str":
        edges = [(f"n{a:04d}", f"n{b:04d}") for a, b in edges]
    nodes = {x for e in edges for x in e}
    truth = _union_find(edges, nodes)
    results = []
    for shards in (1, 4):
        paths, rounds = connected_components(
            Dataset.from_list([{"a": a, "b": b} for a, b in edges], num_shards=shards),
            work_dir=str(tmp_path / f"cc-{shards}"),
            num_shards=shards,
        )
        star = _components(paths)
        assert {x: star.get(x, x) for x in nodes} == truth
        results.append((star, rounds))
    assert results[0] == results[1]  # same stars and same number of rounds for 1 and 4 shards
    assert 2 <= results[0][1] <= 12


def test_connected_components_resume_per_iteration(local, tmp_path):
    edges = [{"a": i, "b": i + 1} for i in range(0, 60)]
    work = tmp_path / "cc"
    paths, rounds = connected_components(Dataset.from_list(edges, num_shards=2), work_dir=str(work))
    assert rounds >= 3
    first_round = sorted((work / "iter-0001").glob("part-*"))
    assert first_round
    stamp = [p.stat().st_mtime_ns for p in first_round]
    # Forget the last two rounds, as if the run had been killed: the rerun redoes only those.
    for i in (rounds - 1, rounds):
        (work / f"iter-{i:04d}" / "_DONE.json").unlink()

    def must_not_run(_):
        raise AssertionError("completed rounds must not be recomputed")

    paths_again, rounds_again = connected_components(
        Dataset.from_list(edges, num_shards=2).map(must_not_run), work_dir=str(work)
    )
    assert rounds_again == rounds and _components(paths_again) == _components(paths)
    assert [p.stat().st_mtime_ns for p in first_round] == stamp
    assert _components(paths)[60] == 0


def test_connected_components_of_no_edges(local, tmp_path):
    paths, rounds = connected_components(Dataset.from_list([]), work_dir=str(tmp_path / "cc"))
    # an empty shard writes its (empty) file (#17 item 8): no component rows
    assert sum(1 for p in paths for _ in read_records(p)) == 0 and rounds == 1
    assert connected_components([], work_dir=str(tmp_path / "cc2")) == ([], 1)


# --------------------------------------------------------------------------- quality


def test_precision_recall_on_planted_near_duplicates(local, tmp_path, articles):
    """Real article text (chunks plus sentence recombinations), planted copies at known edit rates,
    exact Jaccard ground truth at 0.8. Targets: precision >= 0.98 with verification, recall >= 0.95."""
    base = article_chunks(articles) + recombined_documents(articles, 500, seed=3)
    docs = plant_near_duplicates(base, seed=11)
    truth = exact_similar_pairs(docs, threshold=0.8)
    assert len(docs) > 900 and len(truth) > 250
    scores = {}
    for verify in (True, False):
        out = fuzzy_dedup(
            Dataset.from_list(docs, num_shards=4),
            config=FuzzyDedupConfig(verify=verify),
            work_dir=str(tmp_path / f"verify-{verify}"),
        ).collect()
        assert len(out) == len(docs)
        scores[verify] = score_clusters(_clusters(out), truth)
    print("\nwith verification:   ", scores[True])
    print("without verification:", scores[False])
    verified = scores[True]
    # the pipeline's hashed shingle sets give the oracle's string Jaccard on every planted pair
    text = {d["id"]: d["text"] for d in docs}
    for a, b in list(truth)[:200]:
        assert jaccard(shingle_set(text[a]), shingle_set(text[b])) == pytest.approx(truth[(a, b)], abs=1e-12)
    # every removed document matches the document kept in its place at >= 0.8 (exact ground truth)
    assert verified.removal_precision == 1.0 and verified.removed > 200
    assert verified.closure_precision >= 0.98  # clusters never join documents that no >=0.8 chain links
    assert verified.recall >= 0.95 and verified.closure_recall >= 0.95
    # strict pairs also count sibling copies of one keeper, which may be < 0.8 with each other
    assert verified.precision >= 0.9
    # verification is what keeps LSH false positives (pairs at J 0.5-0.8) away from keepers
    assert scores[False].removal_precision < verified.removal_precision - 0.1
    assert scores[False].closure_precision < verified.closure_precision - 0.1


def _chain(articles: list[str], links: int) -> list[dict]:
    """links + 1 documents, each a copy of the previous with ~1.5% of its words replaced."""
    rng = random.Random(5)
    text = article_chunks(articles)[3]
    vocabulary = text.split()
    docs = []
    for i in range(links + 1):
        docs.append({"id": f"c{i}", "text": text})
        words = text.split()
        for _ in range(max(1, len(words) * 15 // 1000)):
            words[rng.randrange(len(words))] = rng.choice(vocabulary)
        text = " ".join(words)
    return docs


def test_removed_documents_match_their_keeper_not_just_a_chain(local, tmp_path, articles):
    """A chain c0 - c1 - ... - c5 of >= 0.8 links whose ends are far below 0.8: connected components
    put all in one cluster, but no document may be removed on account of a keeper it does not match."""
    docs = _chain(articles, 5)
    sets = {d["id"]: shingle_set(d["text"]) for d in docs}
    truth = exact_similar_pairs(docs, threshold=0.8)
    assert ("c0", "c1") in truth and ("c0", "c5") not in truth and len(truth) < 15  # a chain, not a clique
    out = fuzzy_dedup(Dataset.from_list(docs, num_shards=2), work_dir=str(tmp_path / "w")).collect()
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["cc_iterations"] >= 1 and report["verified_edges"] == len(truth)
    kept = {d["id"] for d in out if d["dup_keep"]}
    removed = [d for d in out if not d["dup_keep"]]
    assert removed and len(kept) >= 2  # one component, more than one keeper
    for doc in removed:
        assert doc["dup_cluster"] in kept and doc["filter_reason"] == FUZZY_DUPLICATE_REASON
        assert jaccard(sets[doc["id"]], sets[doc["dup_cluster"]]) >= 0.8
    # every document, kept or not, is within 0.8 of a kept one (or kept itself): nothing unmatched is lost
    for doc in out:
        assert doc["dup_keep"] or any(jaccard(sets[doc["id"]], sets[k]) >= 0.8 for k in kept)


def test_verification_decides_on_the_shingles_not_on_colliding_hashes(local, tmp_path):
    """Two documents share 4 of their 6 distinct word 5-grams (Jaccard 0.667): never duplicates. Their
    one differing 5-gram each (ending in w269381 / w274365) hash to the same top 32 bits (found by a
    birthday search), so with 32-bit shingle sets verification saw identical sets (1.0) and removed one."""
    prefix = "alpha beta gamma delta the river keeps flowing"
    docs = [{"id": "a", "text": f"{prefix} w269381"}, {"id": "b", "text": f"{prefix} w274365"}]
    a, b = reference_shingles(docs[0]["text"]), reference_shingles(docs[1]["text"])
    assert reference_jaccard(a, b) == pytest.approx(4 / 6)
    sa, sb = shingle_set(docs[0]["text"]), shingle_set(docs[1]["text"])
    assert jaccard(sa, sb) == pytest.approx(4 / 6)
    assert set((sa >> 32).tolist()) == set((sb >> 32).tolist())  # the planted 32-bit collision
    out = fuzzy_dedup(Dataset.from_list(docs), work_dir=str(tmp_path / "w")).collect()
    assert all(d["dup_keep"] for d in out)
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["candidate_edges"] == 1 and report["verified_edges"] == 0


# --------------------------------------------------------------------------- determinism


def test_identical_clusters_for_1_3_and_8_shards(local, tmp_path, small_corpus):
    results = []
    for shards in (1, 3, 8):
        out = fuzzy_dedup(
            Dataset.from_list(small_corpus, num_shards=shards),
            config=FuzzyDedupConfig(num_shards=shards),
            work_dir=str(tmp_path / f"s{shards}"),
        ).collect()
        results.append(_clusters(out))
        report = json.loads((tmp_path / f"s{shards}" / "report.json").read_text())
        assert report["documents"] == len(small_corpus) and report["cc_iterations"] >= 1
    assert results[0] == results[1] == results[2]
    assert len(set(results[0].values())) < len(small_corpus)  # there were duplicates to find


@pytest.mark.slow
def test_processes_backend_gives_the_same_clusters(tmp_path, scratch, small_corpus):
    docs = small_corpus[:120]
    outs = []
    for backend, workers in (("local", 1), ("processes", 2)):
        with execution(backend=backend, workers=workers, scratch=scratch, summary=False, progress=False):
            outs.append(
                _clusters(
                    fuzzy_dedup(Dataset.from_list(docs, num_shards=3), work_dir=str(tmp_path / backend)).collect()
                )
            )
    assert outs[0] == outs[1]


# --------------------------------------------------------------------------- annotations, filter, resume


def test_annotations_keepers_and_filter(local, tmp_path, small_corpus):
    annotated = fuzzy_dedup(Dataset.from_list(small_corpus, num_shards=2), work_dir=str(tmp_path / "w"))
    out = annotated.collect()
    by_cluster: dict[str, list[dict]] = {}
    for doc in out:
        by_cluster.setdefault(doc["dup_cluster"], []).append(doc)
        assert {"id", "text", "source", "metadata"} <= doc.keys()
    for cluster, members in by_cluster.items():
        keepers = [d for d in members if d["dup_keep"]]
        assert len(keepers) == 1 and keepers[0]["id"] == cluster
        keeper_set = shingle_set(keepers[0]["text"])
        for d in members:
            assert d.get("filter_reason") == (None if d["dup_keep"] else FUZZY_DUPLICATE_REASON)
            if not d["dup_keep"]:  # every removed document is verified against its own keeper
                assert jaccard(shingle_set(d["text"]), keeper_set) >= 0.8
    run = drop_fuzzy_duplicates(annotated).execute()
    assert sorted(d["id"] for d in run.outputs) == sorted(by_cluster)
    assert run.counters[f"filter/{FUZZY_DUPLICATE_REASON}"] == len(out) - len(by_cluster)
    assert len(annotated.filter(keep).collect()) == len(by_cluster)
    # a planted exact copy always lands in its original's cluster
    first = {}
    for doc in out:
        meta = doc["metadata"]
        if meta["edit_rate"] == 0.0:
            first.setdefault(meta["family"], set()).add(doc["dup_cluster"])
    assert any(len(clusters) == 1 for clusters in first.values())


def test_rerun_resumes_from_work_dir_and_rejects_other_settings(local, tmp_path, small_corpus):
    work = str(tmp_path / "w")
    docs = Dataset.from_list(small_corpus[:80], num_shards=2)
    report = find_duplicate_clusters(docs, config=FuzzyDedupConfig(), work_dir=work)
    os.remove(Path(work) / "clusters" / "_DONE.json")

    def must_not_run(_):
        raise AssertionError("signatures must not be recomputed")

    again = find_duplicate_clusters(docs.map(must_not_run), config=FuzzyDedupConfig(), work_dir=work)
    assert again == report
    with pytest.raises(ValueError, match="other settings"):
        find_duplicate_clusters(docs, config=FuzzyDedupConfig(threshold=0.7), work_dir=work)


def test_files_a_killed_stage_left_never_join_the_rerun(local, tmp_path, small_corpus):
    """A stage without its done marker was cut short: the rerun starts from an empty stage directory,
    so files of the killed attempt (other shard counts, other names) are not mixed into its output."""
    work = tmp_path / "w"
    docs = Dataset.from_list(small_corpus[:80], num_shards=2)
    report = find_duplicate_clusters(docs, config=FuzzyDedupConfig(), work_dir=str(work))
    os.remove(work / "clusters" / "_DONE.json")
    stray = work / "clusters" / "part-00007-of-00009.parquet"
    stray.write_bytes((work / "clusters" / Path(report.clusters_paths[0]).name).read_bytes())
    again = find_duplicate_clusters(docs, config=FuzzyDedupConfig(), work_dir=str(work))
    assert again == report
    assert not stray.exists()
    on_disk = sorted(str(p) for p in (work / "clusters").glob("part-*.parquet"))
    assert on_disk == sorted(again.clusters_paths)


def test_empty_and_short_documents(local, tmp_path):
    docs = [
        {"id": "a", "text": ""},
        {"id": "b", "text": "!!!"},
        {"id": "c", "text": "Hello there"},
        {"id": "d", "text": "hello, THERE."},
        {"id": "e", "text": "something else entirely"},
    ]
    out = {d["id"]: d for d in fuzzy_dedup(Dataset.from_list(docs), work_dir=str(tmp_path / "w")).collect()}
    assert out["d"]["dup_cluster"] == "c" and not out["d"]["dup_keep"]
    # documents without words have nothing to compare: each stays its own keeper
    assert out["a"]["dup_keep"] and out["b"]["dup_keep"] and out["b"]["dup_cluster"] == "b"
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["documents_without_shingles"] == 2 and report["duplicates"] == 1


def test_integer_ids_and_no_duplicates(local, tmp_path, articles):
    docs = [{"id": i, "text": t} for i, t in enumerate(article_chunks(articles)[:20])]
    out = fuzzy_dedup(Dataset.from_list(docs), work_dir=str(tmp_path / "w")).collect()
    assert sorted((d["id"], d["dup_cluster"], d["dup_keep"]) for d in out) == [(i, i, True) for i in range(20)]
    # with a copy (ids beyond 2^32, so the int paths of every stage see real numbers)
    docs = [{"id": 10**12 + d["id"], "text": d["text"]} for d in docs] + [{"id": 10**13, "text": docs[3]["text"]}]
    out = fuzzy_dedup(Dataset.from_list(docs, num_shards=3), work_dir=str(tmp_path / "w2")).collect()
    removed = [(d["id"], d["dup_cluster"]) for d in out if not d["dup_keep"]]
    assert removed == [(10**13, 10**12 + 3)] and len(out) == 21


def test_bad_documents_name_the_field(local, tmp_path):
    """Bad input, named with its shard: never retried (it was a TypeError, retried as the user's code)."""
    with pytest.raises(BadInputError, match=r"shard 0 \(list\[0:1\]\): fuzzy dedup expects a str.*text_field"):
        fuzzy_dedup(Dataset.from_list([{"id": "x", "body": "no text field"}]), work_dir=str(tmp_path / "a"))
    with pytest.raises(BadInputError, match="unique str or int id in field 'id'.*id_field"):
        fuzzy_dedup(Dataset.from_list([{"text": "no id"}]), work_dir=str(tmp_path / "b"))
    with pytest.raises(ValueError, match="threshold"):
        FuzzyDedupConfig(threshold=0)


def test_memory_bounded_paths_give_the_same_result(local, tmp_path, small_corpus, monkeypatch):
    """Small memory per worker: many LSH and verification partitions, tiny packed records,
    verification ships every set, annotation by a join instead of an in-memory lookup table.
    Same clusters, same annotations (up to order)."""
    from zephyr.operators import fuzzy_dedup as module
    from zephyr.operators import fuzzy_lsh

    def run(name: str) -> list[tuple]:
        out = fuzzy_dedup(Dataset.from_list(small_corpus, num_shards=3), work_dir=str(tmp_path / name)).collect()
        return sorted((d["id"], d["dup_cluster"], d["dup_keep"], d.get("filter_reason")) for d in out)

    roomy = run("roomy")
    monkeypatch.setattr(module, "_ENTRY_BYTES", 1 << 20)  # 256 entries per LSH partition: ~17 partitions
    monkeypatch.setattr(module, "_LOOKUP_BYTES", 1 << 30)  # no table fits: route all sets, join to annotate
    monkeypatch.setattr(fuzzy_lsh, "FLUSH_ITEMS", 3)  # packed shuffle records of at most 3 entries
    tight = run("tight")
    assert tight == roomy and sum(1 for r in roomy if not r[2]) > 50
    report = json.loads((tmp_path / "tight" / "report.json").read_text())
    assert report["duplicates"] == sum(1 for r in tight if not r[2])


def _sets_and_candidates(work: Path) -> tuple[list, set, int]:
    """(ids of the documents given a shingle set, every candidate edge's ends, edges the LSH emitted)."""
    import pyarrow.parquet as pq

    with_sets = [i for path in sorted(work.glob("sets/**/*.parquet")) for i in pq.read_table(path)["id"].to_pylist()]
    nodes = set()
    for path in (work / "candidates").glob("*.parquet"):
        edges = pq.read_table(path, columns=["a", "b"])
        nodes.update(edges["a"].to_pylist(), edges["b"].to_pylist())
    emitted = json.loads((work / "candidates" / "_DONE.json").read_text())["payload"]["counters"]
    return with_sets, nodes, emitted["fuzzy_dedup/candidate_edges_emitted"]


def test_only_candidate_documents_get_sets_at_any_memory(tmp_path, scratch, articles, monkeypatch, caplog):
    """Step 3 computes the shingle sets of the candidate documents and no others, whatever the memory.

    With 16 MB per worker this corpus's candidate ids (> 5,243 emitted edges, at the ~200 bytes per id of a
    Python set) passed the eighth of memory the old code allowed, so it computed every document's set and
    carried all through verification: 22 GB of sets for pipeline_scale's 16 GB corpus, which filled the disk.
    Now their 64-bit hashes fit (17 bytes per edge end); when even those do not (forced here), the documents
    are read in passes, each for one share of the ids. Clusters equal those of a roomy run's."""
    from zephyr.operators import fuzzy_dedup as module

    # families of up to 13 close copies (many candidate edges from few documents), and distinct documents
    families = plant_near_duplicates(
        article_chunks(articles)[:100], dup_fraction=1.0, max_copies=12, edit_rates=(0.0, 0.005, 0.01, 0.02), seed=5
    )
    others = recombined_documents(articles, 200, seed=9)
    docs = families + [{"id": f"other-{i:04d}", "text": text} for i, text in enumerate(others)]
    config = FuzzyDedupConfig(num_shards=8)  # 8 LSH partitions: a pair is emitted once per partition it is in

    def run(name: str, memory: int) -> list[tuple]:
        with execution(backend="local", scratch=scratch, memory_per_worker=memory, summary=False, progress=False):
            ds = Dataset.from_list(docs, num_shards=3)
            out = fuzzy_dedup(ds, config=config, work_dir=str(tmp_path / name)).collect()
        return sorted((d["id"], d["dup_cluster"], d["dup_keep"]) for d in out)

    roomy = run("roomy", 1 << 30)
    assert sum(1 for r in roomy if not r[2]) > 500
    tight = run("tight", 16 << 20)
    with_sets, nodes, emitted = _sets_and_candidates(tmp_path / "tight")
    assert 2 * emitted * 200 > (16 << 20) // 8  # the regime where the old code computed every set
    assert len(with_sets) == len(set(with_sets)) and set(with_sets) == nodes
    assert len(nodes) < len(docs) - 150  # most of the other documents are no candidates
    assert sorted((tmp_path / "tight" / "sets").iterdir()) == [tmp_path / "tight" / "sets" / "pass-000-of-001"]
    assert tight == roomy

    # hashes beyond the memory share: three passes over the documents, each for a third of the ids
    monkeypatch.setattr(module, "set_passes", lambda edges, memory: 3)
    with caplog.at_level("WARNING", logger=module.__name__):
        passes = run("passes", 16 << 20)
    assert "reading the documents 3 times" in caplog.text
    with_sets, nodes, _ = _sets_and_candidates(tmp_path / "passes")
    assert len(with_sets) == len(set(with_sets)) and set(with_sets) == nodes
    assert passes == roomy
    # killed before verification, with pass 2 of 3 unfinished: the finished passes are kept, not redone
    work = tmp_path / "passes"
    finished = sorted(p.stat().st_mtime_ns for p in (work / "sets" / "pass-000-of-003").iterdir())
    for stage in ("verified", "cc", "clusters", "sets/pass-001-of-003/_DONE.json"):
        path = work / stage
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert run("passes", 16 << 20) == roomy
    assert sorted(p.stat().st_mtime_ns for p in (work / "sets" / "pass-000-of-003").iterdir()) == finished
    assert sorted(_sets_and_candidates(work)[0]) == sorted(with_sets)


def test_hot_lsh_buckets_stream_and_give_the_same_edges_and_clusters(local, tmp_path, small_corpus):
    """A bucket holding a large share of the corpus (one boilerplate page copied 400 times, plus
    lightly edited copies) is linked as its members stream by, not sorted in one reducer's memory;
    the candidate edges, and so the clusters, are the ones the sorted path gives."""
    page = small_corpus[0]["text"]
    words = page.split()
    copies = [{"id": f"copy-{i:04d}", "text": page} for i in range(400)]
    edited = [{"id": f"edit-{i:04d}", "text": " ".join(words[:-3] + [f"note{i}", "x", "y"])} for i in range(60)]
    corpus = small_corpus + copies + edited
    random.Random(1).shuffle(corpus)

    def run(name: str, hot: int) -> tuple[list[tuple], set[tuple], dict]:
        config = FuzzyDedupConfig(num_shards=3, hot_bucket_members=hot)
        out = fuzzy_dedup(Dataset.from_list(corpus, num_shards=3), config=config, work_dir=str(tmp_path / name))
        clusters = sorted((d["id"], d["dup_cluster"], d["dup_keep"]) for d in out.collect())
        candidates = tmp_path / name / "candidates"
        edges = {(r["a"], r["b"]) for r in Dataset.from_files(str(candidates / "*.parquet")).collect()}
        marker = json.loads((candidates / "_DONE.json").read_text())
        return clusters, edges, marker["payload"]["counters"]

    sorted_path, sorted_edges, sorted_counts = run("sorted", 10**9)
    streamed, streamed_edges, streamed_counts = run("hot", 16)
    assert sorted_counts.get("fuzzy_dedup/hot_bucket_members", 0) == 0
    assert streamed_counts["fuzzy_dedup/hot_bucket_members"] > 14 * 300  # most copies' entries never sorted
    assert streamed_edges == sorted_edges
    assert streamed == sorted_path
    kept = {cluster for doc_id, cluster, _ in sorted_path if doc_id.startswith("copy-")}
    assert len(kept) == 1  # the 400 copies collapse to one keeper
