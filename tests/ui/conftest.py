"""Real outputs for the UI tests, produced once per session, and a real server on 127.0.0.1.

The recipe root comes from running recipes/nemotron_cc.py on a small embedded sample (every step, a
2-step training run), plus a parquet and a vortex copy of one step's documents written by the engine,
documents marked by real operators, and an ablation report written by zephyr.ablate.report.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ui_helpers import Server, _load_recipe, _write_ablation_report  # noqa: E402

_BROWSER_SKIP = "browser tests skipped: "


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """A browser test skipped for want of Chromium or Playwright is counted under its reason, so that pytest's
    last line says it ("10 browser tests skipped (no Chromium at /usr/bin/chromium: not root ...)") instead of
    folding it into the plain skipped count that nobody reads."""
    if report.skipped and isinstance(report.longrepr, tuple):
        message = report.longrepr[2].removeprefix("Skipped: ")
        if message.startswith(_BROWSER_SKIP):
            return f"browser tests skipped ({message[len(_BROWSER_SKIP) :]})", "s", "SKIPPED"
    return None


@pytest.fixture(scope="session")
def ui_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recipe output root (about a minute on 2 busy cores), shared by every UI test."""
    from zephyr import Dataset, execution
    from zephyr.operators import QualityFilter, dedup_documents
    from zephyr.operators.lineage import drop_removed

    root = tmp_path_factory.mktemp("ui") / "out"
    recipe = _load_recipe()
    argv = ["--output", str(root), "--sample-docs-per-split", "40", "--num-shards", "2", "--train-steps", "2"]
    scratch = str(root.parent / "scratch")
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        recipe.run(recipe.parse_args(argv))
        exact = next(root.glob("exact_dedup-*"))
        files = sorted(str(p) for p in exact.glob("part-*.jsonl.zst"))
        Dataset.from_files(files).write(str(root / "copies" / "parquet" / "part-{shard:05d}.parquet")).execute()
        Dataset.from_files(files).write(str(root / "copies" / "vortex" / "part-{shard:05d}.vortex")).execute()
        # documents marked, not dropped, by real operators (filter_reason from quality rules and exact dedup),
        # and the same marks turned into a drop with a lineage side output of several reasons
        normalized = sorted(str(p) for p in next(root.glob("normalize-*")).glob("*/part-*.jsonl.zst"))
        # dedup first: a rule marks only what has no reason yet, so the planted duplicates keep "exact_duplicate"
        # even where a copy also fails a quality rule
        marked = dedup_documents(Dataset.from_files(normalized), num_shards=2).map(QualityFilter())
        marked.write(str(root / "marked" / "part-{shard:05d}.jsonl.zst")).execute()
        drop_removed(marked, str(root / "quality" / "_removed")).write(
            str(root / "quality" / "part-{shard:05d}.jsonl.zst")
        ).execute()
    _write_ablation_report(root / "ablation")
    return root


@pytest.fixture(scope="session")
def ui_server(ui_root: Path):
    server = Server(ui_root)
    yield server
    server.stop()
