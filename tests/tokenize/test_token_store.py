"""Token store: writer/reader round trip, numpy-only reading, verify and inspect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xxhash

from zephyr.tokenize import TokenStore, inspect_store, open_store, token_dtype, verify_store
from zephyr.tokenize.store_write import ShardWriter, completed_shard, write_manifest

TOKENIZER = {
    "name": "test-vocab",
    "source": "none",
    "content_hash": "0" * 32,
    "vocab_size": 50000,
    "bos_token": None,
    "bos_id": None,
    "eos_token": None,
    "eos_id": None,
    "parse_special": False,
}


def _docs(rng: np.random.Generator, n: int, vocab: int) -> list[np.ndarray]:
    return [rng.integers(0, vocab, size=int(rng.integers(0, 40)), dtype=np.uint32) for _ in range(n)]


def _write_store(root: Path, shards: list[list[np.ndarray]], vocab: int = 50000) -> Path:
    dtype = token_dtype(vocab)
    records = []
    for i, docs in enumerate(shards):
        with ShardWriter(
            root, f"shards/{i:05d}", dtype=dtype, vocab_size=vocab, source=f"in-{i}.jsonl", config_hash="abc"
        ) as w:
            w.add(docs[: len(docs) // 2])
            w.add(docs[len(docs) // 2 :])
            records.append(w.close())
    write_manifest(
        root,
        shards=records,
        dtype=dtype,
        tokenizer={**TOKENIZER, "vocab_size": vocab},
        sources=["in-*.jsonl"],
        split="train",
        config={},
        config_hash="abc",
    )
    return root


def test_round_trip_documents_tokens_and_windows(tmp_path):
    rng = np.random.default_rng(0)
    shards = [_docs(rng, 25, 50000), [], _docs(rng, 30, 50000)]
    root = _write_store(tmp_path / "store", shards)
    store = open_store(root)
    all_docs = [d for s in shards for d in s]
    stream = np.concatenate(all_docs)
    assert store.num_documents == len(all_docs) and store.num_tokens == len(stream) and store.num_shards == 3
    assert store.dtype == np.uint16
    for i, d in enumerate(all_docs):
        assert store.document(i).tolist() == d.tolist()
    assert store.document(-1).tolist() == all_docs[-1].tolist()
    assert store.document_lengths().tolist() == [len(d) for d in all_docs]
    assert store.tokens(0, store.num_tokens).tolist() == stream.tolist()
    seq = 7
    assert store.num_windows(seq) == (len(stream) - 1) // seq
    for i in range(store.num_windows(seq)):  # windows cross shard boundaries seamlessly
        assert store.window(i, seq).tolist() == stream[i * seq : i * seq + seq + 1].tolist()
    with pytest.raises(IndexError, match="out of range"):
        store.document(len(all_docs))
    with pytest.raises(IndexError, match="out of range"):
        store.window(store.num_windows(seq), seq)


def test_readable_with_numpy_alone(tmp_path):
    rng = np.random.default_rng(1)
    docs = _docs(rng, 10, 70000)
    root = _write_store(tmp_path / "big", [docs], vocab=70000)
    m = json.loads((root / "manifest.json").read_text())
    assert m["dtype"] == "uint32" and m["documents"] == 10 and m["tokens"] == sum(map(len, docs))
    shard = m["shards"][0]
    tokens = np.memmap(root / shard["path"] / "tokens.bin", dtype=m["dtype"], mode="r")
    ends = np.load(root / shard["path"] / "offsets.npy")
    starts = np.concatenate([[0], ends[:-1]])
    assert [tokens[a:b].tolist() for a, b in zip(starts, ends, strict=False)] == [d.tolist() for d in docs]


def test_failed_writer_leaves_no_shard(tmp_path):
    with (
        pytest.raises(RuntimeError),
        ShardWriter(tmp_path, "shards/00000", dtype=np.uint16, vocab_size=100, source="x", config_hash="h") as w,
    ):
        w.add([np.arange(5, dtype=np.uint32)])
        raise RuntimeError("worker died")
    assert list((tmp_path / "shards" / "00000").iterdir()) == []
    assert completed_shard(tmp_path, "shards/00000", "h") is None
    with pytest.raises(FileNotFoundError, match="not a complete token store"):
        TokenStore(tmp_path)


def test_writer_rejects_ids_outside_vocab(tmp_path):
    with ShardWriter(tmp_path, "s", dtype=np.uint16, vocab_size=100, source="x", config_hash="h") as w:
        with pytest.raises(ValueError, match="vocab_size 100"):
            w.add([np.asarray([5, 100], dtype=np.uint32)])
        w.abort()


def test_completed_shard_requires_same_config(tmp_path):
    root = _write_store(tmp_path / "s", [_docs(np.random.default_rng(2), 5, 50000)])
    assert completed_shard(root, "shards/00000", "abc") is not None
    assert completed_shard(root, "shards/00000", "other-config") is None


def test_verify_reports_each_problem_with_its_shard(tmp_path):
    rng = np.random.default_rng(3)
    root = _write_store(tmp_path / "s", [_docs(rng, 20, 50000), _docs(rng, 20, 50000)])
    assert verify_store(root).ok
    # 1) truncate shard 0's tokens, 2) make shard 1's offsets decrease, 3) lie about the document count
    tb = root / "shards/00000/tokens.bin"
    tb.write_bytes(tb.read_bytes()[:-2])
    ends = np.load(root / "shards/00001/offsets.npy")
    ends[3], ends[4] = ends[4] + 1, ends[3]
    np.save(root / "shards/00001/offsets.npy", ends)
    m = json.loads((root / "manifest.json").read_text())
    m["documents"] += 1
    (root / "manifest.json").write_text(json.dumps(m))
    report = verify_store(root)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "shard shards/00000: tokens.bin has" in text
    assert "shard shards/00001: offsets decrease at document" in text
    assert "manifest documents 41 != sum over shards 40" in text


def test_manifest_records_each_data_files_digest_and_verify_checks_it(tmp_path):
    """A byte changed in place (same size, ids still valid, offsets intact) is caught by the digest alone."""
    rng = np.random.default_rng(4)
    root = _write_store(tmp_path / "s", [_docs(rng, 20, 50000), _docs(rng, 20, 50000)])
    m = json.loads((root / "manifest.json").read_text())
    for shard in m["shards"]:
        for name in ("tokens.bin", "offsets.npy"):
            assert shard["xxh3_64"][name] == xxhash.xxh3_64_hexdigest((root / shard["path"] / name).read_bytes())
    marker = json.loads((root / "shards/00001/shard.json").read_text())  # a zephyr.versioning done marker
    assert marker["kind"] == "token-store-shard" and marker["payload"]["xxh3_64"] == m["shards"][1]["xxh3_64"]
    tokens = np.memmap(root / "shards/00001/tokens.bin", dtype=np.uint16, mode="r+")
    tokens[5] = (int(tokens[5]) + 1) % 50000
    tokens.flush()
    del tokens
    report = verify_store(root)
    assert report.problems == (
        "shard shards/00001: tokens.bin has XXH3-64 digest "
        f"{xxhash.xxh3_64_hexdigest((root / 'shards/00001/tokens.bin').read_bytes())}, "
        f"the manifest says {m['shards'][1]['xxh3_64']['tokens.bin']} (changed after it was written)",
        "shard shards/00001: tokens.bin chunk(s) 0 (bytes [0, 512)) do not match tokens.xxh3",  # token 5: chunk 0
    )


def test_stores_without_digests_still_open_and_verify(tmp_path):
    """Stores written before digests were recorded: nothing to check, everything else works."""
    root = _write_store(tmp_path / "s", [_docs(np.random.default_rng(5), 10, 50000)])
    m = json.loads((root / "manifest.json").read_text())
    for shard in m["shards"]:
        del shard["xxh3_64"]
        (root / shard["path"] / "tokens.xxh3").unlink()
    del m["chunk_bytes"]
    (root / "manifest.json").write_text(json.dumps(m))
    assert verify_store(root).ok and open_store(root).num_documents == 10


def test_verify_catches_ids_beyond_vocab(tmp_path):
    root = _write_store(tmp_path / "s", [[np.asarray([1, 2, 3], dtype=np.uint32)]], vocab=50000)
    m = json.loads((root / "manifest.json").read_text())
    m["vocab_size"] = 3
    m["tokenizer"]["vocab_size"] = 3
    (root / "manifest.json").write_text(json.dumps(m))
    assert any("token id 3 >= vocab_size 3" in p for p in verify_store(root).problems)


def test_inspect_prints_counts_histogram_and_samples(tmp_path):
    root = _write_store(tmp_path / "s", [_docs(np.random.default_rng(4), 12, 50000)])
    report = inspect_store(root, samples=2, decode=False)
    assert "documents  12" in report
    assert "document length histogram" in report and "#" in report
    assert report.count("  doc ") == 2


def test_verify_reports_a_missing_chunk_digest_file_and_reads_on(tmp_path):
    root = _write_store(tmp_path / "s", [_docs(np.random.default_rng(6), 10, 50000)] * 2)
    (root / "shards/00001/tokens.xxh3").unlink()
    assert verify_store(root).problems == ("shard shards/00001: missing tokens.xxh3 (the manifest lists its digest)",)
