"""py3langid's `classify` with its two inner loops in C (`langid_kernel.c`), giving the same (language, score)
to the last bit.

py3langid 0.4 classifies a text in four steps: encode it (lowercase when all upper case, NFC, UTF-8 with
lone surrogates passed through), walk a byte automaton that visits n-gram features and count them (a
Counter, so features in first-visit order), score `log1p(counts) @ table[features] + prior` in float32
(the table float16), then scale by 1/sqrt(bytes), softmax, fold alias columns and take the argmax. On the
real pages of ../shared/data (~3,000 bytes a page) the walk was ~45% of the time and the float16 gather
and cast ~25%; the kernel does both, and every other step here is py3langid's own expression on the same
float32 arrays, in the same order, so numpy and BLAS do the same arithmetic (tests/operators/
test_langid_native.py compares (language, score) with `==` on every real page and paragraph and on edge
texts). Without the kernel, `classify` calls py3langid's `classify` itself (said once per process).

The model's arrays are read from the LanguageIdentifier at each call (the class table, priors, classes and
alias pairs change with `set_languages`); only the automaton, which does not, is handed to the kernel once
per model.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from zephyr.native import optional_kernel

__all__ = ["classify", "kernel"]


def kernel() -> Any:
    """The C kernel (zephyr/operators/langid_kernel.c), or None when it was not built: py3langid's own
    `classify` then gives the same results, ~10x slower on pages, and that is said once per process."""
    return optional_kernel("zephyr.operators.langid_kernel")


@functools.lru_cache(maxsize=4)
def _walker(model: Any) -> Any:
    """The kernel's walker over `model`'s automaton (its 40 MB transition table shared, not copied), checked
    once (~5 ms); keyed by the model object."""
    return kernel().new_walker(
        np.asarray(model.tk_nextmove, dtype=np.uint32),
        np.asarray(model.tk_row, dtype=np.uint32),
        np.asarray(model.tk_output, dtype=np.int32),
    )


def _scores(model: Any, encoded: bytes, features: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """py3langid's LanguageIdentifier._decide for the text `encoded` (`model._encode`'s bytes), given the
    features the kernel's walk visited and their counts; the float16 table's rows gathered by the kernel."""
    from py3langid.langid import RAW_FLOOR

    if len(features):
        table = model.nb_ptc
        if table.dtype == np.float16 and table.flags.c_contiguous:
            rows = np.frombuffer(kernel().gather_rows(table, features), dtype=np.float32).reshape(len(features), -1)
        else:
            rows = table[features]
        scores = np.log1p(counts) @ rows + model.nb_pc
    else:
        scores = np.full(len(model.nb_classes), 0.0 if model._norm_probs else RAW_FLOOR, dtype=np.float32)
    if model._norm_probs:
        scores *= 1.0 / math.sqrt(len(encoded) or 1)
        np.exp(scores - scores.max(), out=scores)
        scores /= scores.sum()
    for i, j in model._alias_pairs:
        if model._norm_probs:
            scores[i] += scores[j]
            scores[j] = 0.0
        else:
            scores[i] = max(scores[i], scores[j])
            scores[j] = RAW_FLOOR
    return scores


def classify(model: Any, texts: Sequence[str | bytes]) -> list[tuple[str, float]]:
    """`model.classify(text)` (a py3langid LanguageIdentifier) for each text, bit for bit, with the kernel
    when it was built (and the model has py3langid 0.4's layout, which pyproject.toml pins)."""
    if kernel() is None or not hasattr(model, "_alias_pairs"):
        return [model.classify(text) for text in texts]
    encoded = [model._encode(text) for text in texts]
    features, counts, sizes = kernel().visit_counts(_walker(model), encoded)
    all_features = np.frombuffer(features, dtype=np.int64)
    all_counts = np.frombuffer(counts, dtype=np.float32)
    ends = np.cumsum(np.frombuffer(sizes, dtype=np.int64)).tolist()
    out = []
    start = 0
    for text, end in zip(encoded, ends, strict=True):
        scores = _scores(model, text, all_features[start:end], all_counts[start:end])
        start = end
        i = int(scores.argmax())
        confidence = float(scores[i])
        if model.min_confidence is not None and confidence < model.min_confidence:
            out.append(("und", confidence))
        else:
            out.append((model.nb_classes[i], confidence))
    return out
