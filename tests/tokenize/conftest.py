"""The real storage servers of the filesystem tests (GCS emulator, moto S3), for token stores on buckets,
and a corpus of real article text to tokenize into them.

The servers live in ``tests/engine/conftest.py``; this loads that file under its own module name and
re-exports its fixtures, so both areas share one definition (each area starts its own server).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import orjson
import pytest
import zstandard

_spec = importlib.util.spec_from_file_location(
    "zephyr_tests_storage_servers", Path(__file__).resolve().parents[1] / "engine" / "conftest.py"
)
_servers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _servers  # dataclasses look their module up there
_spec.loader.exec_module(_servers)

gcs_server = _servers.gcs_server
s3_server = _servers.s3_server
fs_state = _servers.fs_state
gcs_env = _servers.gcs_env
s3_env = _servers.s3_env

REPO = Path(__file__).resolve().parents[2]
FALLBACK = [
    "A small offline sample, used when ../shared/data is absent.  It has runs   of spaces.",
    "Zweiter Text: Größe, Maß, 2024-11-22.\n\nDritter Absatz.",
    "第三个文档：中文文本。 第四句。",
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Three .jsonl.zst files of real article text (shared data), one empty text among them."""
    truth = REPO.parent / "shared" / "data" / "aeb-dev" / "ground-truth.json"
    if truth.is_file():
        items = sorted(json.loads(truth.read_text()).items())[:36]
        docs = [{"id": k, "text": v["articleBody"]} for k, v in items]
    else:
        docs = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(FALLBACK * 12)]
    docs.insert(5, {"id": "empty", "text": ""})
    folder = tmp_path / "in"
    folder.mkdir()
    for k in range(3):
        payload = b"\n".join(orjson.dumps(d) for d in docs[k::3]) + b"\n"
        (folder / f"part-{k}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(payload))
    return folder


@pytest.fixture
def bucket(gcs_env, monkeypatch, tmp_path) -> str:
    """A fresh emulator bucket; the store cache in tmp_path, its chunk cache bounded to 8 MB."""
    monkeypatch.setenv("ZEPHYR_STORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ZEPHYR_STORE_CACHE_MAX", "8MB")
    return gcs_env.create_bucket("US")
