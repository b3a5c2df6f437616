"""Exact dedup on the engine: cross-shard duplicates, first-by-order, same result for 1/3/8 shards."""

from __future__ import annotations

import json

import pytest

from zephyr import Dataset, execution
from zephyr.operators.exact_dedup import dedup_documents, dedup_paragraphs, normalize_for_hash, text_hash


@pytest.fixture(scope="module")
def articles(shared_data):
    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    return [truth[k]["articleBody"] for k in sorted(truth)[:8]]


@pytest.fixture
def corpus(articles):
    """Real article bodies with planted duplicates far apart, so they land in different shards."""
    docs = [{"id": f"doc-{i:03d}", "text": t} for i, t in enumerate(articles)]
    docs.append({"id": "doc-100", "text": articles[2].upper().replace("\n", "\n\n  ")})  # reformatted copy
    docs.append({"id": "doc-050", "text": articles[5]})  # exact copy, id sorts before doc-100
    docs.append({"id": "doc-099", "text": articles[2]})  # second copy of 2
    return docs


def test_normalization():
    assert normalize_for_hash("Hello,   WORLD!\n") == "hello world"
    assert text_hash("Ça va? Oui.") == text_hash("ça  va oui")
    assert text_hash("a b") != text_hash("a c")


def _docs_run(corpus, shards, scratch, **kw):
    with execution(backend="local", scratch=scratch, summary=False):
        return dedup_documents(Dataset.from_list(corpus, num_shards=shards), **kw).execute()


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_document_dedup_across_shards(corpus, shards, scratch):
    result = _docs_run(corpus, shards, scratch)
    by_id = {d["id"]: d for d in result.outputs}
    assert len(by_id) == len(corpus)
    dropped = sorted(i for i, d in by_id.items() if not d["dup_keep"])
    assert dropped == ["doc-050", "doc-099", "doc-100"]  # earlier ids win: doc-002, doc-005
    assert all(by_id[i]["filter_reason"] == "exact_duplicate" for i in dropped)
    assert by_id["doc-002"]["dup_count"] == 3 and by_id["doc-002"]["dup_keep"]
    assert by_id["doc-100"]["dup_cluster"] == by_id["doc-002"]["dup_cluster"]
    assert result.counters["dedup/exact_documents_duplicate"] == 3


def test_document_dedup_is_identical_for_1_3_8_shards(corpus, scratch, tmp_path):
    def fingerprint(shards):
        out = _docs_run(corpus, shards, str(tmp_path / f"s{shards}")).outputs
        return sorted((d["id"], d["dup_keep"], d["dup_cluster"], d.get("dup_count")) for d in out)

    assert fingerprint(1) == fingerprint(3) == fingerprint(8)
    # a different input order does not change who is kept: order is by id, not arrival
    shuffled = list(reversed(corpus))
    out = _docs_run(shuffled, 3, scratch).outputs
    assert sorted(d["id"] for d in out if not d["dup_keep"]) == ["doc-050", "doc-099", "doc-100"]


def test_document_dedup_drop_and_custom_order(corpus, scratch):
    kept = _docs_run(corpus, 3, scratch, drop=True).outputs
    assert sorted(d["id"] for d in kept) == [f"doc-{i:03d}" for i in range(8)]
    assert {d["id"]: d["dup_count"] for d in kept}["doc-002"] == 3
    # ordering by a different key changes the winner deterministically
    out = _docs_run(corpus, 3, scratch, order_key=lambda d: (-len(d["text"]), d["id"])).outputs
    winner = next(d for d in out if d.get("dup_count") == 3 and d["dup_keep"])
    assert winner["id"] == "doc-100"  # the reformatted copy is the longest text


def test_paragraph_dedup_across_shards(articles, scratch, tmp_path):
    shared = articles[0].split("\n")[0]
    assert len(shared) > 50
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(articles)]
    docs.append({"id": "d8", "text": "A new opening line of our own, written here.\n" + shared})
    docs.append({"id": "d9", "text": shared.lower() + "\n"})  # nothing new: emptied
    results = {}
    for shards in (1, 3, 8):
        with execution(backend="local", scratch=str(tmp_path / f"p{shards}"), summary=False):
            run = dedup_paragraphs(Dataset.from_list(docs, num_shards=shards)).execute()
        results[shards] = sorted(
            (d["id"], d["text"], tuple(d["dup_paragraphs"]), d.get("filter_reason")) for d in run.outputs
        )
    assert results[1] == results[3] == results[8]
    by_id = {r[0]: r for r in results[3]}
    assert by_id["d0"][1] == articles[0] and by_id["d0"][2] == ()  # first occurrence kept
    assert by_id["d8"][1] == "A new opening line of our own, written here." and by_id["d8"][2] == (1,)
    assert by_id["d9"][3] == "exact_duplicate_paragraphs"
    assert run.counters["dedup/exact_paragraphs_removed"] >= 2


