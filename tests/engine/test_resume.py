"""A run killed with SIGKILL mid-stage resumes from its checkpoints: no lost and no duplicated records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

SCRIPT = """
import argparse, time
from zephyr import Dataset

def slow(record):
    time.sleep(0.02)
    return {**record, "text": record["text"].upper()}

def by_bucket(bucket, items):
    for rank, r in enumerate(items):
        yield {"bucket": bucket, "rank": rank, "id": r["id"], "text": r["text"]}

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    records = [{"id": i, "text": f"doc {i} " + "x" * (i % 17)} for i in range(600)]
    (Dataset.from_list(records, num_shards=12)
        .map(slow)
        .group_by(lambda r: r["id"] % 7, by_bucket, sort_by=lambda r: -r["id"], num_shards=3)
        .write_jsonl(args.out + "/part-{shard:05d}-of-{total:05d}.jsonl.zst"))
"""


def _zephyr(script: Path, out: Path, scratch: Path) -> list[str]:
    # engine options before the script path; the script's own (--out) after it
    return [
        sys.executable,
        "-m",
        "zephyr.cli",
        "run",
        "--backend",
        "processes",
        "--workers",
        "2",
        "--scratch",
        str(scratch),
        str(script),
        "--out",
        str(out),
    ]


def _records(out: Path) -> list[dict]:
    from zephyr.engine.io import read_records

    found = []
    for path in sorted(out.glob("*.jsonl.zst")):
        found.extend(read_records(str(path)))
    return found


@pytest.mark.timeout(300)
def test_kill_9_mid_stage_then_rerun_is_identical_to_clean_run(tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    clean_out = tmp_path / "clean"
    subprocess.run(
        _zephyr(script, clean_out, tmp_path / "scratch-clean"), check=True, env=env, capture_output=True, timeout=240
    )

    out, scratch = tmp_path / "killed", tmp_path / "scratch"
    victim = subprocess.Popen(
        _zephyr(script, out, scratch),
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    done_files: list[Path] = []
    while time.monotonic() < deadline:
        done_files = list(scratch.glob("*/stage-0/shard-*.done"))
        if len(done_files) >= 4:
            break
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)  # the driver and its workers, mid-stage
    victim.wait(timeout=30)
    assert 4 <= len(done_files) < 12, "the kill should land while stage 0 is running"
    assert not list(out.glob("*.jsonl.zst")), "nothing should be written before the last stage"

    rerun = subprocess.run(
        _zephyr(script, out, scratch), check=True, env=env, capture_output=True, text=True, timeout=240
    )
    assert "resumed" in rerun.stderr, rerun.stderr

    clean, resumed = _records(clean_out), _records(out)
    assert len(clean) == 600
    assert resumed == clean  # record for record, file by file, in order
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean_out.iterdir())
    assert not scratch.exists() or not any(scratch.iterdir()), "scratch is cleaned after success"
    assert orjson.dumps(resumed) == orjson.dumps(clean)
