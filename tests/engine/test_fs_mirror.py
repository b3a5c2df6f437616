"""MirrorFileSystem against real servers on 127.0.0.1: copy once (also from 4 processes at once),
then serve locally; merged listings; local writes; stale and live locks; the budget."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from zephyr import counters
from zephyr.fs import expand_glob, open_url, url_to_fs
from zephyr.fs.copy_once import LockRecord, read_lock, write_lock_record
from zephyr.fs.mirror import COPY_COUNTER, MirrorFileSystem, parse_mirror_buckets
from zephyr.fs.transfer_budget import CrossRegionBudgetExceeded, cross_region_bytes

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mirror:
    scheme: str
    local: str  # region label of this machine
    far: str  # region label of the other bucket
    local_bucket: str
    far_bucket: str

    def local_url(self, key: str) -> str:
        return f"{self.scheme}://{self.local_bucket}/{key}"

    def far_url(self, key: str) -> str:
        return f"{self.scheme}://{self.far_bucket}/{key}"


def _make_mirror(request, monkeypatch, scheme: str) -> Mirror:
    if scheme == "gs":
        server = request.getfixturevalue("gcs_env")
        mirror = Mirror(
            "gs",
            "us-central1",
            "europe-west4",
            server.create_bucket("US-CENTRAL1", "zmus"),
            server.create_bucket("EUROPE-WEST4", "zmeu"),
        )
    else:
        server = request.getfixturevalue("s3_env")
        mirror = Mirror(
            "s3",
            "us-east-1",
            "eu-west-1",
            server.create_bucket("us-east-1", "zmus"),
            server.create_bucket("eu-west-1", "zmeu"),
        )
    monkeypatch.setenv("ZEPHYR_REGION", mirror.local)
    monkeypatch.setenv(
        "ZEPHYR_MIRROR_BUCKETS",
        f"{mirror.local}={scheme}://{mirror.local_bucket},{mirror.far}={scheme}://{mirror.far_bucket}",
    )
    counters.reset()
    return mirror


@pytest.fixture(params=["gs", "s3"])
def mirror(request, monkeypatch) -> Mirror:
    return _make_mirror(request, monkeypatch, request.param)


@pytest.fixture
def gcs_mirror(request, monkeypatch) -> Mirror:
    return _make_mirror(request, monkeypatch, "gs")


@pytest.fixture
def s3_mirror(request, monkeypatch) -> Mirror:
    return _make_mirror(request, monkeypatch, "s3")


def _put(url: str, data: bytes) -> None:
    fs, path = url_to_fs(url)
    fs.pipe(path, data)


def _exists(url: str) -> bool:
    fs, path = url_to_fs(url)
    fs.invalidate_cache(path)
    return fs.exists(path)


def test_parse_mirror_buckets() -> None:
    assert parse_mirror_buckets("us-central1=gs://a, europe-west4=gs://b/prefix/") == {
        "us-central1": "gs://a",
        "europe-west4": "gs://b/prefix",
    }
    assert parse_mirror_buckets('{"US": "s3://x"}') == {"us": "s3://x"}
    with pytest.raises(ValueError, match="ZEPHYR_MIRROR_BUCKETS"):
        parse_mirror_buckets("us-central1:gs://a")


def test_read_copies_once_then_serves_locally(mirror: Mirror) -> None:
    payload = b'{"id": 1, "text": "hello"}\n' * 500
    _put(mirror.far_url("docs/a.jsonl"), payload)
    with open_url("mirror://docs/a.jsonl", "rb") as handle:
        assert handle.read() == payload
    assert cross_region_bytes() == len(payload)  # the copy, charged once
    assert counters.snapshot()[COPY_COUNTER] == 1
    assert _exists(mirror.local_url("docs/a.jsonl"))
    fs, path = url_to_fs("mirror://docs/a.jsonl")
    assert isinstance(fs, MirrorFileSystem) and path == "docs/a.jsonl"
    assert fs.cat("docs/a.jsonl") == payload  # served from the local copy: no new charge, no new copy
    with open_url("mirror://docs/a.jsonl", "rb") as handle:
        assert handle.read() == payload
    assert cross_region_bytes() == len(payload)
    assert counters.snapshot()[COPY_COUNTER] == 1
    assert not _exists(mirror.local_url(".zephyr-locks/docs/a.jsonl.lock"))  # lock released


def test_listing_merges_regions_local_wins_and_writes_go_local(gcs_mirror: Mirror) -> None:
    _put(gcs_mirror.local_url("d/both.txt"), b"local version")
    _put(gcs_mirror.far_url("d/both.txt"), b"the far version, longer")
    _put(gcs_mirror.far_url("d/far-only.txt"), b"far")
    _put(gcs_mirror.local_url("d/local-only.txt"), b"local")
    fs, _ = url_to_fs("mirror://")
    entries = {e["name"]: e for e in fs.ls("d", detail=True)}
    assert sorted(entries) == ["d/both.txt", "d/far-only.txt", "d/local-only.txt"]
    assert entries["d/both.txt"]["size"] == len(b"local version")
    assert entries["d/both.txt"]["mirror_region"] == gcs_mirror.local
    assert entries["d/far-only.txt"]["mirror_region"] == gcs_mirror.far
    assert expand_glob("mirror://d/*.txt") == [
        "mirror://d/both.txt",
        "mirror://d/far-only.txt",
        "mirror://d/local-only.txt",
    ]
    assert fs.info("d/far-only.txt")["size"] == 3
    assert cross_region_bytes() == 0  # listing and info move no data
    with open_url("mirror://d/new.txt", "wb", compression=None) as handle:
        handle.write(b"written here")
    assert _exists(gcs_mirror.local_url("d/new.txt")) and not _exists(gcs_mirror.far_url("d/new.txt"))
    assert fs.cat("d/both.txt") == b"local version"
    fs.rm("d/new.txt")
    assert not _exists(gcs_mirror.local_url("d/new.txt"))
    with pytest.raises(FileNotFoundError, match="none of the regional buckets"):
        fs.cat("d/missing.txt")


def test_copy_refused_by_budget_copies_nothing(gcs_mirror: Mirror, monkeypatch) -> None:
    _put(gcs_mirror.far_url("big.bin"), b"b" * 4000)
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "1000")
    with pytest.raises(CrossRegionBudgetExceeded, match="ZEPHYR_CROSS_REGION_BUDGET"):
        open_url("mirror://big.bin", "rb")
    assert not _exists(gcs_mirror.local_url("big.bin"))
    assert not _exists(gcs_mirror.local_url(".zephyr-locks/big.bin.lock"))
    monkeypatch.setenv("ZEPHYR_ALLOW_CROSS_REGION", "1")
    with open_url("mirror://big.bin", "rb") as handle:
        assert handle.read() == b"b" * 4000


def test_stale_lock_from_a_dead_or_expired_holder_is_broken(s3_mirror: Mirror) -> None:
    _put(s3_mirror.far_url("s/x.bin"), b"x" * 100)
    _put(s3_mirror.far_url("s/y.bin"), b"y" * 100)
    fs, root = url_to_fs(f"s3://{s3_mirror.local_bucket}")
    now = time.time()
    expired = LockRecord("crashed-elsewhere", "other-host", 4242, now - 900, now - 300)
    write_lock_record(fs, f"{root}/.zephyr-locks/s/x.bin.lock", expired, exclusive=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    crashed_here = LockRecord("crashed-here", socket.gethostname(), int(dead.stdout), now, now + 3600)
    write_lock_record(fs, f"{root}/.zephyr-locks/s/y.bin.lock", crashed_here, exclusive=True)
    started = time.monotonic()
    mfs, _ = url_to_fs("mirror://")
    assert mfs.cat("s/x.bin") == b"x" * 100
    assert mfs.cat("s/y.bin") == b"y" * 100
    assert time.monotonic() - started < 10
    assert counters.snapshot()[COPY_COUNTER] == 2
    assert read_lock(fs, f"{root}/.zephyr-locks/s/x.bin.lock") is None


def test_reader_waits_for_a_live_holder_and_serves_its_copy(s3_mirror: Mirror) -> None:
    payload = b"w" * 1000
    _put(s3_mirror.far_url("w.bin"), payload)
    fs, root = url_to_fs(f"s3://{s3_mirror.local_bucket}")
    lock_path = f"{root}/.zephyr-locks/w.bin.lock"
    holder = LockRecord("another-machine", "other-host", 1, time.time(), time.time() + 3600)
    write_lock_record(fs, lock_path, holder, exclusive=True)
    result: dict = {}

    def read() -> None:
        try:
            result["data"] = url_to_fs("mirror://")[0].cat("w.bin")
        except BaseException as error:  # reported below
            result["error"] = error

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(1.0)
    assert reader.is_alive(), result  # waiting on the other machine's lock
    _put(s3_mirror.local_url("w.bin"), payload)  # the other machine finishes its copy...
    fs.rm_file(lock_path)  # ...and releases its lock
    reader.join(timeout=20)
    assert result.get("data") == payload, result
    assert cross_region_bytes() == 0  # this process copied nothing
    assert counters.snapshot().get(COPY_COUNTER, 0) == 0


_WORKER = r"""
import hashlib, json, os, sys, time
from pathlib import Path
from zephyr import counters
from zephyr.fs import url_to_fs
from zephyr.fs.mirror import MirrorFileSystem
from zephyr.fs.transfer_budget import cross_region_bytes

