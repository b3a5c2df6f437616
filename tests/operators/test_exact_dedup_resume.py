"""Exact dedup resumes (issue #28 item 3, fault 5): its scratch folder is named by a digest of its work, not a
uuid, so a rerun after a kill -9 plans the same decision pass, reuses its checkpoints, and leaves nothing
of the killed run in scratch once it succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

import zephyr
from zephyr import Dataset, execution
from zephyr.operators.exact_dedup import dedup_documents

ROOT = Path(zephyr.__file__).resolve().parents[1]  # the zephyr under test, for the scripts it runs

SCRIPT = """
import sys, time
from zephyr import Dataset, execution
from zephyr.operators.exact_dedup import dedup_documents


def slow(doc):
    time.sleep(0.01)
    return doc


if __name__ == "__main__":
    scratch, out = sys.argv[1:3]
    docs = [{"id": i, "text": f"document number {i % 50}"} for i in range(600)]
    with execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False):
        docs = Dataset.from_list(docs, num_shards=12).map(slow)
        dedup_documents(docs, drop=True).write_jsonl(out + "/part-{shard:05d}.jsonl")
"""


def _start(script: Path, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "scratch"), str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the kill takes its workers too
    )


@pytest.mark.timeout(300)
def test_a_run_killed_in_exact_dedup_leaves_nothing_in_scratch_after_the_rerun(tmp_path):
    script = tmp_path / "dedup.py"
    script.write_text(SCRIPT)
    scratch = tmp_path / "scratch"
    killed = _start(script, tmp_path)
    deadline = time.monotonic() + 120
    while not list(scratch.glob("*/stage-0/*.done")) and time.monotonic() < deadline:  # in the decision pass
        assert killed.poll() is None, killed.communicate()
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    assert list(scratch.glob("exact-dedup-*")), "the kill came before exact dedup started"

    rerun = _start(script, tmp_path)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err.decode()
    assert sorted(p.relative_to(scratch).as_posix() for p in scratch.rglob("*")) == []
    texts = [
        orjson.loads(line)["text"]
        for part in (tmp_path / "out").glob("*.jsonl")
        for line in part.read_bytes().splitlines()
    ]
    assert len(texts) == 50 and len(set(texts)) == 50


def test_the_scratch_name_follows_the_work_not_the_run(tmp_path):
    docs = [{"id": i, "text": f"t {i % 3}"} for i in range(12)]
    with execution(backend="local", scratch=str(tmp_path / "scratch"), progress=False, summary=False):
        names = [dedup_documents(Dataset.from_list(docs, num_shards=2)).ops[-1].fn.table_url for _ in range(2)]
        other = dedup_documents(Dataset.from_list(docs, num_shards=2), text_field="body").ops[-1].fn.table_url
    assert names[0] == names[1] != other
