"""Token stores on buckets, against the real GCS emulator (and moto S3): write on the processes
backend, resume, stale-shard removal; read by byte ranges (the default) and through a whole local copy
(once per host, fetched again when rewritten)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zstandard

from zephyr import execution
from zephyr.fs import url_to_fs
from zephyr.tokenize import Mixture, TokenStore, open_store, tokenize_dataset, verify_store
from zephyr.train.config import DataConfig
from zephyr.train.data import make_mixture

REPO = Path(__file__).resolve().parents[2]


def _tokenize(inputs: str, output: str, scratch: str, **options) -> object:
    with execution(backend="local", scratch=scratch):
        return tokenize_dataset(inputs, output, **options)


def _cat(url: str) -> bytes:
    fs, path = url_to_fs(url)
    fs.invalidate_cache()
    return fs.cat_file(path)


def _same_store(url: str, local: Path) -> None:
    """Manifest and every shard file byte-identical (token ids and offsets)."""
    manifest = json.loads(_cat(f"{url}/manifest.json"))
    expected = json.loads((local / "manifest.json").read_text())
    assert manifest == expected
    assert len(manifest["shards"]) == 3
    for shard in manifest["shards"]:
        for name in ("tokens.bin", "offsets.npy"):
            assert _cat(f"{url}/{shard['path']}/{name}") == (local / shard["path"] / name).read_bytes(), shard
        marker = json.loads(_cat(f"{url}/{shard['path']}/shard.json"))
        local_marker = json.loads((local / shard["path"] / "shard.json").read_text())
        assert marker["payload"] == local_marker["payload"] and marker["fingerprint"] == local_marker["fingerprint"]


def test_processes_backend_writes_bucket_store_identical_to_local(corpus, bucket, scratch, tmp_path):
    inputs = str(corpus / "*.jsonl.zst")
    url = f"gs://{bucket}/stores/web"
    local = tmp_path / "local"
    _tokenize(inputs, str(local), scratch, validation_fraction=0.25)
    # Workers take this test's emulator settings from the driver with each task, warm pool or not.
    with execution(backend="processes", workers=2, scratch=str(tmp_path / "scratch2")):
        result = tokenize_dataset(inputs, url, validation_fraction=0.25)
    assert (result.shards_written, result.shards_reused) == (3, 0)
    _same_store(url, local)
    val = json.loads(_cat(f"{url}/validation/manifest.json"))
    assert val == json.loads((local / "validation" / "manifest.json").read_text()) and val["documents"] > 0
    for shard in val["shards"]:
        assert (
            _cat(f"{url}/validation/{shard['path']}/tokens.bin")
            == (local / "validation" / shard["path"] / "tokens.bin").read_bytes()
        )

    # Read it back by byte ranges: the same windows, documents and validation split as the local store,
    # and no copy of the store anywhere (only the bounded chunk cache).
    remote, here = TokenStore(url), open_store(local)
    assert remote.url == url and remote.location == url and url in repr(remote)
    assert remote.path is None and remote.fetch_stats is not None
    assert remote.num_tokens == here.num_tokens and remote.num_shards == 3
    assert [remote.window(i, 32).tolist() for i in range(remote.num_windows(32))] == [
        here.window(i, 32).tolist() for i in range(here.num_windows(32))
    ]
    assert remote.document(7).tolist() == here.document(7).tolist()
    assert remote.document_index().equals(here.document_index())
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".chunks"]
    assert open_store(url, copy=True).path.parent == tmp_path / "cache"  # the whole copy, when asked for
    assert remote.validation is not None and remote.validation.url == f"{url}/validation"
    assert remote.validation.num_tokens == here.validation.num_tokens
    mix_remote = Mixture({"web": (url, 1.0)}, seq_len=16, seed=1, block_size=4)
    mix_local = Mixture({"web": (str(local), 1.0)}, seq_len=16, seed=1, block_size=4)
    assert all(np.array_equal(mix_remote.batch(s, 4), mix_local.batch(s, 4)) for s in range(6))
    assert np.array_equal(next(mix_remote.validation_batches("web", 2)), next(mix_local.validation_batches("web", 2)))
    assert mix_remote.describe()["components"]["web"]["store"] == url
    trainer = make_mixture(DataConfig(train={"web": (url, 1.0)}, seq_len=16, batch_size=4, seed=1, mixture_block=4))
    assert np.array_equal(trainer.batch(2, 4), mix_local.batch(2, 4))
    assert verify_store(url).ok


def test_rerun_resumes_from_complete_shards_and_drops_stale_ones(corpus, bucket, scratch, tmp_path):
    inputs = str(corpus / "*.jsonl.zst")
    url = f"gs://{bucket}/web"
    first = _tokenize(inputs, url, scratch)
    assert (first.shards_written, first.shards_reused) == (3, 0)
    fs, root = url_to_fs(url)
    before = {k: fs.info(f"{root}/shards/{k:05d}/tokens.bin")["generation"] for k in range(3)}
    # A run killed after shards 0 and 2 completed: shard 1 has no completion mark, no manifest yet.
    fs.rm_file(f"{root}/shards/00001/shard.json")
    fs.rm_file(f"{root}/manifest.json")
    with pytest.raises(FileNotFoundError, match=rf"{url} is not a complete token store .*shards/ exists"):
        TokenStore(url)
    again = _tokenize(inputs, url, scratch)
    assert (again.shards_written, again.shards_reused) == (1, 2)
    fs.invalidate_cache()
    after = {k: fs.info(f"{root}/shards/{k:05d}/tokens.bin")["generation"] for k in range(3)}
    assert after[0] == before[0] and after[2] == before[2]  # not uploaded again
    assert after[1] != before[1]
    local = tmp_path / "local"
    _tokenize(inputs, str(local), scratch)
    _same_store(url, local)
    # Fewer inputs: the shard past the new count goes, like in a local store.
    (corpus / "part-2.jsonl.zst").unlink()
    _tokenize(inputs, url, scratch)
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/shards/00002")
    assert [s["path"] for s in json.loads(_cat(f"{url}/manifest.json"))["shards"]] == ["shards/00000", "shards/00001"]


def test_cache_is_filled_once_and_refetched_when_the_store_is_rewritten(corpus, bucket, scratch, tmp_path):
    inputs = str(corpus / "*.jsonl.zst")
    url = f"gs://{bucket}/web"
    _tokenize(inputs, url, scratch)
    first = TokenStore(url, copy=True)
    tokens = first.path / "shards" / "00000" / "tokens.bin"
    stamp = tokens.stat()
    second = open_store(url, copy=True)
    assert second.path == first.path
    assert (tokens.stat().st_ino, tokens.stat().st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)  # no refetch
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [first.path.name]
    # Rewritten with other settings (BOS added): a new manifest, so a new cache entry with the new ids.
    _tokenize(inputs, url, scratch, add_bos=True)
    rewritten = TokenStore(url, copy=True)
    assert rewritten.path != first.path
    assert rewritten.num_tokens == first.num_tokens + first.num_documents
    assert rewritten.document(0).tolist()[1:] == first.document(0).tolist()
    local = tmp_path / "bos"
    _tokenize(inputs, str(local), scratch, add_bos=True)
    assert rewritten.window(3, 16).tolist() == open_store(local).window(3, 16).tolist()


def test_rewrite_with_the_same_counts_is_fetched_again(corpus, bucket, scratch, tmp_path):
    """Documents reordered in place and the store rewritten: the same counts, sources and settings, other
    bytes. The manifest lists every data file's digest, so the cache cannot serve the old ids."""
    inputs = str(corpus / "*.jsonl.zst")
    url = f"gs://{bucket}/web"
    _tokenize(inputs, url, scratch)
    first = TokenStore(url, copy=True)
    before = [first.document(i).tolist() for i in range(first.num_documents)]
    for part in corpus.glob("*.jsonl.zst"):
        lines = zstandard.ZstdDecompressor().decompress(part.read_bytes()).splitlines()
        part.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(reversed(lines)) + b"\n"))
    _tokenize(inputs, url, scratch, resume=False)
    second = TokenStore(url, copy=True)
    assert (second.num_documents, second.num_tokens) == (first.num_documents, first.num_tokens)
    assert second.path != first.path
    after = [second.document(i).tolist() for i in range(second.num_documents)]
    assert after != before and sorted(after) == sorted(before)
    local = tmp_path / "reordered"
    _tokenize(inputs, str(local), scratch)
    assert after == [d.tolist() for d in map(open_store(local).document, range(second.num_documents))]


