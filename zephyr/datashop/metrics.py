"""Agreement between a classifier and the LM it imitates, on held-out labels.

Accuracy and macro-F1 compare the nearest label value of each score (the classes fastText trains
on); Spearman compares the continuous scores, which is what a keep-fraction filter uses. The
majority-class accuracy is reported beside them so a figure can be read against the trivial baseline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from zephyr.datashop.classifiers import nearest_bin

__all__ = ["Agreement", "agreement", "macro_f1", "spearman", "average_ranks"]


@dataclass(frozen=True)
class Agreement:
    """How well predicted scores agree with held-out labels: accuracy, macro F1, Spearman correlation, mean
    absolute error, beside the accuracy of always answering the majority label (None where undefined)."""

    n: int
    accuracy: float | None
    macro_f1: float | None
    spearman: float | None
    majority_accuracy: float | None
    mean_abs_error: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def macro_f1(true: Sequence[int], pred: Sequence[int]) -> float:
    """Unweighted mean F1 over every class that occurs in `true` or `pred`."""
    t, p = np.asarray(true), np.asarray(pred)
    f1s = []
    for c in np.union1d(t, p):
        tp = float(np.sum((t == c) & (p == c)))
        fp = float(np.sum((t != c) & (p == c)))
        fn = float(np.sum((t == c) & (p != c)))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s)) if f1s else float("nan")


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1)
    values, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks, minlength=len(values))
    counts = np.bincount(inverse, minlength=len(values))
    return (sums / counts)[inverse]


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when either side is constant."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    value = float(np.corrcoef(average_ranks(x), average_ranks(y))[0, 1])
    return value if math.isfinite(value) else None


def agreement(lm_scores: Sequence[float], predicted: Sequence[float], bin_values: Sequence[float]) -> Agreement:
    """How well `predicted` reproduces `lm_scores` (same documents, same order)."""
    if len(lm_scores) != len(predicted):
        raise ValueError(f"agreement needs paired scores: {len(lm_scores)} LM scores vs {len(predicted)} predictions")
    n = len(lm_scores)
    if n == 0:
        return Agreement(0, None, None, None, None, None)
    t = nearest_bin(lm_scores, bin_values)
    p = nearest_bin(predicted, bin_values)
    majority = float(np.bincount(t).max() / n)
    mae = float(np.mean(np.abs(np.asarray(lm_scores, dtype=float) - np.asarray(predicted, dtype=float))))
    return Agreement(
        n=n,
        accuracy=float(np.mean(t == p)),
        macro_f1=macro_f1(t, p),
        spearman=spearman(lm_scores, predicted),
        majority_accuracy=majority,
        mean_abs_error=mae,
    )
