"""CrossRegionGuardedFS against real servers on 127.0.0.1: the GCS emulator and moto's S3 server.

Every test runs on both stores. The machine's region is set with ZEPHYR_REGION; "near" buckets
are in (or contain) that region, "far" buckets are elsewhere.
"""

from __future__ import annotations

import json
import logging
import pickle
import threading
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.fs import expand_glob, open_url, url_to_fs
from zephyr.fs.region_guard import (
    ChargedReadFile,
    CrossRegionGuardedFS,
    bucket_location,
    is_cross_region,
    record_transfer,
)
from zephyr.fs.transfer_budget import CrossRegionBudgetExceeded, allow_cross_region, cross_region_bytes


@dataclass(frozen=True)
class Store:
    scheme: str
    region: str  # this machine
    near: str  # bucket name, same region
    far: str  # bucket name, other region
    near_location: str
    far_location: str

    def url(self, bucket: str, key: str) -> str:
        return f"{self.scheme}://{bucket}/{key}"


def _make_store(request, monkeypatch, kind: str) -> Store:
    if kind == "gcs":
        server = request.getfixturevalue("gcs_env")
        monkeypatch.setenv("ZEPHYR_REGION", "us-central1")
        return Store(
            "gs", "us-central1", server.create_bucket("US"), server.create_bucket("EUROPE-WEST4"), "us", "europe-west4"
        )
    server = request.getfixturevalue("s3_env")
    monkeypatch.setenv("ZEPHYR_REGION", "us-east-1")
    return Store(
        "s3",
        "us-east-1",
        server.create_bucket("us-east-1"),
        server.create_bucket("eu-west-1"),
        "us-east-1",
        "eu-west-1",
    )


@pytest.fixture(params=["gcs", "s3"])
def store(request, monkeypatch) -> Store:
    """Both stores: for the behaviour that depends on the client (gcsfs or s3fs)."""
    return _make_store(request, monkeypatch, request.param)


@pytest.fixture
def gcs_store(request, monkeypatch) -> Store:
    """One store: for budget logic that sits above the client (kept short: the suite has a time budget)."""
    return _make_store(request, monkeypatch, "gcs")


RECORDS = [
    {"id": f"doc-{i}", "text": f"document number {i} " * (1 + i % 7), "source": "test", "metadata": {"i": i}}
    for i in range(400)
]


def _write_samples(store: Store, bucket: str) -> tuple[str, str]:
    """A jsonl.zst and a parquet file written through open_url; returns their URLs."""
    jsonl = store.url(bucket, "data/docs.jsonl.zst")
    with open_url(jsonl, "wb") as handle:  # compression inferred from .zst
        for record in RECORDS:
            handle.write(json.dumps(record).encode() + b"\n")
    parquet = store.url(bucket, "data/docs.parquet")
    with open_url(parquet, "wb") as handle:
        pq.write_table(pa.Table.from_pylist([{k: r[k] for k in ("id", "text")} for r in RECORDS]), handle)
    return jsonl, parquet


def _size(url: str) -> int:
    fs, path = url_to_fs(url)
    fs.invalidate_cache(path)
    return fs.info(path)["size"]


def test_url_to_fs_gives_guarded_filesystems(store: Store) -> None:
    fs, path = url_to_fs(store.url(store.near, "a/b.txt"))
    assert isinstance(fs, CrossRegionGuardedFS)
    assert path == f"{store.near}/a/b.txt"
    clone = pickle.loads(pickle.dumps(fs))  # workers receive filesystems by pickle
    assert type(clone) is type(fs)


def test_bucket_location_comes_from_the_storage_api(store: Store) -> None:
    assert bucket_location(store.url(store.near, "x")) == store.near_location
    assert bucket_location(store.url(store.far, "x")) == store.far_location
    assert not is_cross_region(store.url(store.near, "x"))
    assert is_cross_region(store.url(store.far, "x"))


def test_same_region_jsonl_zst_and_parquet_round_trip_uncharged(store: Store) -> None:
    jsonl, parquet = _write_samples(store, store.near)
    with open_url(jsonl, "rb") as handle:
        assert [json.loads(line) for line in handle] == RECORDS
    with open_url(parquet, "rb") as handle:
        assert pq.read_table(handle).column("id").to_pylist() == [r["id"] for r in RECORDS]
    assert expand_glob(store.url(store.near, "data/*")) == sorted([jsonl, parquet])
    assert cross_region_bytes() == 0


