"""Shared fixtures: the real test material in ../shared/data, and engine settings for tests."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# run records of lone engine jobs (library use) go to one temporary folder, not into the checkout
os.environ.setdefault("ZEPHYR_RUNS", tempfile.mkdtemp(prefix="zephyr-test-runs-"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout; tests that need it skip cleanly when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test material not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def scratch(tmp_path: Path) -> str:
    """A private scratch directory for the engine's shuffle files and checkpoints."""
    path = tmp_path / "scratch"
    path.mkdir()
    return str(path)
