"""Bucket token stores read by byte ranges (issue 33), against the real GCS emulator and moto S3.

Batches token for token the same as the local store; damaged or rewritten bytes named, never served nor
cached; old stores fall back to a verified copy; inspect, verify and export without a copy; a reader
killed (kill -9) in the middle of a ranged response leaves only sound chunks in the cache.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from zephyr import execution
from zephyr.fs import url_to_fs
from zephyr.tokenize import Mixture, TokenStore, inspect_store, open_store, tokenize_dataset, verify_store
from zephyr.tokenize.chunk_cache import open_chunk_cache
from zephyr.tokenize.export import export_megatron
from zephyr.tokenize.store_format import CHUNK_BYTES, chunk_digest, chunk_seed, store_cache_max, store_cache_root
from zephyr.train.config import DataConfig
from zephyr.train.data import BatchPrefetcher, make_mixture

REPO = Path(__file__).resolve().parents[2]


def _tokenize(inputs: str, output: str, scratch: str, **options) -> object:
    with execution(backend="local", scratch=scratch):
        return tokenize_dataset(inputs, output, **options)


@pytest.fixture
def stores(corpus, bucket, scratch, tmp_path) -> tuple[str, Path]:
    """The same documents tokenized into the emulator bucket and into a local directory."""
    inputs = str(corpus / "*.jsonl.zst")
    url = f"gs://{bucket}/stores/web"
    _tokenize(inputs, url, scratch, validation_fraction=0.2)
    _tokenize(inputs, str(tmp_path / "local"), scratch, validation_fraction=0.2)
    return url, tmp_path / "local"


def _cat(url: str) -> bytes:
    fs, path = url_to_fs(url)
    fs.invalidate_cache()
    return fs.cat_file(path)


def test_bucket_and_local_give_the_same_batches_token_for_token(stores, tmp_path):
    url, local = stores
    mix_remote = Mixture({"web": (url, 1.0)}, seq_len=48, seed=3, block_size=8)
    mix_local = Mixture({"web": (str(local), 1.0)}, seq_len=48, seed=3, block_size=8)
    steps = range(12)
    remote_batches = [mix_remote.batch(s, 8) for s in steps]
    assert all(np.array_equal(r, mix_local.batch(s, 8)) for s, r in zip(steps, remote_batches, strict=True))
    stats = mix_remote.components[0].store.fetch_stats
    assert stats.requests and stats.chunks_fetched
    # The trainer's loader (a background thread reading ahead) gives the same, from bucket and local alike.
    cfg = DataConfig(train={"web": (url, 1.0)}, seq_len=48, batch_size=8, seed=3, mixture_block=8)
    with BatchPrefetcher(make_mixture(cfg), 8, range(8), start=2, stop=12, ahead=3) as batches:
        assert all(np.array_equal(batches.get(s), remote_batches[s]) for s in range(2, 12))
    # The eval split reads the same windows too, and a second pass is served by the cache, not the bucket.
    assert np.array_equal(
        np.concatenate(list(mix_remote.validation_batches("web", 4))),
        np.concatenate(list(mix_local.validation_batches("web", 4))),
    )
    every = range(open_store(local).num_windows(48))
    assert np.array_equal(TokenStore(url).windows(every, 48), open_store(local).windows(every, 48))
    again = TokenStore(url)  # a second reader of the host (another run, a resumed one)
    assert np.array_equal(again.windows(every, 48), open_store(local).windows(every, 48))
    assert again.fetch_stats.chunks_fetched == 0 and again.fetch_stats.bytes_fetched == 0
    assert [p.name for p in store_cache_root().iterdir()] == [".chunks"]  # no copy of the store


def test_without_a_disk_cache_every_read_comes_from_the_bucket(stores, monkeypatch):
    url, local = stores
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "0")
    store, here = TokenStore(url), open_store(local)
    rows = [0, 5, 9, 3]
    assert np.array_equal(store.windows(rows, 64), here.windows(rows, 64))
    first = store.fetch_stats.bytes_fetched
    assert np.array_equal(store.windows(rows, 64), here.windows(rows, 64))
    assert store.fetch_stats.bytes_fetched == 2 * first and store.fetch_stats.chunks_cached == 0
    # Whole chunks at both ends plus 8 bytes of digest per chunk: never more than a chunk per end and window.
    assert first <= len(rows) * (65 * 2 + 2 * CHUNK_BYTES) * 1.02 + 8 * 4 * len(rows)
    assert not (store_cache_root() / ".chunks").exists()


def test_a_damaged_chunk_is_named_and_never_cached(stores):
    url, local = stores
    fs, path = url_to_fs(f"{url}/shards/00001/tokens.bin")
    data = bytearray(fs.cat_file(path))
    data[600], data[601], data[602], data[603] = data[602], data[603], data[600], data[601]  # in chunk 1
    fs.pipe_file(path, bytes(data))
    store = TokenStore(url)
    shard1 = int(store._tok_starts[1])
    with pytest.raises(
        ValueError,
        match=rf"token store {url}, shard shards/00001, chunk 1 \(bytes \[512, 1024\) of tokens.bin\) XXH3-64 "
        r"[0-9a-f]{16}, tokens.xxh3 says [0-9a-f]{16} \(fetched twice; 1 chunk\(s\) so\): the store changed since "
        rf"it was opened \(rewritten\?\) or is damaged. Open the store again; `zephyr verify {url}` lists",
    ):
        store.tokens(shard1, shard1 + 400)
    cache = store._ranged.cache
    seed = chunk_seed(store.manifest["shards"][1]["xxh3_64"]["tokens.bin"])
    assert not [e for e in cache.entries() if e[0] == seed and e[1] == 1]  # the bad chunk was not kept
    assert [e[1] for e in cache.entries() if e[0] == seed] == [0]  # its sound neighbour was
    assert store.tokens(0, 100).tolist() == open_store(local).tokens(0, 100).tolist()  # other shards read on
    problems = verify_store(url).problems
    assert "shard shards/00001: tokens.bin chunk(s) 1 (bytes [512, 1024)) do not match tokens.xxh3" in problems


def test_a_store_rewritten_under_an_open_reader_fails_rather_than_mixing_versions(corpus, stores, scratch, monkeypatch):
    url, _ = stores
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "0")
    before = TokenStore(url)
    first = before.tokens(0, 50).tolist()
    _tokenize(str(corpus / "*.jsonl.zst"), url, scratch, add_bos=True, validation_fraction=0.2)  # same URL
    with pytest.raises(ValueError, match="the store changed since it was opened"):
        before.tokens(2000, 2100)
    after = TokenStore(url)
    assert after.tokens(1, 51).tolist() == first  # the new version, whole: BOS first, then the same ids


def test_a_store_without_chunk_digests_is_read_from_a_verified_copy(stores, caplog):
    url, local = stores
    fs, root = url_to_fs(url)
    manifest = json.loads(_cat(f"{url}/manifest.json"))
    del manifest["chunk_bytes"]
    for shard in manifest["shards"]:
        del shard["xxh3_64"]["tokens.xxh3"]
        fs.rm_file(f"{root}/{shard['path']}/tokens.xxh3")
    fs.pipe_file(f"{root}/manifest.json", json.dumps(manifest).encode())
    with caplog.at_level(logging.WARNING, logger="zephyr.tokenize"):
        store = TokenStore(url)
    assert f"token store {url} has no per-chunk digests" in caplog.text and "Rewrite it" in caplog.text
    assert store.path is not None and store.path.parent == store_cache_root()  # the copy
    assert store.window(4, 32).tolist() == open_store(local).window(4, 32).tolist()
    assert verify_store(url).ok


def test_inspect_verify_and_export_read_a_bucket_store_without_copying_it(stores, tmp_path):
    url, local = stores
    report = inspect_store(url, samples=2, decode=False)
    assert f"store      {url}\n" in report and "cached at" not in report
    assert report.split("\n", 1)[1] == inspect_store(local, samples=2, decode=False).split("\n", 1)[1]
    assert verify_store(url).ok
    ours = export_megatron(url, tmp_path / "out" / "web")
    theirs = export_megatron(local, tmp_path / "ref" / "web")
    for name in ("bin_path", "idx_path"):
        assert Path(getattr(ours, name)).read_bytes() == Path(getattr(theirs, name)).read_bytes()
    assert not [p for p in store_cache_root().iterdir() if p.name != ".chunks"]  # no copy was made


def test_s3_store_is_read_by_ranges(corpus, s3_env, monkeypatch, scratch, tmp_path):
    monkeypatch.setenv("ZEPHYR_STORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "8MB")
    url = f"s3://{s3_env.create_bucket('us-east-1')}/stores/web"
    inputs = str(corpus / "*.jsonl.zst")
    _tokenize(inputs, url, scratch)
    _tokenize(inputs, str(tmp_path / "local"), scratch)
    remote, here = TokenStore(url), open_store(tmp_path / "local")
    rows = np.arange(remote.num_windows(100))[::-1]
    assert remote.path is None and np.array_equal(remote.windows(rows, 100), here.windows(rows, 100))


class _StallingProxy:
    """A TCP proxy in front of the storage emulator that, once armed, forwards half of the next response it
    sees and then holds the rest back: a fetch is then stopped in the middle of its range."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.armed = threading.Event()
        self.stalled = threading.Event()
        self.released = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:  # the emulator is going away (the end of the session)
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, response: bool) -> None:
        try:
            while data := src.recv(65536):
                if response and self.armed.is_set() and len(data) > 200 and not self.stalled.is_set():
                    dst.sendall(data[: len(data) // 2])
                    self.stalled.set()
                    self.released.wait()  # the rest never comes; the reader is killed meanwhile
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:  # one side went away (the killed reader): hang up the other, so the emulator serves on
            for end in (src, dst):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self.released.set()
        self.listener.close()


def _line(proc: subprocess.Popen, timeout_s: float = 120.0) -> str:
    """The reader's next line, or a failure naming what it printed on stderr (never a hang)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        proc.kill()
        pytest.fail(f"the reader printed nothing for {timeout_s:.0f}s; stderr: {proc.stderr.read()[-2000:]}")
    return proc.stdout.readline()


_READER = textwrap.dedent("""
    import sys
    import numpy as np
    from zephyr.tokenize import TokenStore
    store = TokenStore(sys.argv[1])
    rng = np.random.default_rng(0)
    n = store.num_windows(40)
    for batch in range(10**9):
        store.windows(rng.integers(0, n, size=6), 40)
        print("BATCH", batch, flush=True)
""")


def test_a_reader_killed_in_the_middle_of_a_range_leaves_only_sound_chunks(stores, gcs_env):
    """kill -9 of a reader whose response is stopped half way (a stalling proxy), and at random moments of
    steady reading: every chunk the cache holds afterwards is the bytes its digest (in the bucket) names."""
    url, _ = stores
    store = TokenStore(url)
    seeds = {chunk_seed(s["xxh3_64"]["tokens.bin"]): s["path"] for s in store.manifest["shards"]}
    host, port = gcs_env.endpoint.removeprefix("http://").split(":")
    proxy = _StallingProxy((host, int(port)))
    env = {**os.environ, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{proxy.port}"}
    cache = open_chunk_cache(store_cache_root(), CHUNK_BYTES, store_cache_max())

    def check_cache() -> int:
        entries = list(cache.entries())
        for file, chunk, digest, data in entries:
            want = int(np.frombuffer(_cat(f"{url}/{seeds[file]}/tokens.xxh3"), "<u8")[chunk])
            assert digest == want and chunk_digest(data, file) == want, (seeds[file], chunk)
        return len(entries)

    def reader() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", _READER, url],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    try:
        proc = reader()
        for _ in range(3):
            assert _line(proc).startswith("BATCH")
        proxy.armed.set()
        assert proxy.stalled.wait(60), "no response came through the proxy after arming it"
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # mid-range: half of a response has arrived
        proc.wait()
        assert check_cache() > 0
        proxy.armed.clear()
        rng = np.random.default_rng(1)
        for _ in range(4):  # and at random moments of steady reading (fetching, checking, caching)
            proc = reader()
            assert _line(proc).startswith("BATCH")
            time.sleep(float(rng.uniform(0.0, 0.5)))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert check_cache() > 0
    finally:
        proxy.close()


def _chunks_of(store: TokenStore, windows: np.ndarray, seq_len: int) -> set[tuple[int, int]]:
    """The (shard, chunk) pairs the windows' tokens lie in: what a ranged read must fetch, no more."""
    size, keys = store.dtype.itemsize, set()
    starts = np.cumsum([0] + [int(s["tokens"]) for s in store.manifest["shards"]])
    for w in windows.tolist():
        for pos in range(w * seq_len, w * seq_len + seq_len + 1):
            shard = int(np.searchsorted(starts, pos, side="right")) - 1
            keys.add((shard, (pos - int(starts[shard])) * size // CHUNK_BYTES))
    return keys


def _chunk_bytes(store: TokenStore, keys: set[tuple[int, int]]) -> int:
    """Bytes of those chunks (the last of a shard is short) plus 8 bytes of digest for each."""
    sizes = [int(s["tokens"]) * store.dtype.itemsize for s in store.manifest["shards"]]
    return sum(min(CHUNK_BYTES, sizes[k] - c * CHUNK_BYTES) + 8 for k, c in keys)


def test_each_host_fetches_only_the_ranges_of_its_own_rows(stores, monkeypatch):
    """Two hosts of one job (two readers of the bucket, rows 0-3 and 4-7 of each batch): each fetches exactly
    the chunks of its own rows' windows, and their rows together are the batch."""
    url, local = stores
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "0")  # every byte read shows in the counts
    cfg = DataConfig(train={"web": (url, 1.0)}, seq_len=40, batch_size=8, seed=5, mixture_block=8)
    whole = Mixture({"web": (str(local), 1.0)}, seq_len=40, seed=5, block_size=8)
    got, fetched = [], []
    for rows in (range(0, 4), range(4, 8)):
        mixture = make_mixture(cfg)
        with BatchPrefetcher(mixture, 8, rows, start=0, stop=3, ahead=2) as batches:
            got.append([batches.get(step) for step in range(3)])
        store = mixture.components[0].store
        windows = [mixture.locate_many(range(8 * s + rows.start, 8 * s + rows.stop))[1] for s in range(3)]
        assert store.fetch_stats.bytes_fetched == sum(_chunk_bytes(store, _chunks_of(store, w, 40)) for w in windows)
        fetched.append(store.fetch_stats.bytes_fetched)
    for step in range(3):
        assert np.array_equal(np.concatenate([got[0][step], got[1][step]]), whole.batch(step, 8))
    assert all(f > 0 for f in fetched)


_HOST = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=sys.argv[2], num_processes=2, process_id=int(sys.argv[3]))
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from zephyr.train.config import DataConfig
    from zephyr.train.data import BatchPrefetcher, host_rows, make_mixture
    from zephyr.train.trainer import make_mesh

    cfg = DataConfig(train={"web": (sys.argv[1], 1.0)}, seq_len=40, batch_size=8, seed=5, mixture_block=8)
    mixture = make_mixture(cfg)
    sharding = NamedSharding(make_mesh(), P("data"))  # 4 devices, 2 per process
    rows = host_rows(sharding, 8, 40)
    sums = []
    with BatchPrefetcher(mixture, 8, rows, start=0, stop=3, ahead=2) as batches:
        for step in range(3):
            batch = jax.make_array_from_process_local_data(sharding, batches.get(step), (8, 41))
            sums.append(int(jax.jit(lambda b: (b.astype("int64") * (1 + jax.numpy.arange(8)[:, None])).sum())(batch)))
    stats = mixture.components[0].store.fetch_stats
    print(json.dumps({"rows": [rows.start, rows.stop], "sums": sums, "bytes": stats.bytes_fetched}), flush=True)
""")


@pytest.mark.slow
def test_a_two_process_jax_job_reads_each_hosts_rows_and_assembles_the_batch(stores, monkeypatch):
    """A real multi-host data path: two JAX processes (jax.distributed, 2 CPU devices each, one data mesh of 4);
    each reads only its rows from the bucket, and the global arrays they assemble are the batches."""
    url, local = stores
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "0")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HOST, url, f"127.0.0.1:{port}", str(i)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-3000:] for _, err in outs]
    hosts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert [h["rows"] for h in hosts] == [[0, 4], [4, 8]]
    whole = Mixture({"web": (str(local), 1.0)}, seq_len=40, seed=5, block_size=8)
    weights = 1 + np.arange(8)[:, None]
    want = [int((whole.batch(step, 8).astype(np.int64) * weights).sum()) for step in range(3)]
    assert hosts[0]["sums"] == hosts[1]["sums"] == want  # row order too: the weights tell rows apart
    store = TokenStore(url)
    for host in hosts:
        start, stop = host["rows"]
        windows = [whole.locate_many(range(8 * s + start, 8 * s + stop))[1] for s in range(3)]
        assert host["bytes"] == sum(_chunk_bytes(store, _chunks_of(store, w, 40)) for w in windows)
