"""The environment's failures are told apart from the user's, once (issue #17 item 14)."""

from __future__ import annotations

import contextlib
import random
import struct
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from zephyr import Dataset, counters, execution
from zephyr.engine.io import read_records
from zephyr.errors import BadInputError, StorageError


@pytest.fixture
def local(scratch):
    with execution(
        backend="local", scratch=scratch, summary=False, progress=False, max_user_retries=3, retry_backoff_s=0.01
    ):
        yield


@dataclass(frozen=True)
class _WriteToDevFull:
    attempts: str  # a file that gets one line per call: how often the shard was tried

    def __call__(self, record):
        with open(self.attempts, "a") as log:
            log.write("call\n")
        with open("/dev/full", "wb") as handle:  # every write: ENOSPC, a full disk
            handle.write(b"x" * 100)
            handle.flush()
        return record


def test_a_full_disk_in_user_code_is_a_storage_error_not_retried(local, tmp_path):
    attempts = tmp_path / "attempts"
    run = Dataset.from_list([{"a": 1}], num_shards=1).map(_WriteToDevFull(str(attempts)))
    with pytest.raises(StorageError, match=r"on record #0: no space left on the device: .*not the data or the code"):
        run.collect()
    assert attempts.read_text().count("call") == 1  # not retried as a user error (max_user_retries=3)


def test_permission_denied_on_the_output_is_a_storage_error(local):
    with pytest.raises(StorageError, match=r"(permission denied|read-only file system|not permitted): /sys/zephyr-"):
        Dataset.from_list([{"a": 1}], num_shards=1).write_jsonl(
            f"/sys/zephyr-{uuid.uuid4().hex[:6]}/part-{{shard}}.jsonl"
        )


@contextlib.contextmanager
def _small_tmpfs(path: Path, size: str):
    path.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    ).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def test_a_full_disk_while_tokenizing_names_the_file_and_leaves_no_temporary_file(tmp_path, scratch):
    from zephyr.tokenize import tokenize_dataset

    docs = [{"id": str(i), "text": f"document {i} " + "words and more words " * 40} for i in range(300)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(b"\n".join(orjson.dumps(d) for d in docs))
    )
    with _small_tmpfs(tmp_path / "small", "64k") as small:
        with (
            execution(backend="local", scratch=scratch, summary=False, progress=False),
            pytest.raises(StorageError, match=r"no space left on the device: .*/small/store/shards/00000/\.tmp-"),
        ):
            tokenize_dataset(str(tmp_path / "in" / "*.jsonl.zst"), small / "store")
        assert not [p for p in small.rglob(".tmp-*")]


def test_a_parquet_footer_of_garbage_is_bad_input_and_skippable(tmp_path):
    path = tmp_path / "garbage.parquet"
    pq.write_table(pa.table({"a": list(range(100))}), path)
    data = bytearray(path.read_bytes())
    length = struct.unpack("<I", data[-8:-4])[0]
    data[len(data) - 8 - length : len(data) - 8] = b"\xab" * length  # the footer's thrift metadata
    path.write_bytes(bytes(data))
    with pytest.raises(BadInputError, match=r"not a readable parquet file.*thrift"):
        list(read_records(str(path)))
    counters.reset()
    assert list(read_records(str(path), on_bad_record="skip")) == []
    assert counters.snapshot() == {"bad_files/corrupt": 1}


def test_a_full_disk_while_writing_jsonl_names_the_output_file(local, tmp_path):
    """The write's OSError (ENOSPC) carries no file name: the message said "(path not reported)"."""
    with _small_tmpfs(tmp_path / "small", "64k") as small:
        records = [{"text": "x" * 1000 + str(i)} for i in range(300)]
        with pytest.raises(StorageError, match=r"no space left on the device: .*/small/out/part-00000\.jsonl "):
            Dataset.from_list(records, num_shards=1).write_jsonl(str(small / "out" / "part-{shard:05d}.jsonl"))
        assert not list(small.rglob(".tmp-*"))


@pytest.mark.parametrize("storage", ["read-only", "full"])
def test_a_recipe_on_unusable_storage_is_one_line_naming_the_path(tmp_path, storage):
    """The recipe's own sample building met a read-only or full disk: 49 lines of chained tracebacks."""
    import os
    import sys

    with _small_tmpfs(tmp_path / "disk", "256k") as disk:
        if storage == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        root = Path(__file__).resolve().parents[2]
        done = subprocess.run(
            [sys.executable, "-m", "zephyr.cli", "run", "-q", str(root / "recipes" / "nemotron_cc.py"), "--no-train"]
            + ["--output", str(disk / "out")],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        what = "read-only file system" if storage == "read-only" else "no space left on the device"
        assert "StorageError: " in lines[0] and f"{what}: {disk / 'out'}" in lines[0], lines[0]
        assert not list(disk.rglob(".tmp-*"))


def test_a_full_scratch_disk_is_a_storage_error_naming_the_file_not_a_pickling_error(tmp_path):
    """Writing the stage to a full scratch said "cannot be shipped to workers ... must be picklable" (PlanError)."""
    with _small_tmpfs(tmp_path / "scratch", "64k") as scratch:
        records = [{"text": "z" * 1000 + str(i)} for i in range(300)]  # the stage holds them: ~300 KB pickled
        with (
            execution(backend="local", scratch=str(scratch), summary=False, progress=False),
            pytest.raises(StorageError, match=r"writing stage 0 to the scratch: no space left on the device: .*-0"),
        ):
            Dataset.from_list(records, num_shards=1).collect()


def test_a_full_scratch_during_a_shuffle_names_the_run_file(tmp_path):
    """A shuffle's run file written through pyarrow met a full scratch: "no space left on the device: (path not
    reported)" (the write's OSError names no file)."""
    (tmp_path / "in").mkdir()
    rng = random.Random(0)
    records = [{"k": i % 50, "text": rng.randbytes(600).hex()} for i in range(2000)]  # 2.4 MB to scatter
    (tmp_path / "in" / "part-0.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in records))
    with _small_tmpfs(tmp_path / "scratch", "256k") as scratch:
        grouped = Dataset.from_files(str(tmp_path / "in" / "*.jsonl")).group_by("k", _count)
        with (
            execution(backend="local", scratch=str(scratch), summary=False, progress=False),
            pytest.raises(StorageError, match=r"no space left on the device: " + str(scratch) + r"/\S+\.arrow "),
        ):
            grouped.collect()


def _count(key, records):
    return {"k": key, "n": sum(1 for _ in records)}
