"""Statistics for comparing mixtures across seeds: spread, and paired differences with t intervals.

Why paired: run ``(candidate, seed s)`` and ``(baseline, seed s)`` share the
model initialisation and the data-order seed, so much of the seed-to-seed
noise cancels in their difference. The interval for the mean difference uses
Student's t with ``n - 1`` degrees of freedom (``n`` seeds): wide with two
seeds (t = 12.7 at 95%), which is honest: two seeds rarely settle a small
effect. Lower loss and bits per byte are better, so a candidate is ``better``
when the whole interval lies below zero, ``worse`` when it lies above, and
``inconclusive`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Spread", "PairedDifference", "Verdict", "spread", "paired_difference", "t_critical"]

Verdict = Literal["better", "worse", "inconclusive"]


def _t_dist():  # noqa: ANN202 - scipy.stats.t, imported late so the package imports without scipy
    try:
        from scipy import stats
    except ImportError as exc:  # pragma: no cover - scipy is part of the install
        raise ImportError("ablation reports need scipy for t intervals: pip install 'scipy>=1.11'") from exc
    return stats.t


def t_critical(confidence: float, dof: int) -> float:
    """Two-sided Student-t quantile: the half-width multiplier of a ``confidence`` interval."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    if dof < 1:
        return math.inf
    return float(_t_dist().ppf(0.5 + confidence / 2, dof))


@dataclass(frozen=True)
class Spread:
    """Mean and spread of one figure over seeds (``std`` is the sample standard deviation, nan for n < 2)."""

    n: int
    mean: float
    std: float
    min: float
    max: float


def spread(values: Sequence[float]) -> Spread:
    """Mean, sample standard deviation (nan below two values), min and max of `values`; all nan when empty."""
    vals = [float(v) for v in values]
    if not vals:
        nan = math.nan
        return Spread(0, nan, nan, nan, nan)
    n = len(vals)
    mean = math.fsum(vals) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else math.nan
    return Spread(n, mean, std, min(vals), max(vals))


@dataclass(frozen=True)
class PairedDifference:
    """``candidate - baseline`` paired by seed: mean, its confidence interval, p-value and verdict."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    std: float
    low: float
    high: float
    p_value: float
    confidence: float
    verdict: Verdict


def paired_difference(
    candidate: Mapping[int, float], baseline: Mapping[int, float], *, confidence: float = 0.95
) -> PairedDifference:
    """Compare per-seed values (lower is better) on the seeds both have.

    With one common seed the interval is infinite and the verdict
    inconclusive. With identical differences on every seed (zero spread) the
    interval collapses to that value: a consistent sign is then decisive.
    """
    seeds = tuple(sorted(set(candidate) & set(baseline)))
    diffs = tuple(float(candidate[s]) - float(baseline[s]) for s in seeds)
    n = len(diffs)
    if n == 0:
        nan = math.nan
        return PairedDifference((), (), nan, nan, -math.inf, math.inf, nan, confidence, "inconclusive")
    mean = math.fsum(diffs) / n
    if n == 1:
        return PairedDifference(seeds, diffs, mean, math.nan, -math.inf, math.inf, math.nan, confidence, "inconclusive")
    std = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    se = std / math.sqrt(n)
    half = t_critical(confidence, n - 1) * se
    low, high = mean - half, mean + half
    p_value = (1.0 if mean == 0 else 0.0) if se == 0 else float(2 * _t_dist().sf(abs(mean / se), n - 1))
    verdict: Verdict = "better" if high < 0 else "worse" if low > 0 else "inconclusive"
    return PairedDifference(seeds, diffs, mean, std, low, high, p_value, confidence, verdict)
