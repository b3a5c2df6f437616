"""What `make run` prints: the live view or log lines, one final summary, no per-job tables (issue #19)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_nemotron_recipe_prints_one_summary_not_a_table_per_engine_job(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_SCRATCH": str(tmp_path / "scratch")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "run",
            str(REPO / "recipes" / "nemotron_cc.py"),
            "--no-train",
            "--output",
            str(tmp_path / "out"),
            "--sample-docs-per-split",
            "30",
        ],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    steps = ["normalize", "exact_dedup", "fuzzy_dedup", "tokenize", "mixture"]
    tables = output.count("┏")  # rich tables (the old output had one per engine job: 22 + 14 counters tables)
    assert 1 <= tables <= len(steps) + 1, output
    assert "zephyr job summary" not in output and "zephyr run summary" not in output
    assert output.count("zephyr run succeeded") == 1
    for step in steps:  # not a terminal: plain log lines, one when each step starts and ends
        assert f"step {step}: running" in output and f"step {step}: done" in output
    assert "\x1b[" not in result.stderr.split("zephyr run succeeded")[0]  # no bars, no cursor moves
    # and the whole story is in the run record
    from zephyr.engine.run_record import read_run_records

    (record,) = read_run_records(str(tmp_path / "out"))
    assert [s["name"] for s in record["steps"]] == steps and record["status"] == "succeeded"
    assert record["steps"][1]["removed"] == {
        "duplicates": record["steps"][1]["docs_in"] - record["steps"][1]["docs_out"]
    }
    assert record["steps"][3]["tokens"] > 0 and len(record["jobs"]) > len(steps)
