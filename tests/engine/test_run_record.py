"""Run records ("zephyr.run/1", docs/RUN_RECORD.md) and what a run prints, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from terminal import run_in_pty

from zephyr.engine.run.record import FORMAT, read_run_records

REPO = Path(__file__).resolve().parents[2]

FLAKY_SCRIPT = """
import os, sys
from zephyr import Dataset

MARKS = sys.argv[1]

def fail_once(record):
    mark = os.path.join(MARKS, f"seen-{record['shard']}")
    if record["i"] == 0 and not os.path.exists(mark):
        open(mark, "w").close()
        raise RuntimeError(f"first attempt of shard {record['shard']} fails")
    return record

def main():
    records = [{"shard": s, "i": i} for s in range(3) for i in range(5)]
    Dataset.from_list(records, num_shards=3).map(fail_once).write_jsonl(sys.argv[2] + "/part-{shard:05d}.jsonl")
"""

SLOW_STEPS_SCRIPT = """
import sys, time
from zephyr import Dataset
from zephyr.steps import StepRunner

def slow(record):
    time.sleep(0.25)
    return record

def step(path, *, config):
    dataset = Dataset.from_list([{"i": i} for i in range(12)], num_shards=12).map(slow)
    run = dataset.write(path + "/part-{shard:05d}.jsonl").execute()
    return {"documents_in": 12, "documents_out": run.stages[-1].records_out}

def main():
    StepRunner(sys.argv[1]).run("slow_step", step, config={})
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_RUNS": str(tmp_path / "runs-fallback"), "COLUMNS": "120"}


def test_zephyr_run_writes_a_record_with_stages_and_retries_naming_the_worker(tmp_path):
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY_SCRIPT)
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "run",
            "--backend",
            "processes",
            "--workers",
            "2",
            "--scratch",
            str(tmp_path / "scratch"),
            str(script),
            str(marks),
            str(out),
        ],
        env=_env(tmp_path),
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    records = read_run_records(str(out))
    assert len(records) == 1
    record = records[0]
    assert record["format"] == FORMAT and record["status"] == "succeeded"
    assert record["script"] == str(script) and record["backend"] == "processes" and record["workers"] == 2
    assert re.fullmatch(r"\d{8}T\d{6}-\d+", record["run_id"]) and record["finished_at"]
    assert record["versions"]["python"] and record["versions"]["pyarrow"]
    assert record["steps"] == [] and len(record["jobs"]) == 1
    job = record["jobs"][0]
    assert job["status"] == "succeeded" and job["step"] is None
    (stage,) = job["stages"]
    assert stage["name"].startswith("from_list(15) -> map(fail_once) -> write_jsonl(")
    assert stage["shards"] == stage["shards_done"] == 3 and stage["records_out"] == 15
    assert len(stage["retries"]) == 3
    for retry in stage["retries"]:
        assert retry["kind"] == "user" and retry["attempt"] == 0
        assert "first attempt of shard" in retry["error"] and "\n" not in retry["error"]
        assert isinstance(retry["worker_pid"], int) and retry["worker_pid"] != record["pid"]
        assert retry["worker_host"]
    # nothing half-written is left beside it, and the plain (non-terminal) output has no bars
    assert [p.name for p in (out / "_runs").iterdir() if p.name.startswith(".")] == []
    assert "━" not in result.stderr.split("zephyr run succeeded")[0]


def test_failed_run_records_the_error_in_one_line(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        "from zephyr import Dataset\n"
        "def main():\n"
        f"    Dataset.from_files({str(tmp_path / 'none' / '*.jsonl')!r}).write_jsonl("
        f"{str(tmp_path / 'out')!r} + '/p-{{shard}}.jsonl')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "run", "--backend", "local", str(script)],
        env=_env(tmp_path),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    (record,) = read_run_records(str(tmp_path / "runs-fallback"))
    assert record["status"] == "failed"
    assert record["error"]["type"] == "BadInputError" and "no files match" in record["error"]["message"]


def test_step_runner_keeps_its_own_record_outside_zephyr_run(tmp_path):
    from zephyr import Dataset, execution
    from zephyr.steps import StepRunner

    def step(path, *, config):
        Dataset.from_list([{"v": 1}, {"v": 2}]).write_jsonl(path + "/part-{shard:05d}.jsonl")
        return {"documents_in": 3, "documents_out": 2}

    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
        runner = StepRunner(str(tmp_path / "root"))
        runner.run("first", step, config={"a": 1})
        runner.run("first", step, config={"a": 1})
    (record,) = read_run_records(str(tmp_path))
    assert record["status"] == "succeeded"
    assert [(s["name"], s["status"]) for s in record["steps"]] == [("first", "done"), ("first", "cached")]
    assert record["steps"][0]["docs_in"] == 3 and record["steps"][0]["removed"] == {"dropped": 1}
    assert [j["step"] for j in record["jobs"]] == ["first"]


def test_reader_skips_temporary_and_foreign_files(tmp_path):
    runs = tmp_path / "a" / "_runs"
    runs.mkdir(parents=True)
    good = {
        "format": FORMAT,
        "run_id": "20260101T000000-1",
        "status": "succeeded",
        "started_at": "2026-01-01T00:00:00Z",
    }
    newer = {**good, "run_id": "20260102T000000-1", "started_at": "2026-01-02T00:00:00Z"}
    (runs / "20260101T000000-1.json").write_text(json.dumps(good))
    (runs / "20260102T000000-1.json").write_text(json.dumps(newer))
    (runs / ".tmp-20260103T000000-1.json").write_text(json.dumps(good))
    (runs / "other.json").write_text(json.dumps({"format": "something else"}))
    (runs / "broken.json").write_text("{")
    assert [r["run_id"] for r in read_run_records(str(tmp_path))] == ["20260102T000000-1", "20260101T000000-1"]


def test_terminal_shows_step_and_stage_progress_with_rates_and_eta(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(SLOW_STEPS_SCRIPT)
    code, screen = run_in_pty(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "run",
            "--backend",
            "local",
            "--scratch",
            str(tmp_path / "scratch"),
            str(script),
            str(tmp_path / "root"),
        ],
        _env(tmp_path),
        timeout=120,
    )
    assert code == 0, screen
    assert "step slow_step" in screen  # the step's row in the live view
    assert re.search(r"\d+/12 shards", screen)
    assert re.search(r"[\d.]+[KMG]? rec/s", screen), screen
    assert re.search(r"ETA \d+s", screen), screen
    assert "map(slow)" in screen
    # one final table, no per-job table
    assert screen.count("zephyr run succeeded") == 1 and "zephyr job summary" not in screen


def test_verbose_adds_job_tables_and_quiet_prints_no_table(tmp_path):
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY_SCRIPT)
    outputs = {}
    for flag in ("-v", "-q"):
        marks = tmp_path / f"marks{flag}"
        marks.mkdir()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "zephyr.cli",
                "run",
                flag,
                "--backend",
                "local",
                "--scratch",
                str(tmp_path / f"scratch{flag}"),
                str(script),
                str(marks),
                str(tmp_path / f"out{flag}"),
            ],
            env=_env(tmp_path),
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        outputs[flag] = result.stderr + result.stdout
    assert "zephyr job summary" in outputs["-v"] and "zephyr run succeeded" in outputs["-v"]
    assert outputs["-q"] == ""