def test_writes_are_never_charged_and_cross_region_reads_charge_bytes_read(store: Store) -> None:
    jsonl, parquet = _write_samples(store, store.far)
    assert cross_region_bytes() == 0  # writes to a far bucket cost nothing
    # a partial raw read is charged exactly what was read
    with open_url(jsonl, "rb", compression=None) as handle:
        assert isinstance(handle, ChargedReadFile)
        assert len(handle.read(100)) == 100
    assert cross_region_bytes() == 100
    # the whole compressed file: every byte once
    with open_url(jsonl, "rb") as handle:
        assert [json.loads(line) for line in handle] == RECORDS
    assert cross_region_bytes() == 100 + _size(jsonl)
    # text mode (TextIOWrapper over the charged file)
    before = cross_region_bytes()
    with open_url(jsonl, "rt") as handle:
        assert json.loads(handle.readline()) == RECORDS[0]
    assert cross_region_bytes() > before
    # parquet through pyarrow: footer plus column chunks
    before = cross_region_bytes()
    with open_url(parquet, "rb") as handle:
        table = pq.read_table(handle)
    assert table.num_rows == len(RECORDS)
    assert _size(parquet) <= cross_region_bytes() - before <= 2 * _size(parquet)


def test_cat_get_and_record_transfer_are_charged(store: Store, tmp_path) -> None:
    url = store.url(store.far, "blob.bin")
    payload = bytes(range(256)) * 40
    fs, path = url_to_fs(url)
    fs.pipe(path, payload)
    assert cross_region_bytes() == 0
    assert fs.cat(path) == payload
    assert cross_region_bytes() == len(payload)
    assert fs.cat_file(path, start=10, end=110) == payload[10:110]
    assert cross_region_bytes() == len(payload) + 100
    assert fs.cat_ranges([path, path], [0, 5], [10, 25]) == [payload[:10], payload[5:25]]
    assert cross_region_bytes() == len(payload) + 130
    fs.get(path, str(tmp_path / "blob.bin"))
    assert (tmp_path / "blob.bin").read_bytes() == payload
    assert cross_region_bytes() == 2 * len(payload) + 130
    assert record_transfer(url, 1000) == 1000
    assert record_transfer(store.url(store.near, "anything"), 1000) == 0
    assert cross_region_bytes() == 2 * len(payload) + 1130


def test_budget_exceeded_names_path_bytes_budget_and_variable(store: Store, monkeypatch) -> None:
    url = store.url(store.far, "big.bin")
    payload = b"z" * 5000
    fs, path = url_to_fs(url)
    fs.pipe(path, payload)
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "8000")
    assert fs.cat(path) == payload
    with pytest.raises(CrossRegionBudgetExceeded) as info:
        fs.cat(path)
    message = str(info.value)
    for needle in (url, "5,000 bytes", "8,000 bytes", "ZEPHYR_CROSS_REGION_BUDGET=", store.far_location, store.region):
        assert needle in message, (needle, message)
    assert cross_region_bytes() == 5000  # the refused cat moved nothing
    # a streaming read stops when it crosses the line
    with pytest.raises(CrossRegionBudgetExceeded), open_url(url, "rb", compression=None) as handle:
        while handle.read(1000):
            pass
    assert 8000 < cross_region_bytes() <= 9000
    with pytest.raises(CrossRegionBudgetExceeded):  # spent: opening for read is refused at once
        open_url(url, "rb")
    # writes and same-region reads still work
    fs.pipe(path + ".copy", b"ok")
    near_fs, near_path = url_to_fs(store.url(store.near, "small.bin"))
    near_fs.pipe(near_path, b"near")
    assert near_fs.cat(near_path) == b"near"


def test_overrides_let_reads_through_and_still_count(gcs_store: Store, monkeypatch) -> None:
    url = gcs_store.url(gcs_store.far, "o.bin")
    fs, path = url_to_fs(url)
    fs.pipe(path, b"x" * 3000)
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "1000")
    with pytest.raises(CrossRegionBudgetExceeded):
        fs.cat(path)
    with allow_cross_region():
        assert len(fs.cat(path)) == 3000
    monkeypatch.setenv("ZEPHYR_ALLOW_CROSS_REGION", "1")
    with open_url(url, "rb") as handle:
        assert len(handle.read()) == 3000
    monkeypatch.delenv("ZEPHYR_ALLOW_CROSS_REGION")
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "1GB")
    assert len(fs.cat(path)) == 3000
    assert cross_region_bytes() == 9000


