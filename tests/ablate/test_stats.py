"""Paired differences and their t intervals, checked against scipy's own paired t-test."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from zephyr.ablate.stats import paired_difference, spread, t_critical


def test_t_critical_matches_textbook_values() -> None:
    assert t_critical(0.95, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_critical(0.95, 2) == pytest.approx(4.303, abs=1e-3)
    assert t_critical(0.90, 4) == pytest.approx(2.132, abs=1e-3)
    assert t_critical(0.95, 0) == math.inf
    with pytest.raises(ValueError, match="confidence"):
        t_critical(1.5, 3)


def test_paired_difference_agrees_with_scipy_ttest_rel() -> None:
    baseline = {0: 3.51, 1: 3.47, 2: 3.55, 3: 3.49}
    candidate = {0: 3.40, 1: 3.41, 2: 3.46, 3: 3.42, 9: 1.0}  # seed 9 has no baseline: ignored
    d = paired_difference(candidate, baseline, confidence=0.95)
    assert d.seeds == (0, 1, 2, 3)
    ref = sps.ttest_rel([candidate[s] for s in range(4)], [baseline[s] for s in range(4)])
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    diffs = [candidate[s] - baseline[s] for s in range(4)]
    lo, hi = sps.t.interval(0.95, 3, loc=sum(diffs) / 4, scale=sps.sem(diffs))
    assert (d.low, d.high) == (pytest.approx(lo), pytest.approx(hi))
    assert d.verdict == "better"  # every seed improved; the interval excludes zero


def test_verdicts_worse_inconclusive_and_degenerate_cases() -> None:
    base = {0: 1.0, 1: 1.1, 2: 0.9}
    assert paired_difference({0: 1.2, 1: 1.31, 2: 1.12}, base).verdict == "worse"
    noisy = paired_difference({0: 1.2, 1: 0.9, 2: 0.95}, base)
    assert noisy.verdict == "inconclusive" and noisy.low < 0 < noisy.high
    one = paired_difference({0: 0.5}, base)  # one common seed: no interval
    assert one.verdict == "inconclusive" and one.low == -math.inf and one.high == math.inf
    same = paired_difference(dict(base), base)  # identical runs: zero difference, never decisive
    assert same.verdict == "inconclusive" and same.mean == 0 and same.p_value == 1.0
    shifted = paired_difference({s: v - 0.25 for s, v in base.items()}, base)  # same shift on every seed
    assert shifted.verdict == "better" and shifted.low == pytest.approx(-0.25) and shifted.p_value == 0.0
    assert paired_difference({}, base).verdict == "inconclusive"


def test_spread_uses_sample_standard_deviation() -> None:
    s = spread([1.0, 2.0, 4.0])
    assert (s.n, s.mean, s.min, s.max) == (3, pytest.approx(7 / 3), 1.0, 4.0)
    assert s.std == pytest.approx(sps.tstd([1.0, 2.0, 4.0]))
    assert math.isnan(spread([2.0]).std) and spread([]).n == 0
