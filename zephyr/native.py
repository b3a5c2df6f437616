"""The project's optional C kernels, loaded in one place.

Each kernel (`setup`'s ext-modules in pyproject.toml, built by `make install`) has a Python path that gives
the same results and is what the kernel is tested against, so a checkout without a compiler still runs,
slower. Whoever wants a kernel asks `optional_kernel`: it is imported once, and when it was not built that is
said once per process, with what the fallback costs, instead of each user module trying the import and
wording the warning its own way.
"""

from __future__ import annotations

import functools
import importlib
import logging
from types import ModuleType

__all__ = ["FALLBACK_COST", "optional_kernel"]

# What running without each kernel costs (measured where each kernel's Python side says).
FALLBACK_COST = {
    "zephyr.operators.minhash_kernel": "MinHash runs on numpy, about 3x slower",
    "zephyr.operators.extract_kernel": (
        "extraction measures text, matches class hints, checks UTF-8 and collapses whitespace in Python, "
        "about 20% slower"
    ),
    "zephyr.operators.langid_kernel": "language id runs py3langid's own classify, about 10x slower on pages",
    "zephyr.tokenize.bpe_kernel": "tokenization runs on tiktoken, about 2x slower",
    "zephyr.operators.quality_kernel": "quality signals count words and n-grams with NumPy, about 2x slower",
}


@functools.cache
def optional_kernel(name: str) -> ModuleType | None:
    """The compiled kernel `name` (a key of `FALLBACK_COST`), or None when it was not built."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        logging.getLogger(__name__).warning(
            "%s is not built (%s): %s; build it with `make install` (pip install -e .), which needs gcc and the "
            "Python headers",
            name,
            exc,
            FALLBACK_COST[name],
        )
        return None
