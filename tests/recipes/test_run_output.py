"""What `make run` prints: the live view or log lines, one final summary, no per-job tables (issue #19)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import run_in_pty

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
    from zephyr.engine.run.record import read_run_records

    (record,) = read_run_records(str(tmp_path / "out"))
    assert [s["name"] for s in record["steps"]] == steps and record["status"] == "succeeded"
    assert record["steps"][1]["removed"] == {
        "duplicates": record["steps"][1]["docs_in"] - record["steps"][1]["docs_out"]
    }
    assert record["steps"][3]["tokens"] > 0 and len(record["jobs"]) > len(steps)


@pytest.mark.timeout(600)
def test_the_recipe_ends_with_one_summary_after_the_live_view(tmp_path):
    """The end of `make run` in an 80-column terminal: the live view is closed before the summary prints (its
    `train 2/2 steps` row used to repaint between the recipe's lines), one table, the recipe's figures below
    it, only counters about the data, and the split tokens add up to the tokenize/tokens counter."""
    import re

    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_SCRATCH": str(tmp_path / "scratch"), "TERM": "xterm"}
    env.pop("COLUMNS", None)
    argv = [sys.executable, "-m", "zephyr.cli", "run", str(REPO / "recipes" / "nemotron_cc.py")]
    argv += ["--output", str(tmp_path / "out"), "--sample-docs-per-split", "25", "--train-steps", "2"]
    code, screen = run_in_pty(argv, env, timeout=540, columns=80)
    assert code == 0, screen
    end = screen[screen.index("zephyr run succeeded") :]
    assert not re.search(r"\x1b\[[0-9;]*[ABCDEFGHJK]", end), end  # no cursor moves: nothing redraws after it
    end = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", end)  # colors and the cursor shown again
    assert "steps" not in end.split("Nemotron-CC recipe summary", 1)[1].replace("training: 2 steps", "")
    assert end.count("┏") == 1 and "Nemotron-CC recipe summary" in end
    lines = [line.rstrip("\r") for line in end.splitlines()]
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    counters = " ".join(lines[lines.index(next(x for x in lines if x.startswith("counters: "))) :])
    for internal in ("sink/", "fuzzy_dedup/cc_unsettled", "fuzzy_dedup/candidate_edges_emitted"):
        assert internal not in counters
    total = next(x for x in lines if x.startswith("tokens: "))
    train, held_out, both = (int(n.replace(",", "")) for n in re.findall(r"[\d,]+\d", total)[:3])
    counted = int(re.search(r"tokenize/tokens=([\d,]+)", counters.replace(" ", "")).group(1).replace(",", ""))
    assert train + held_out == both == counted
