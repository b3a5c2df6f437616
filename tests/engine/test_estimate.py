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
    from zephyr.engine.plan import plan

    _write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    pipeline = (
        Dataset.from_files(str(tmp_path / "in" / "*.jsonl"))
        .filter(lambda r: r["f"] >= 0)
        .group_by(lambda r: r["k"], lambda k, items: {"k": k, "n": sum(1 for _ in items)}, num_shards=2)
        .write(str(out / "part-{shard:05d}.jsonl"))
    )
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, dry_run=True, estimate=True) as config:
        run = pipeline.execute()
        estimates = estimate_plan(plan(pipeline, config), config, sample_shards=2)
    printed = capsys.readouterr().out
    assert run.outputs == [] and not out.exists()
    assert "estimate at full size" in printed and "scratch MB" in printed
    first, second = estimates
    assert first.records_in == 8 * 500  # 2 of 8 equal files sampled, scaled by 4
    assert first.scratch_bytes > 0 and second.scratch_bytes == 0
    assert second.records_out == 4 * 50  # groups are per sample: the estimate scales them too
