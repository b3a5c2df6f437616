"""Datashop test fixtures; the corpus helpers live in datashop_corpus.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from datashop_corpus import page_documents, pydoc_documents


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vllm: needs vLLM (its own venv: make test-vllm); skipped elsewhere")


@pytest.fixture(scope="session")
def corpus_docs(shared_data: Path) -> list[dict]:
    """48 real documents: 16 news/blog pages, 16 web pages, 16 Python reference sections."""
    return page_documents(shared_data, 16, 16) + pydoc_documents(16)


@pytest.fixture(scope="session")
def smol_backend():
    """The default labeling backend (packaged SmolLM2-135M-Instruct on CPU), loaded once per session."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from zephyr.datashop.config import LabelerConfig
    from zephyr.datashop.labeling import make_backend

    try:
        return make_backend(LabelerConfig(backend="transformers", max_example_tokens=128))
    except ImportError as exc:
        pytest.skip(f"default model unavailable: {exc}")