barrier, index, total = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
local_lock, key = sys.argv[4] == "1", sys.argv[5]
if local_lock:
    fs, path = url_to_fs("mirror://" + key)
else:  # the lock object in the bucket alone must keep the copy single
    fs = MirrorFileSystem(buckets=os.environ["ZEPHYR_MIRROR_BUCKETS"], local_lock=False)
    path = key
fs.local_region  # resolve the region before the race
(barrier / f"ready-{index}").touch()
deadline = time.monotonic() + 60
while len(list(barrier.glob("ready-*"))) < total:
    if time.monotonic() > deadline:
        sys.exit("barrier timeout")
    time.sleep(0.005)
with fs.open(path, "rb") as handle:
    data = handle.read()
print(json.dumps({"copies": counters.snapshot().get("fs/mirror_copies", 0), "charged": cross_region_bytes(),
                  "sha": hashlib.sha256(data).hexdigest()}))
"""


def _race(tmp_path: Path, key: str, *, processes: int, local_lock: bool) -> list[dict]:
    barrier = tmp_path / f"barrier-{key.replace('/', '_')}"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(barrier), str(i), str(processes), "1" if local_lock else "0", key],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for i in range(processes)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize(
    ("scheme", "local_lock"),
    [("s3", False), ("gs", True)],
    ids=["s3-bucket-lock-object-only", "gcs-local-file-lock"],
)
def test_concurrent_processes_copy_exactly_once(request, monkeypatch, tmp_path, scheme: str, local_lock: bool) -> None:
    mirror = _make_mirror(request, monkeypatch, scheme)
    payload = os.urandom(3 << 20)  # 3 MiB: the copy takes long enough for the others to pile up
    _put(mirror.far_url("race/shard-0.bin"), payload)
    results = _race(tmp_path, "race/shard-0.bin", processes=4, local_lock=local_lock)
    digest = hashlib.sha256(payload).hexdigest()
    assert [r["sha"] for r in results] == [digest] * 4
    assert sorted(r["copies"] for r in results) == [0, 0, 0, 1], results
    assert sorted(r["charged"] for r in results) == [0, 0, 0, len(payload)], results
    # afterwards everyone is served locally, with no copy and no charge
    fs, _ = url_to_fs("mirror://")
    assert hashlib.sha256(fs.cat("race/shard-0.bin")).hexdigest() == digest
    assert cross_region_bytes() == 0
