"""The extraction benchmark runs end to end and reports all three extractors (slow: runs trafilatura)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_extraction_benchmark_quick(shared_data):
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "extraction.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["bench"] == "extraction" and figures["pages"] == 20
    for name in ("ours", "resiliparse", "trafilatura"):
        assert 0.5 < figures[f"{name}_f1"] <= 1.0 and figures[f"{name}_pages_s"] > 0
    assert figures["ours_f1"] >= figures["trafilatura_f1"]
