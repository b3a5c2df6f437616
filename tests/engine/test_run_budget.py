"""One cross-region budget per run, not per worker process (issue #23 item 5), on the processes backend
against the real GCS emulator: files in a EUROPE-WEST4 bucket read by workers in us-central1.

Six files of ~300 KB under a 1.3 MB budget: each of two workers reads ~0.9 MB (a worker would need 5 of
the 6 files to pass a per-process budget of 1.3 MB, so the old per-process budget let all 1.8 MB
through); the run as a whole must stop at 1.3 MB.
The Ray side (a ledger actor, workers on two nodes) is in test_ray_multinode."""

from __future__ import annotations

import os
import re

import orjson
import pytest

from zephyr import Dataset, UserCodeError, execution
from zephyr.fs import url_to_fs
from zephyr.fs.transfer_budget import CrossRegionBudgetExceeded

FILE_BYTES = 300_000


def write_far_files(bucket: str, count: int = 6) -> list[str]:
    """`count` jsonl files of ~300 KB of incompressible text in `bucket`; returns their URLs."""
    fs, _ = url_to_fs(f"gs://{bucket}")
    urls = []
    for k in range(count):
        lines = [orjson.dumps({"id": f"{k}-{i}", "text": os.urandom(1200).hex()}) for i in range(FILE_BYTES // 2420)]
        fs.pipe(f"{bucket}/far/part-{k}.jsonl", b"\n".join(lines) + b"\n")
        urls.append(f"gs://{bucket}/far/part-{k}.jsonl")
    fs.invalidate_cache()
    return urls


def assert_run_refusal(error: BaseException, bucket: str, budget: int) -> None:
    """The refusal names the file, both regions, the run's total so far and the override."""
    message = str(error)
    assert re.search(rf"gs://{bucket}/far/part-\d\.jsonl is stored in 'europe-west4'", message), message
    assert "machine is in 'us-central1'" in message
    assert "this run's cross-region transfer (all workers together)" in message
    total = int(
        re.search(r"the run has read .*?\(([\d,]+) bytes\) across regions so far", message).group(1).replace(",", "")
    )
    # what the run (both workers) read before this read: near the budget, past it at most by bytes a
    # streaming read had already received when it was charged (recorded, as they were paid for)
    assert budget - FILE_BYTES < total <= budget + FILE_BYTES
    assert "ZEPHYR_CROSS_REGION_BUDGET=" in message and "environment of the driver" in message


@pytest.fixture
def far(gcs_env, monkeypatch):
    monkeypatch.setenv("ZEPHYR_REGION", "us-central1")
    bucket = gcs_env.create_bucket("EUROPE-WEST4")
    return bucket, write_far_files(bucket)


def test_workers_share_one_budget_per_run(far, monkeypatch, scratch):
    bucket, urls = far
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "1300000")
    with (
        execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False, max_user_retries=0),
        pytest.raises((CrossRegionBudgetExceeded, UserCodeError)) as raised,
    ):
        Dataset.from_files(urls).map(lambda r: len(r["text"])).collect()
    assert_run_refusal(raised.value, bucket, 1_300_000)


def test_a_budget_the_run_fits_in_passes_and_the_next_run_starts_from_zero(far, monkeypatch, scratch):
    _, urls = far
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "2500000")
    with execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False):
        for _ in range(2):  # the same pool twice: each run has its own 2.5 MB
            result = Dataset.from_files(urls).map(lambda r: len(r["text"])).execute()
            assert len(result.outputs) == 6 * (FILE_BYTES // 2420)
            assert 6 * FILE_BYTES * 0.95 < result.counters["fs/cross_region_bytes"] <= 2_500_000
