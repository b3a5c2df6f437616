"""Zephyr's one cache root: `$ZEPHYR_CACHE_DIR`, else `~/.cache/zephyr` (`$ZEPHYR_CACHE` is an old alias).

What lives under it (all safe to delete; each is refilled on next use):

    tokenizers/   the SmolLM2 tokenizer extracted from its GGUF (~2 MB)
    models/       Datashop's labeler model exported for transformers / vLLM (~500 MB for SmolLM2-135M)
    jax/          JAX's compiled programs for ablation and training runs (tens of MB)
    stores/       `.chunks/`, the chunk cache of bucket token stores read by byte ranges (at most
                  `$ZEPHYR_STORE_CACHE_MAX`, default 4 GiB), and whole copies asked for with `copy=True`
                  (as big as the stores); `$ZEPHYR_STORE_CACHE` moves it
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["cache_root"]

_warned = False


def cache_root() -> Path:
    """The cache directory; `$ZEPHYR_CACHE_DIR`, else the deprecated `$ZEPHYR_CACHE`, else ~/.cache/zephyr."""
    global _warned
    value = os.environ.get("ZEPHYR_CACHE_DIR")
    if not value and os.environ.get("ZEPHYR_CACHE"):
        value = os.environ["ZEPHYR_CACHE"]
        if not _warned:
            _warned = True
            warnings.warn(
                "ZEPHYR_CACHE is deprecated: set ZEPHYR_CACHE_DIR (the same cache root) instead",
                DeprecationWarning,
                stacklevel=2,
            )
    return Path(value or Path.home() / ".cache" / "zephyr").expanduser()