def test_server_side_copy_between_regions_is_charged(store: Store) -> None:
    fs, src = url_to_fs(store.url(store.far, "c/src.bin"))
    fs.pipe(src, b"c" * 700)
    fs.copy(src, f"{store.far}/c/same-bucket.bin")
    assert cross_region_bytes() == 0
    fs.copy(src, f"{store.near}/c/dst.bin")
    assert cross_region_bytes() == 700
    assert fs.cat(f"{store.near}/c/dst.bin") == b"c" * 700
    assert cross_region_bytes() == 700  # reading the near copy is free


def test_unknown_machine_region_allows_reads_with_one_warning(gcs_store: Store, monkeypatch, caplog) -> None:
    monkeypatch.delenv("ZEPHYR_REGION")  # and GCE_METADATA_HOST points at a closed port (fs_state)
    url = gcs_store.url(gcs_store.far, "u.bin")
    fs, path = url_to_fs(url)
    fs.pipe(path, b"u" * 100)
    with caplog.at_level(logging.WARNING, logger="zephyr.fs"):
        assert fs.cat(path) == b"u" * 100
        with open_url(url, "rb") as handle:
            assert handle.read() == b"u" * 100
    assert cross_region_bytes() == 0
    assert len([r for r in caplog.records if "region of this machine is unknown" in r.getMessage()]) == 1


def test_concurrent_reads_from_threads_charge_exactly(gcs_store: Store) -> None:
    url = gcs_store.url(gcs_store.far, "t.bin")
    fs, path = url_to_fs(url)
    fs.pipe(path, b"t" * 1000)
    errors = []

    def work() -> None:
        try:
            for _ in range(5):
                with open_url(url, "rb") as handle:
                    assert handle.read() == b"t" * 1000
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cross_region_bytes() == 4 * 5 * 1000


def test_engine_formats_through_cloud_urls(store: Store) -> None:
    formats = pytest.importorskip("zephyr.engine.io")
    for bucket, charged in ((store.near, False), (store.far, True)):
        for name in ("f/docs.jsonl.zst", "f/docs.parquet"):
            url = store.url(bucket, name)
            formats.write_records(iter(RECORDS), url)
            before = cross_region_bytes()
            assert list(formats.read_records(url)) == RECORDS
            assert (cross_region_bytes() > before) is charged, (url, cross_region_bytes() - before)


def test_dataset_pipeline_reads_and_writes_cloud_urls(store: Store) -> None:
    from zephyr import Dataset, execution

    src = store.url(store.far, "in/part-0.jsonl.zst")
    with open_url(src, "wb") as handle:
        for record in RECORDS:
            handle.write(json.dumps(record).encode() + b"\n")
    with execution(backend="local"):
        outputs = (
            Dataset.from_files(store.url(store.far, "in/*.jsonl.zst"))
            .filter(lambda r: r["metadata"]["i"] % 2 == 0)
            .write_jsonl(store.url(store.near, "out/part-{shard:05d}-of-{total:05d}.jsonl.zst"))
        )
    assert len(outputs) == 1 and outputs[0].startswith(f"{store.scheme}://{store.near}/out/")
    with open_url(outputs[0], "rb") as handle:
        assert [json.loads(line)["id"] for line in handle] == [r["id"] for r in RECORDS[::2]]
    assert cross_region_bytes() >= _size(src)  # the far input was charged; the near output was not


def test_atomic_write_commits_whole_files_and_leaves_nothing_on_error(store: Store) -> None:
    from zephyr.fs import atomic_write

    ok = store.url(store.near, "aw/ok.jsonl.zst")
    with atomic_write(ok, "wb") as handle:
        handle.write(b'{"a": 1}\n' * 50_000)
    with open_url(ok, "rb") as handle:
        assert handle.read() == b'{"a": 1}\n' * 50_000
    empty = store.url(store.near, "aw/empty.txt")
    with atomic_write(empty, "w") as handle:
        handle.write("")
    assert _size(empty) == 0
    failed = store.url(store.near, "aw/failed.bin")
    # On S3 the write passes one upload block, so parts were already sent and the abort matters.
    # The GCS emulator answers 501 to cancelling a resumable upload (gcsfs then retries for ~30 s;
    # real GCS answers 499), so there the failure comes before the first block is sent.
    size = (6 << 20) if store.scheme == "s3" else (1 << 20)
    with pytest.raises(KeyError), atomic_write(failed, "wb", compression=None) as handle:
        handle.write(b"x" * size)
        raise KeyError("the writer failed")
    fs, path = url_to_fs(failed)
    fs.invalidate_cache()
    assert not fs.exists(path)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{store.near}/aw")) == ["empty.txt", "ok.jsonl.zst"]
