"""murmur3's 64-bit finalizer over NumPy arrays: the twin of zephyr/fmix64.h, which the C kernels use.

MinHash chains a word's 8-byte chunks through it (its C kernel must give the same bits), and
`Dataset.aggregate` spreads int keys over shuffle targets with it (consecutive ints land everywhere).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fmix64"]

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def fmix64(x: np.ndarray) -> np.ndarray:
    """`x` (uint64) mixed in place, and returned: every output bit depends on every input bit."""
    x ^= x >> _S33
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x
