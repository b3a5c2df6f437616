"""`--dry-run --estimate`: a sample of the input shards runs, the figures are scaled to full size, and
nothing the real run would write is written."""

from __future__ import annotations

import json

from zephyr import Dataset, execution


def _write_inputs(folder, files=8, rows=500):
    folder.mkdir()
    for f in range(files):
        lines = [json.dumps({"k": i % 50, "text": "x" * 100, "f": f}) for i in range(rows)]
        (folder / f"part-{f:03d}.jsonl").write_text("\n".join(lines) + "\n")


def test_estimate_scales_a_sample_run_and_writes_nothing(tmp_path, capsys):
    from zephyr.engine.estimate import estimate_plan
    from zephyr.engine.executor import execute_plan
    from zephyr.engine.plan import plan

    _write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    pipeline = (
        Dataset.from_files(str(tmp_path / "in" / "*.jsonl"))
        .filter(lambda r: r["f"] >= 0)
        .group_by(lambda r: r["k"], lambda k, items: {"k": k, "n": sum(1 for _ in items)}, num_shards=2)
        .write(str(out / "part-{shard:05d}.jsonl"))
    )
    with execution(
        backend="local", scratch=str(tmp_path / "scratch"), summary=False, dry_run=True, estimate=True
    ) as config:
        run = pipeline.execute()
        estimates = estimate_plan(plan(pipeline, config), config, execute_plan, sample_shards=2)
    printed = capsys.readouterr().out
    assert run.outputs == [] and not out.exists()
    assert "estimate at full size" in printed and "scratch MB" in printed
    first, second = estimates
    assert first.records_in == 8 * 500  # 2 of 8 equal files sampled, scaled by 4
    assert first.scratch_bytes > 0 and second.scratch_bytes == 0
    assert second.records_out == 4 * 50  # groups are per sample: the estimate scales them too


ESTIMATE_SCRIPT = """
import sys
from zephyr import Dataset

def main():
    inputs, out = sys.argv[1], sys.argv[2]
    Dataset.from_files(inputs).group_by(lambda r: r["k"], lambda k, items: {"k": k, "n": sum(1 for _ in items)},
                                        num_shards=2).write(out + "/part-{shard:05d}.jsonl").execute()
"""


def test_zephyr_run_dry_run_estimate_prints_full_size_figures(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    _write_inputs(tmp_path / "in")
    script = tmp_path / "pipeline.py"
    script.write_text(ESTIMATE_SCRIPT)
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
            "--dry-run",
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
    assert "estimate at full size on 1 worker(s)" in done.stdout
    first_stage = next(line for line in done.stdout.splitlines() if line.strip().startswith("0 "))
    assert "4,000" in first_stage  # 8 files x 500 records, from a 2-file sample
    assert not out.exists()
