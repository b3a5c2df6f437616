"""The MinHash C kernel (`minhash_kernel.c`) as Python sees it: loaded when it was built (else None, said
once per process), its character tables built from this Python's own Unicode data, and one call's results
as numpy arrays with their counters.

Kept apart from `minhash.py`, which holds the rules (normalization, shingles, permutations) and the numpy
path the kernel is tested against bit for bit (tests/operators/test_minhash.py) and falls back to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xxhash

from zephyr import counters
from zephyr.native import optional_kernel

__all__ = ["kernel", "tables", "sketch"]


def kernel() -> Any:
    """The C kernel (zephyr/operators/minhash_kernel.c), or None when it was not built: the numpy path
    of `minhash.py` gives the same bits, ~3x slower, and says so once per process."""
    return optional_kernel("zephyr.operators.minhash_kernel")


@functools.lru_cache(maxsize=1)
def tables(is_separator: Callable[[str], bool]) -> tuple[bytes, bytes, bytes]:
    """The C kernel's character tables, from this Python's own Unicode data (built once per process, ~0.1 s):
    a bit per code point of the Basic Multilingual Plane, set where `is_separator` (the normalization
    rule of `minhash.py`) says so; str.lower() of each of
    them as one code point (all ones where it is not one code point of its own: U+0130 lowers to two,
    U+03A3 to final or medial sigma by context, a lone surrogate cannot be encoded; the kernel hands
    such a text to str.lower()); and (code point, lowercase) pairs beyond the plane."""
    bits = np.zeros(0x10000, dtype=bool)
    bits[128:] = [is_separator(chr(code)) for code in range(128, 0x10000)]
    special = (0x130, 0x3A3)
    codes = np.arange(0x110000, dtype=np.uint32)
    plain = codes[((codes < 0xD800) | (codes > 0xDFFF)) & ~np.isin(codes, special)]
    text = plain.astype("<u4").tobytes().decode("utf-32-le")
    lowered = text.lower()  # one call: context rules touch only the code points left out
    lower = np.full(0x110000, 0xFFFF_FFFF, dtype=np.uint32)
    if len(lowered) == len(text):
        lower[plain] = np.frombuffer(lowered.encode("utf-32-le"), dtype="<u4")
    else:  # a Unicode version with another multi-character lowercase: one code point at a time
        lower[plain] = [ord(c.lower()) if len(c.lower()) == 1 else 0xFFFF_FFFF for c in text]
    astral = np.flatnonzero(lower[0x10000:] != codes[0x10000:]) + 0x10000
    return (
        np.packbits(bits, bitorder="little").tobytes(),
        lower[:0x10000].tobytes(),
        np.stack([astral, lower[astral]], axis=1).astype(np.uint32).tobytes(),
    )


def sketch(
    texts: Sequence[str],
    character_tables: tuple[bytes, bytes, bytes],
    ngram_constants: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    max_tokens_per_document: int,
    with_sets: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """One kernel call (`kernel()` must not be None): (signatures of shape (len(texts), len(a)), shingle
    counts, and with `with_sets` every document's sorted distinct shingle hashes back to back and their
    counts, else None, None). Counts minhash/long_words, documents_capped and tokens_not_shingled as the
    numpy path does."""
    signatures, counts, values, set_counts, (long_words, capped, cut) = kernel().sketch(
        texts,
        *character_tables,
        ngram_constants,
        a,
        b,
        max_tokens_per_document,
        with_sets,
        xxhash.xxh3_64_intdigest,
    )
    if long_words:
        counters.increment("minhash/long_words", long_words)
    if capped:
        counters.increment("minhash/documents_capped", capped)
        counters.increment("minhash/tokens_not_shingled", cut)
    signatures = np.frombuffer(signatures, dtype=np.uint32).reshape(len(texts), len(a))
    counts = np.frombuffer(counts, dtype=np.int64)
    if values is None:
        return signatures, counts, None, None
    return signatures, counts, np.frombuffer(values, dtype=np.uint64), np.frombuffer(set_counts, dtype=np.int64)
