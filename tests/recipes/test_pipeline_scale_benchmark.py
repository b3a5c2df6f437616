"""`benchmarks/pipeline_scale.py --quick` runs the Nemotron recipe's steps end to end and prints its figures.

The benchmark calls the recipe's step functions itself, so a change of a step's config keys broke it
silently once (`normalize` came to need `id_field`; the benchmark passed `config={}`): this keeps it
running (slow: ~15 s of pipelines)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_pipeline_scale_quick_reports_every_step(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pipeline_scale.py"), "--quick", "--tmp", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        cwd=REPO,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["bench"] == "pipeline_scale"
    run = next(value for key, value in figures.items() if key.startswith("nemotron_"))
    for step in ("normalize", "exact_dedup", "fuzzy_dedup", "tokenize"):
        assert run[step]["docs_in"] > 0 and run[step]["docs_s_cpu"] > 0 and run[step]["within_budget"]
    assert run["normalize"]["docs_in"] == run["documents"]
    assert 0 < run["total_2T_core_hours_cpu"] < 100_000
