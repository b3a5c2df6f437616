"""The local chunk cache of bucket stores: its bound, LRU by chunk, damaged slots, sharing, and kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from zephyr.tokenize.chunk_cache import RECORD, WAYS, open_chunk_cache
from zephyr.tokenize.store_format import CHUNK_BYTES, chunk_digest, store_cache_max

REPO = Path(__file__).resolve().parents[2]


def _chunk(file: int, chunk: int) -> bytes:
    """A deterministic chunk of token bytes (a short last chunk now and then, like a shard's tail)."""
    rng = np.random.default_rng([file, chunk])
    length = CHUNK_BYTES if chunk % 7 else 2 * int(rng.integers(1, CHUNK_BYTES // 2))
    return rng.integers(0, 49152, size=length // 2, dtype=np.uint16).tobytes()


def _put(cache, file: int, chunks: list[int]) -> None:
    data = [_chunk(file, c) for c in chunks]
    cache.put_many(
        np.full(len(chunks), file, np.uint64),
        np.asarray(chunks, np.uint64),
        np.asarray([chunk_digest(d, file) for d in data], np.uint64),
        data,
    )


def _get(cache, file: int, chunks: list[int]) -> list[bytes | None]:
    return cache.get_many(np.full(len(chunks), file, np.uint64), np.asarray(chunks, np.uint64))


def test_the_cache_never_grows_past_its_bound_and_serves_what_it_kept(tmp_path):
    bound = 256 * 1024
    cache = open_chunk_cache(tmp_path, CHUNK_BYTES, bound)
    assert cache is not None and cache.capacity % WAYS == 0
    assert cache.capacity * (CHUNK_BYTES + RECORD.itemsize) <= bound
    file = 0xDEADBEEF12345678
    end = 4 * cache.capacity // 97 * 97
    for start in range(0, end, 97):  # four times what it can hold, in batches
        _put(cache, file, list(range(start, start + 97)))
        assert cache.disk_bytes() <= bound
    kept = sum(d is not None for d in _get(cache, file, list(range(end))))
    assert kept == cache.capacity  # full, every set (64 keys per set of 16 here)
    recent = list(range(end - 40, end))
    assert _get(cache, file, recent) == [_chunk(file, c) for c in recent]  # the newest are all there


def test_eviction_is_least_recently_used_within_a_set(tmp_path):
    cache = open_chunk_cache(tmp_path, CHUNK_BYTES, 64 * 1024)
    file = 7
    rows = cache._rows(np.full(4000, file, np.uint64), np.arange(4000, dtype=np.uint64))[:, 0]
    same_set = [int(c) for c in np.nonzero(rows == rows[0])[0][: WAYS + 1]]  # WAYS + 1 chunks, one set
    assert len(same_set) == WAYS + 1
    _put(cache, file, same_set[:WAYS])  # the set is full
    _get(cache, file, [same_set[0]])  # touch the oldest: now the second is least recently used
    _put(cache, file, [same_set[WAYS]])
    found = _get(cache, file, same_set)
    assert found[1] is None
    assert all(d is not None for i, d in enumerate(found) if i != 1)


def test_a_damaged_slot_is_dropped_not_served(tmp_path):
    cache = open_chunk_cache(tmp_path, CHUNK_BYTES, 64 * 1024)
    _put(cache, 11, [3])
    live = [slot for slot in range(cache.capacity) if cache._records["stamp"][slot]]
    with open(cache.directory / "slots.bin", "r+b") as handle:  # a lost write: other bytes in the slot
        handle.seek(live[0] * CHUNK_BYTES)
        handle.write(b"\xff\xfe")
    assert _get(cache, 11, [3]) == [None]
    assert not any(cache._records["stamp"])  # and it was emptied


def test_processes_share_one_cache(tmp_path):
    cache = open_chunk_cache(tmp_path, CHUNK_BYTES, 64 * 1024)
    _put(cache, 5, [0, 1, 2])
    script = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from zephyr.tokenize.chunk_cache import open_chunk_cache
        cache = open_chunk_cache(Path({str(tmp_path)!r}), {CHUNK_BYTES}, 64 * 1024)
        got = cache.get_many(np.full(3, 5, np.uint64), np.arange(3, dtype=np.uint64))
        print(sum(g is not None for g in got))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "3"


def test_another_bound_replaces_the_cache(tmp_path):
    open_chunk_cache(tmp_path, CHUNK_BYTES, 64 * 1024)._open()
    second = open_chunk_cache(tmp_path, CHUNK_BYTES, 128 * 1024)
    second._open()
    assert [p.name for p in (tmp_path / ".chunks").iterdir()] == [second.directory.name]
    assert open_chunk_cache(tmp_path, CHUNK_BYTES, 10_000) is None  # too small for one set: no cache


def test_cache_bound_from_the_environment(monkeypatch):
    for raw, want in (("268435456", 268435456), ("256MB", 256_000_000), ("256MiB", 1 << 28), ("4G", 4 << 30)):
        monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", raw)
        assert store_cache_max() == want
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "lots")
    with pytest.raises(ValueError, match=r"ZEPHYR_STORE_CACHE_MAX='lots' is not a size: expected bytes, e.g."):
        store_cache_max()


_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from pathlib import Path
    from zephyr.tokenize.chunk_cache import open_chunk_cache
    from zephyr.tokenize.store_format import chunk_digest
    cache = open_chunk_cache(Path(sys.argv[1]), 512, 96 * 1024)
    rng = np.random.default_rng(int(sys.argv[2]))
    print("READY", flush=True)
    while True:
        file = int(rng.integers(1, 2**63))
        data = [rng.integers(0, 2**16, size=256, dtype=np.uint16).tobytes() for _ in range(64)]
        cache.put_many(np.full(64, file, np.uint64), np.arange(64, dtype=np.uint64),
                       np.asarray([chunk_digest(d, file) for d in data], np.uint64), data)
""")


def test_a_process_killed_while_writing_leaves_only_sound_chunks(tmp_path):
    """kill -9 at random moments of a process that does nothing but fill the cache: every live record's bytes
    are still its digest (the writes are ordered so that a record counts only once its bytes are in)."""
    rng = np.random.default_rng(0)
    for round_ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(round_)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(float(rng.uniform(0.05, 0.4)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        cache = open_chunk_cache(tmp_path, CHUNK_BYTES, 96 * 1024)
        entries = list(cache.entries())
        assert entries, "the writer was killed before it kept anything: the check would be empty"
        assert all(chunk_digest(data, file) == digest for file, _, digest, data in entries)