def test_task_progress_logs_plain_lines_and_is_silent_when_quiet(capsys, monkeypatch):
    from zephyr.progress import set_verbosity, task_progress

    monkeypatch.setenv("ZEPHYR_VERBOSITY", "0")
    with task_progress("label", total=4, unit="docs", log_every_s=0.0) as progress:
        progress.advance(2)
        progress.set(4, note="mean score 2.5")
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("label: 2/4 docs") and "ETA" in line for line in lines), lines
    assert lines[-1].startswith("label: done, 4 docs in")
    set_verbosity(-1)
    with task_progress("label", total=4, unit="docs", log_every_s=0.0) as progress:
        progress.advance(4)
    assert capsys.readouterr().err == ""


ONE_SLOW_SHARD = """
import time
from zephyr import Dataset

def slow(record):
    time.sleep(0.1)
    return record

def main():
    Dataset.from_list([{"i": i} for i in range(40)], num_shards=1).map(slow).collect()
"""


def test_terminal_shows_records_of_a_running_shard_before_it_finishes(tmp_path):
    """Worker heartbeats: a shard still running shows the records it has read (not `0 rec` until it ends)."""
    script = tmp_path / "one_shard.py"
    script.write_text(ONE_SLOW_SHARD)
    code, screen = run_in_pty(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "run",
            "--backend",
            "processes",
            "--workers",
            "1",
            "--scratch",
            str(tmp_path / "scratch"),
            str(script),
        ],
        _env(tmp_path),
        timeout=120,
    )
    assert code == 0, screen
    running = [int(n) for n in re.findall(r"0/1 shards\s+(\d+) rec", screen)]
    assert any(0 < n < 40 for n in running), screen


def test_counts_and_bytes_read_differently():
    from zephyr.progress import format_bytes, format_count

    assert format_count(1_200_000_000) == "1.20G" and format_count(12_345) == "12.3K" and format_count(950) == "950"
    assert format_bytes(1_200_000_000) == "1.1 GB" and format_bytes(512) == "512 B"
    assert not format_count(1_200_000_000).endswith("B")  # "1.20B records" read like bytes


def test_summary_of_a_run_that_failed_before_any_stage_prints_no_empty_table(capsys):
    # A cluster error (no raylet, a lost connection) ends a run before any stage is recorded: the
    # summary used to print an empty table above the one-line error.
    from zephyr.engine.run.progress import print_run_summary

    print_run_summary({"status": "failed", "seconds": 1.2, "command": ["zephyr", "run"], "jobs": [{"job": 0}]})
    assert "records in" not in capsys.readouterr().err


def test_progress_false_also_silences_the_plain_stage_lines(capsys, monkeypatch, tmp_path):
    # Without a terminal a stage logs a progress line every 30 s; progress=False used to keep them
    # (a benchmark's output filled with "stage 1 ...: 1/2 shards ... ETA" lines).
    from zephyr import Dataset, execution
    from zephyr.engine.run import progress

    monkeypatch.setattr(progress, "PLAIN_LOG_EVERY_S", 0.0)
    records = [{"i": i} for i in range(40)]
    for enabled in (None, False):
        with execution(backend="local", scratch=str(tmp_path / "s"), progress=enabled, summary=False):
            Dataset.from_list(records, num_shards=4).map(dict).collect()
        lines = [line for line in capsys.readouterr().err.splitlines() if "shards" in line and "rec" in line]
        assert bool(lines) == (enabled is None), (enabled, lines)