def test_paragraph_dedup_validates_arguments(scratch):
    ds = Dataset.from_list([{"id": "a", "text": "x"}])
    with pytest.raises(ValueError, match="separator"):
        dedup_paragraphs(ds, separator="")
    with pytest.raises(ValueError, match="min_paragraph_chars"):
        dedup_paragraphs(ds, min_paragraph_chars=-1)


def _tied_corpus(articles):
    """Duplicates across shards whose order keys tie (the same id): input order decides the keeper, and
    records that differ only outside the text tell which one was kept."""
    docs = []
    for copy in range(4):
        for i, text in enumerate(articles[:5]):
            docs.append({"id": f"doc-{i}", "text": text if copy % 2 else text.upper(), "copy": copy})
    docs += [{"id": "solo", "text": articles[6], "copy": 0}, {"id": "empty", "text": "", "copy": 0}]
    return docs


@pytest.mark.parametrize("drop", [False, True])
def test_document_dedup_by_lookup_equals_the_whole_document_shuffle(articles, scratch, tmp_path, monkeypatch, drop):
    """The decision pass + lookup gives the record set of the old one-pass shuffle of whole documents
    (forced here by making the duplicates table 'too large'), ties on the order key included."""
    from zephyr.operators import exact_dedup

    docs = _tied_corpus(articles)

    def run(path):
        with execution(backend="local", scratch=str(tmp_path / path), summary=False):
            out = dedup_documents(Dataset.from_list(docs, num_shards=3), drop=drop, num_shards=2).execute()
        return sorted(json.dumps(d, sort_keys=True) for d in out.outputs), out.counters

    by_lookup, lookup_counters = run("lookup")
    monkeypatch.setattr(exact_dedup, "_LOOKUP_BYTES", 1 << 40)
    by_shuffle, shuffle_counters = run("shuffle")
    assert by_lookup == by_shuffle
    assert lookup_counters == shuffle_counters
    kept = [json.loads(d) for d in by_lookup if json.loads(d)["dup_keep"]]
    assert sorted((d["id"], d["copy"]) for d in kept) == sorted(
        [(f"doc-{i}", 0) for i in range(5)] + [("solo", 0), ("empty", 0)]
    )


def test_document_dedup_shuffles_no_text(articles, scratch, monkeypatch):
    """Nothing that goes into a shuffle holds a document's text: only the hash, the rank (order key and
    position, encoded) and the id; and the decision shuffle takes them as Arrow batches."""
    from zephyr.engine.shuffle import ScatterWriter

    seen, records = [], []
    original, original_batch = ScatterWriter.add, ScatterWriter.add_batch

    def spy(self, record):
        records.append(record)
        return original(self, record)

    def spy_batch(self, batch):
        seen.extend(batch.to_pylist())
        return original_batch(self, batch)

    monkeypatch.setattr(ScatterWriter, "add", spy)
    monkeypatch.setattr(ScatterWriter, "add_batch", spy_batch)
    docs = _tied_corpus(articles)
    with execution(backend="local", scratch=scratch, summary=False):
        out = dedup_documents(Dataset.from_list(docs, num_shards=3)).collect()
    assert len(out) == len(docs) and len(seen) == len(docs) and not records
    texts = {d["text"].encode("utf-8") for d in docs if d["text"]}
    assert not any(text in value for record in seen for value in _strings(record) for text in texts)


def _strings(value):
    if isinstance(value, str):
        yield value.encode("utf-8")
    elif isinstance(value, bytes):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _strings(item)


def test_ascii_fast_path_normalizes_like_the_unicode_path():
    """text_hash takes a bytes path for ASCII text: it must give normalize_for_hash's bytes exactly
    (punctuation vs symbols, the \\x1c-\\x1f separators str.split treats as whitespace, case)."""
    import random

    from zephyr.operators.exact_dedup import _normalized_bytes

    rng = random.Random(0)
    samples = ["", "  ", "A$b+c<d>e^f`g|h~i", "x\x1cy\x1fz\x0bw", "Hello,   WORLD!\n", "a_b-c.d"]
    samples += ["".join(chr(rng.randrange(128)) for _ in range(rng.randrange(60))) for _ in range(3000)]
    for text in samples:
        assert _normalized_bytes(text) == normalize_for_hash(text).encode("utf-8"), repr(text)


