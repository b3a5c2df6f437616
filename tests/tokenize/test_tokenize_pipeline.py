"""tokenize_dataset on the engine: ids, manifest, validation split, per-shard resume, CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import orjson
import pytest
import zstandard

from zephyr import execution
from zephyr.tokenize import (
    TokenizerSpec,
    is_validation_document,
    load_tokenizer,
    open_store,
    tokenize_dataset,
    verify_store,
)
from zephyr.tokenize.cli import add_cli

FALLBACK_TEXTS = [
    "A small offline sample, used when ../shared/data is absent.  It has runs   of spaces.",
    "Zweiter Text: Größe, Maß, 2024-11-22.\n\nDritter Absatz.",
    "第三个文档：中文文本。 第四句。",
]


def _documents(shared: Path | None) -> list[dict]:
    if shared is not None and (shared / "aeb-dev" / "ground-truth.json").is_file():
        truth = json.loads((shared / "aeb-dev" / "ground-truth.json").read_text())
        docs = [{"id": k, "text": v["articleBody"], "source": "aeb"} for k, v in sorted(truth.items())][:45]
    else:
        docs = [{"id": f"doc-{i}", "text": t, "source": "fallback"} for i, t in enumerate(FALLBACK_TEXTS * 10)]
    docs.insert(3, {"id": "empty", "text": "", "source": "x"})
    docs.insert(7, {"id": "no-text", "source": "x"})
    return docs


def _write_inputs(folder: Path, docs: list[dict], files: int = 3) -> list[list[dict]]:
    folder.mkdir(parents=True, exist_ok=True)
    parts = [docs[k::files] for k in range(files)]
    for k, part in enumerate(parts):
        payload = b"\n".join(orjson.dumps(d) for d in part) + b"\n"
        (folder / f"part-{k}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(payload))
    return parts


@pytest.fixture
def corpus(tmp_path):
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    docs = _documents(shared if shared.is_dir() else None)
    parts = _write_inputs(tmp_path / "in", docs)
    return tmp_path, parts


def _expected(parts: list[list[dict]]) -> list[list[int]]:
    tok = load_tokenizer()
    texts = [d["text"] for part in parts for d in part if d.get("text")]
    return [e.ids + [tok.info.eos_id] for e in tok.hf.encode_batch(texts, add_special_tokens=False)]


def test_tokenize_dataset_writes_identical_ids_and_manifest(corpus, scratch):
    tmp, parts = corpus
    with execution(backend="local", scratch=scratch, summary=False):
        result = tokenize_dataset(str(tmp / "in" / "*.jsonl.zst"), tmp / "store")
    store = open_store(tmp / "store")
    expected = _expected(parts)
    assert store.num_documents == len(expected)
    assert [store.document(i).tolist() for i in range(store.num_documents)] == expected
    m = store.manifest
    tok = load_tokenizer()
    assert m["tokenizer"]["content_hash"] == tok.info.content_hash and m["tokenizer"]["name"] == "smollm2-135m"
    assert m["dtype"] == "uint16" and m["vocab_size"] == 49152
    assert m["tokens"] == sum(map(len, expected)) and len(m["shards"]) == 3
    assert [s["source"].endswith(f"part-{k}.jsonl.zst") for k, s in enumerate(m["shards"])] == [True] * 3
    assert m["skipped"] == {"empty_text": 1, "missing_text": 1}
    assert m["sources"] == [str(tmp / "in" / "*.jsonl.zst")] and m["config_hash"]
    assert result.counters["tokenize/skipped/empty_text"] == 1
    assert result.counters["tokenize/tokens"] == m["tokens"]
    assert verify_store(tmp / "store").ok


def test_validation_split_is_deterministic_and_disjoint(corpus, scratch):
    tmp, parts = corpus
    with execution(backend="local", scratch=scratch, summary=False):
        result = tokenize_dataset(str(tmp / "in" / "*.jsonl.zst"), tmp / "store", validation_fraction=0.3)
    store = open_store(tmp / "store")
    val = store.validation
    assert val is not None and result.validation_manifest["split"] == "validation"
    docs = [d for part in parts for d in part if d.get("text")]
    expected = dict(zip([d["id"] for d in docs], _expected(parts), strict=False))
    in_val = [d["id"] for d in docs if is_validation_document(d["id"], 0.3)]
    in_train = [d["id"] for d in docs if not is_validation_document(d["id"], 0.3)]
    assert 0 < len(in_val) < len(docs)
    assert [val.document(i).tolist() for i in range(val.num_documents)] == [expected[k] for k in in_val]
    assert [store.document(i).tolist() for i in range(store.num_documents)] == [expected[k] for k in in_train]
    assert verify_store(tmp / "store").ok
    # a pure function of the id: a larger fraction only adds documents
    assert set(in_val) <= {d["id"] for d in docs if is_validation_document(d["id"], 0.5)}
    # rerunning without a split removes the old validation store (it would overlap the new training data)
    with execution(backend="local", scratch=scratch, summary=False):
        tokenize_dataset(str(tmp / "in" / "part-[01].jsonl.zst"), tmp / "store")
    store = open_store(tmp / "store")
    assert store.validation is None and store.num_shards == 2
    assert not (tmp / "store" / "shards" / "00002").exists()


def test_rerun_resumes_per_shard(corpus, scratch):
    tmp, parts = corpus
    glob = str(tmp / "in" / "*.jsonl.zst")
    with execution(backend="local", scratch=scratch, summary=False):
        first = tokenize_dataset(glob, tmp / "store")
        before = (tmp / "store" / "shards/00001/tokens.bin").stat().st_mtime_ns
        again = tokenize_dataset(glob, tmp / "store")
        assert (again.shards_written, again.shards_reused) == (0, 3)
        assert again.manifest["tokens"] == first.manifest["tokens"]
        assert (
            again.manifest["skipped"] == first.manifest["skipped"] == {"empty_text": 1, "missing_text": 1}
        )  # kept in shard.json
        # a shard without its completion mark (a crash mid-shard) is redone, the others are kept
        (tmp / "store" / "shards/00001/shard.json").unlink()
        third = tokenize_dataset(glob, tmp / "store")
        assert (third.shards_written, third.shards_reused) == (1, 2)
        assert (tmp / "store" / "shards/00001/tokens.bin").stat().st_mtime_ns != before
        # other settings (BOS added) invalidate every shard
        fourth = tokenize_dataset(glob, tmp / "store", add_bos=True)
        assert fourth.shards_written == 3
        # so does another chunk size (ids may differ next to a forced cut); the default's hash is unchanged
        spec = TokenizerSpec(max_chunk_chars=5_000)
        fifth = tokenize_dataset(glob, tmp / "store", add_bos=True, tokenizer=spec)
        assert fifth.shards_written == 3
    store = open_store(tmp / "store")
    assert [store.document(i).tolist() for i in range(store.num_documents)] == [[0] + e for e in _expected(parts)]
    assert verify_store(tmp / "store").ok


def test_processes_backend_gives_the_same_store(corpus, scratch):
    tmp, parts = corpus
    with execution(backend="processes", workers=2, scratch=scratch, summary=False):
        tokenize_dataset(str(tmp / "in" / "*.jsonl.zst"), tmp / "store")
    store = open_store(tmp / "store")
    assert [store.document(i).tolist() for i in range(store.num_documents)] == _expected(parts)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="zephyr")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_tokenize_inspect_verify(corpus, scratch, capsys, monkeypatch):
    tmp, parts = corpus
    monkeypatch.setenv("ZEPHYR_SCRATCH", scratch)
    out = str(tmp / "store")
    assert (
        _cli(["tokenize", str(tmp / "in" / "*.jsonl.zst"), out, "--validation-fraction", "0.2", "--backend", "local"])
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    assert _cli(["verify", out]) == 0
    assert capsys.readouterr().out.startswith("OK ")
    assert _cli(["inspect", out, "--samples", "2"]) == 0
    text = capsys.readouterr().out
    assert "document length histogram" in text and "validation" in text
    assert "<|endoftext|>" in text  # samples decoded with the store's own tokenizer
    offsets = Path(out) / "shards/00000/offsets.npy"
    ends = np.load(offsets)
    np.save(offsets, ends[:-1])
    assert _cli(["verify", out]) == 1
    assert "offsets.npy has" in capsys.readouterr().out
    assert _cli(["tokenize", str(tmp / "nothing" / "*.jsonl"), out]) == 2
    assert "no files match" in capsys.readouterr().err