def test_a_damaged_remote_file_is_refused_at_fetch(corpus, bucket, scratch, tmp_path):
    """Same size, valid ids: only the digest tells; nothing is left in the cache."""
    url = f"gs://{bucket}/damaged"
    _tokenize(str(corpus / "*.jsonl.zst"), url, scratch)
    fs, path = url_to_fs(f"{url}/shards/00001/tokens.bin")
    data = bytearray(fs.cat_file(path))
    data[0], data[1] = data[2], data[3]  # two token ids swapped
    assert data != fs.cat_file(path)
    fs.pipe_file(path, bytes(data))
    with pytest.raises(ValueError, match=r"shards/00001/tokens.bin has XXH3-64 digest [0-9a-f]{16}, the manifest says"):
        TokenStore(url, copy=True)
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]


_OPENER = textwrap.dedent("""
    import logging, sys, time
    from pathlib import Path
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    from zephyr.tokenize import TokenStore
    barrier = Path(sys.argv[2])
    barrier.touch()
    while len(list(barrier.parent.glob("ready-*"))) < int(sys.argv[3]):
        time.sleep(0.01)
    store = TokenStore(sys.argv[1], copy=True)
    print("TOKENS", store.num_tokens, "AT", store.path)
""")


def test_processes_of_one_host_copy_a_store_once(corpus, bucket, scratch, tmp_path):
    url = f"gs://{bucket}/web"
    _tokenize(str(corpus / "*.jsonl.zst"), url, scratch)
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, url, str(gate / f"ready-{i}"), "3"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ.copy(),
        )
        for i in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert sum(out.count("copying token store") for out in outputs) == 1, outputs
    assert len({out.split(" AT ")[-1].strip() for out in outputs}) == 1


def test_missing_store_names_the_url(bucket):
    url = f"gs://{bucket}/nothing/here"
    with pytest.raises(FileNotFoundError, match=rf"{url}/manifest.json not found: {url} is not a complete token store"):
        TokenStore(url)
    assert not verify_store(url).ok


def test_s3_store_round_trip(corpus, s3_env, monkeypatch, scratch, tmp_path):
    monkeypatch.setenv("ZEPHYR_STORE_CACHE", str(tmp_path / "cache"))
    url = f"s3://{s3_env.create_bucket('us-east-1')}/stores/web"
    inputs = str(corpus / "*.jsonl.zst")
    _tokenize(inputs, url, scratch)
    local = tmp_path / "local"
    _tokenize(inputs, str(local), scratch)
    _same_store(url, local)
    remote = TokenStore(url)
    assert remote.window(2, 16).tolist() == open_store(local).window(2, 16).tolist()