def test_unicode_fast_path_normalizes_like_the_regex_path():
    """Non-ASCII text folds only its runs of non-ASCII characters (each with the ASCII character before
    it): NFKC compositions across ASCII and non-ASCII (e + U+0301, Hangul jamo), casefold expansions,
    Unicode punctuation and whitespace, characters beyond the BMP must come out as the regex path's."""
    import random

    from zephyr.operators.exact_dedup import _normalized_bytes

    rng = random.Random(1)
    pool = [chr(c) for c in range(128)] + list("éÉßẞﬁ½²Ⅻ\u0301\u00a0\u2003\u3000\u2028\x85«»—–…¿¡、。「」ǅΣσς😀𝐀𝟘İıK")
    pool += ["e\u0301", "A\u030a", "\u0345", "\u0307", "\u1100", "\u1161", "\u11a8", "한", "ǰ", "ﬀ", "㎏", "µ", "ℌ"]
    pool += ["中文字" * 20, "\u0301" * 30]  # runs past the folding cache's limit
    for _ in range(8000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(1, 60)))
        assert _normalized_bytes(text) == normalize_for_hash(text).encode("utf-8"), repr(text)


def test_document_dedup_hashes_each_document_once_and_leaves_no_files(articles, tmp_path, monkeypatch):
    """The annotation pass reuses the decision pass's hashes (a file per shard, removed once read)."""
    from pathlib import Path

    from zephyr.operators import exact_dedup

    calls = []
    original = exact_dedup.text_hash
    monkeypatch.setattr(exact_dedup, "text_hash", lambda text: calls.append(1) or original(text))
    docs = _tied_corpus(articles)
    scratch = tmp_path / "scratch"
    with execution(backend="local", scratch=str(scratch), summary=False):
        out = dedup_documents(Dataset.from_list(docs, num_shards=3)).collect()
    assert len(out) == len(docs) and len(calls) == len(docs)
    assert not list(Path(scratch).rglob("hashes-*")) and not list(Path(scratch).rglob("exact-dedup-*/*"))


def test_document_dedup_under_dry_run_prints_plans_and_writes_nothing(articles, tmp_path, capsys):
    from pathlib import Path

    docs = _tied_corpus(articles)
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, dry_run=True):
        run = dedup_documents(Dataset.from_list(docs, num_shards=3)).execute()
    assert run.outputs == [] and "HashRank)" in capsys.readouterr().out
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]


def test_document_dedup_leaves_no_folder_whether_run_or_not(articles, tmp_path):
    """The decision pass's folder (the per-shard hash files) goes once the returned dataset is gone:
    after a run (no empty folder left), and when it is never run (no hash files left)."""
    import gc
    from pathlib import Path

    docs = _tied_corpus(articles)
    for run in (True, False):
        scratch = tmp_path / f"scratch-{run}"
        with execution(backend="local", scratch=str(scratch), summary=False):
            marked = dedup_documents(Dataset.from_list(docs, num_shards=3))
            assert list(Path(scratch).rglob("hashes-*"))  # the decision pass ran and kept them
            if run:
                assert len(marked.collect()) == len(docs)
        del marked
        gc.collect()
        assert not list(Path(scratch).rglob("exact-dedup-*")), run


def test_the_duplicates_table_costs_what_the_lookup_threshold_assumes():
    """The annotation pass's table, as a worker unpickles it, holds to `_LOOKUP_BYTES` per entry: the
    threshold above which dedup_documents shuffles whole documents instead assumes it. (The dicts per
    (shard, index) this table replaced took ~240 bytes an entry.)"""
    import pickle
    import random
    import tracemalloc

    import numpy as np

    from zephyr.operators import exact_dedup

    rng = random.Random(0)
    entries = 40_000
    shards = np.array([rng.randrange(300) for _ in range(entries)], np.int64)
    indices = np.arange(entries, dtype=np.int64)  # unique positions
    sizes = np.array([0 if i % 2 else 2 for i in range(entries)], np.int32)
    keepers = [f"doc-{rng.randrange(10**12):012d}" if i % 2 else None for i in range(entries)]
    blob = pickle.dumps(exact_dedup._shard_decisions(shards, indices, sizes, keepers), protocol=5)
    tracemalloc.start()
    table = pickle.loads(blob)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sum(len(d.indices) for d in table.values()) == entries
    assert held <= entries * exact_dedup._LOOKUP_BYTES, held / entries
