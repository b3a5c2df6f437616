"""The user documentation (README.md and docs/) names every ZEPHYR_* variable the code reads (docs/environment.md
lists them); one cache root with its old alias."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_names_every_environment_variable_the_code_reads():
    used = set()
    for path in (REPO / "zephyr").rglob("*.py"):
        used |= set(re.findall(r"\bZEPHYR_[A-Z_]+\b", path.read_text(encoding="utf-8")))
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    documentation = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    assert used, "the scan found the variables"
    missing = sorted(name for name in used if name not in documentation)
    assert not missing, f"README.md and docs/ do not mention {missing}"


def test_one_cache_root_with_the_old_name_as_alias(monkeypatch, tmp_path):
    import zephyr.cache
    from zephyr.cache import cache_root
    from zephyr.datashop.models import cache_root as datashop_cache_root
    from zephyr.tokenize.loader import tokenizer_cache_dir
    from zephyr.tokenize.store_format import store_cache_root

    monkeypatch.delenv("ZEPHYR_STORE_CACHE", raising=False)
    monkeypatch.setenv("ZEPHYR_CACHE_DIR", str(tmp_path / "new"))
    monkeypatch.setenv("ZEPHYR_CACHE", str(tmp_path / "old"))
    assert cache_root() == datashop_cache_root() == tmp_path / "new"
    assert tokenizer_cache_dir() == tmp_path / "new" / "tokenizers"
    assert store_cache_root() == tmp_path / "new" / "stores"
    monkeypatch.delenv("ZEPHYR_CACHE_DIR")
    monkeypatch.setattr(zephyr.cache, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert datashop_cache_root() == tokenizer_cache_dir().parent == tmp_path / "old"
    assert any("ZEPHYR_CACHE is deprecated" in str(w.message) for w in caught)
