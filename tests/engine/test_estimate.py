"""`--estimate`: runs on a sample of the input shards and on half of it, the figures grown to full size (a
power law for counts, so distinct keys are not scaled as if linear), and nothing the real run would write
is written; for recipes, every step runs on the samples (zephyr.step_estimate)."""

from __future__ import annotations

import json

import pytest

from zephyr import Dataset, execution
from zephyr.engine.estimate import extrapolate_count, extrapolate_time, sampled_shards


def _write_inputs(folder, files=8, rows=500, keys=50):
    folder.mkdir()
    for f in range(files):
        lines = [
            json.dumps({"k": i % keys, "u": f"{f * rows + i:08d}", "text": "x" * 100, "f": f + 100})
            for i in range(rows)
        ]
        (folder / f"part-{f:03d}.jsonl").write_text("\n".join(lines) + "\n")


def _count(key, items):
    return {"k": key, "n": sum(1 for _ in items)}


def test_sampled_shards_are_spread_nested_and_at_least_two():
    assert sampled_shards(1, 0.1, False) == [0] == sampled_shards(1, 0.1, True)
    assert sampled_shards(8, 0.1, False) == [0, 4] and sampled_shards(8, 0.1, True) == [0]
    assert sampled_shards(100, 0.1, False) == list(range(0, 100, 10))
    assert set(sampled_shards(100, 0.1, True)) < set(sampled_shards(100, 0.1, False))


def test_growth_curves():
    assert extrapolate_count(0.1, 100, 0.2, 200) == pytest.approx(1000)  # linear
    assert extrapolate_count(0.1, 50, 0.2, 50) == 50  # saturated keys
    assert extrapolate_count(0.01, 100, 0.04, 200) == pytest.approx(1000)  # square root (Heaps-like)
    assert extrapolate_time(0.1, 3.0, 0.2, 4.0) == pytest.approx(12.0)  # 2 s fixed + 10 s of work
    assert extrapolate_time(0.1, 4.0, 0.2, 3.9) == 3.9  # noise that falls counts as flat


def test_estimate_grows_a_sample_run_and_writes_nothing(tmp_path, capsys):
    from zephyr.engine.estimate import estimate_plan
    from zephyr.engine.executor import execute_plan
    from zephyr.engine.plan import plan

    _write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    pipeline = (
        Dataset.from_files(str(tmp_path / "in" / "*.jsonl"))
        .filter(lambda r: r["f"] >= 0)
        .group_by(lambda r: r["k"], _count, num_shards=2)
        .write(str(out / "part-{shard:05d}.jsonl"))
    )
    with execution(
        backend="local", scratch=str(tmp_path / "scratch"), summary=False, dry_run=True, estimate=True
    ) as config:
        run = pipeline.execute()
        estimates = estimate_plan(plan(pipeline, config), config, execute_plan, fraction=0.25)
    printed = capsys.readouterr().out
    assert run.outputs == [] and not out.exists()
    assert "estimate at full size" in printed and "scratch MB" in printed and "core-hours" in printed
    first, second = estimates
    assert first.records_in == 8 * 500  # 2 of 8 equal files sampled, 1 in the half sample: linear growth
    assert first.scratch_bytes > 0 and second.scratch_bytes == 0
    # 50 keys in every file: 50 groups at any size (a linear scale-up from 2 files said 200)
    assert second.records_out == 50


def test_distinct_keys_that_keep_growing_are_estimated_from_their_growth(tmp_path):
    from zephyr.engine.estimate import estimate_plan
    from zephyr.engine.executor import execute_plan
    from zephyr.engine.plan import plan

    _write_inputs(tmp_path / "in", files=16, rows=200, keys=10**9)  # every record its own key ("u" below)
    pipeline = Dataset.from_files(str(tmp_path / "in" / "*.jsonl")).group_by(lambda r: r["u"], _count, num_shards=2)
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False) as config:
        estimates = estimate_plan(plan(pipeline, config), config, execute_plan, fraction=0.25)
    assert estimates[-1].records_out == 16 * 200


STEPS_SCRIPT = """
import sys
from zephyr import Dataset
from zephyr.steps import StepRunner

def summary(run):
    return {"documents_in": run.stages[0].records_in, "documents_out": run.stages[-1].records_out}

def copy(path, *, config, docs):
    return summary(Dataset.from_files(docs).map(lambda r: {**r, "c": 1}).write(path + "/p-{shard}.jsonl").execute())

def count(path, *, config, docs):
    grouped = Dataset.from_files(docs + "/*.jsonl").group_by(lambda r: r["k"], lambda k, items: {"k": k}, num_shards=2)
    return summary(grouped.write(path + "/p-{shard}.jsonl").execute())

def main():
    inputs, out = sys.argv[1], sys.argv[2]
    with StepRunner(out) as steps:
        copied = steps.run("copy", copy, inputs={"docs": inputs})
        steps.run("count", count, inputs={"docs": copied})
"""


def test_zephyr_run_estimate_runs_every_step_on_samples(tmp_path):
    """Each step after the first reads what the previous one wrote: a dry run could not estimate them
    ("no estimate: the plan reads the output of ..."); the estimate runs them on samples."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    _write_inputs(tmp_path / "in", files=20, rows=100)
    script = tmp_path / "recipe.py"
    script.write_text(STEPS_SCRIPT)
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "run",
            "--backend",
            "local",
            "--scratch",
            str(tmp_path / "scratch"),
            "--estimate",
            str(script),
            str(tmp_path / "in" / "*.jsonl"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr
    assert "no estimate" not in done.stdout
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.startswith("  co")}
    assert rows["copy"][1:3] == ["2,000", "2,000"]  # 20 files x 100 records, from samples of 2 and 1 files
    assert rows["count"][1:3] == ["2,000", "50"]  # 50 keys, however many files
    assert "core-hours" in done.stdout and not out.exists()


def test_sample_plan_samples_raw_inputs_and_reads_the_estimates_own_outputs_whole(tmp_path):
    from zephyr.engine.context import InputSample, current_config
    from zephyr.engine.estimate import sample_plan
    from zephyr.engine.plan import plan

    _write_inputs(tmp_path / "in", files=10, rows=5)
    files = Dataset.from_files(str(tmp_path / "in" / "*.jsonl"))
    for folder in ("crawl", "work/sample"):  # files an op reads itself (WARC): the `path` format
        (tmp_path / folder).mkdir(parents=True)
        for i in range(10):
            (tmp_path / folder / f"{i}.warc.gz").write_bytes(b"x" * 100)
    raw = Dataset.from_files(str(tmp_path / "crawl" / "*.warc.gz"), format="path")
    own = Dataset.from_files(str(tmp_path / "work" / "sample" / "*.warc.gz"), format="path")
    names = [{"path": f"/data/crawl/{i}.warc.gz"} for i in range(10)]
    sample = InputSample(0.2, exempt=(str(tmp_path / "work"),))
    config = current_config()
    for dataset, kept in (
        (files, 2),
        (raw, 2),
        (own, 10),  # the estimate's own step output
        (Dataset.from_list(names, num_shards=10), 10),  # in-memory records are data, not inputs to sample
    ):
        sampled = sample_plan(plan(dataset.map(lambda r: r), config), sample)
        assert sampled.stages[0].num_shards == kept
    half = sample_plan(plan(files, config), InputSample(0.2, half=True))
    assert half.stages[0].num_shards == 1 and half.sampled[0][0] * 10 == half.sampled[0][1]
