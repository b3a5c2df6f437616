"""The scaling-law fits recover known parameters from synthetic losses, and refuse what they cannot fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zephyr.ablate.scaling_law import (
    choose_loss_law,
    fit_joint_law,
    fit_loss_law,
    fit_power,
    isoflop_minimum,
    joint_identifiable,
)

# Chinchilla's fitted surface (Hoffmann et al. 2022, approach 3): the ground truth of the joint tests.
E, A, ALPHA, B, BETA = 1.69, 406.4, 0.34, 410.7, 0.28


def chinchilla(n, d):
    return E + A * np.asarray(n, float) ** -ALPHA + B * np.asarray(d, float) ** -BETA


def test_compute_law_recovers_its_parameters_exactly() -> None:
    flops = np.geomspace(1e10, 3e11, 5)
    losses = 2.1 + 850.0 * flops**-0.27
    law = fit_loss_law(flops, losses)
    assert pytest.approx(2.1, rel=1e-6) == law.E
    assert pytest.approx(850.0, rel=1e-5) == law.A
    assert law.alpha == pytest.approx(0.27, rel=1e-6)
    assert law.rmse < 1e-7 and law.points == 5
    assert law.predict(3e12) == pytest.approx(2.1 + 850.0 * 3e12**-0.27, rel=1e-9)  # 10x past the last point


def test_compute_law_with_noise_extrapolates_close() -> None:
    rng = np.random.default_rng(3)
    flops = np.geomspace(1e10, 3e11, 6)
    truth = 2.1 + 850.0 * flops**-0.27
    law = fit_loss_law(flops, truth * (1 + 0.002 * rng.standard_normal(6)))
    target = 2.1 + 850.0 * 3e12**-0.27
    assert abs(law.predict(3e12) / target - 1) < 0.01  # 0.2% noise, 10x extrapolation: within 1%
    assert 0.001 < law.rmse < 0.004


def test_compute_law_without_a_floor() -> None:
    """A pure power law (E = 0) is found on the boundary, not pushed to a negative floor."""
    flops = np.geomspace(1e9, 1e12, 5)
    law = fit_loss_law(flops, 40.0 * flops**-0.12)
    assert law.E == 0.0 and law.alpha == pytest.approx(0.12, rel=1e-6) and pytest.approx(40.0, rel=1e-5) == law.A


def test_the_floor_is_kept_only_when_the_points_show_it() -> None:
    """AICc: a clear floor is kept; a floor the noise hides is dropped for the pure power law."""
    flops = np.geomspace(1e10, 1e12, 7)
    curved = 3.0 + 40.0 * flops**-0.25  # the loss halfway to its floor: strong curvature in log-log
    chosen = choose_loss_law(flops, curved)
    assert chosen.floor and pytest.approx(3.0, rel=1e-4) == chosen.E
    rng = np.random.default_rng(0)
    noisy = 30.0 * flops[:5] ** -0.08 * (1 + 0.003 * rng.standard_normal(5))
    chosen = choose_loss_law(flops[:5], noisy)
    assert not chosen.floor and chosen.E == 0 and chosen.alpha == pytest.approx(0.08, abs=0.01)
    assert fit_loss_law(flops[:4], curved[:4]).aicc == math.inf  # four points cannot weigh three parameters


def test_compute_law_needs_three_distinct_computes() -> None:
    with pytest.raises(ValueError, match="3 or more distinct compute values"):
        fit_loss_law([1e10, 1e10, 2e10], [3.0, 3.0, 2.9])
    with pytest.raises(ValueError, match="finite number > 0"):
        fit_loss_law([1e10, 2e10, 4e10], [3.0, float("nan"), 2.9])


def test_joint_law_recovers_chinchilla_from_isoflop_runs() -> None:
    n, d = [], []
    for budget in (1e18, 1e19, 1e20):
        for params in np.geomspace(2e7, 2e9, 6):
            n.append(params)
            d.append(budget / (6 * params))
    law = fit_joint_law(n, d, chinchilla(n, d))
    assert (law.E, law.A, law.alpha, law.B, law.beta) == pytest.approx((E, A, ALPHA, B, BETA), rel=1e-4)
    # Compute-optimal D/N at 1e21 FLOPs from the recovered surface equals the truth's.
    logs = np.linspace(math.log(1e8), math.log(1e11), 20001)
    n_grid = np.exp(logs)
    best = n_grid[np.argmin(chinchilla(n_grid, 1e21 / (6 * n_grid)))]
    assert law.optimal_tokens_per_param(1e21) == pytest.approx(1e21 / (6 * best) / best, rel=0.01)


def test_joint_law_refuses_a_compute_optimal_ladder() -> None:
    """D = 20 N on every run: the N and D terms cannot be told apart."""
    n = np.geomspace(1e6, 1e8, 6)
    assert not joint_identifiable(n, 20 * n)
    with pytest.raises(ValueError, match="do not vary size and tokens independently"):
        fit_joint_law(n, 20 * n, chinchilla(n, 20 * n))


def test_isoflop_minimum_finds_the_vertex() -> None:
    n = np.geomspace(1e5, 1e7, 7)
    d = 1e15 / (6 * n)
    losses = 3.0 + 0.05 * (np.log(n) - math.log(8e5)) ** 2
    opt = isoflop_minimum(1e15, n, d, losses)
    assert opt.params == pytest.approx(8e5, rel=1e-6)
    assert opt.tokens == pytest.approx(1e15 / (6 * 8e5), rel=1e-6)
    assert opt.loss == pytest.approx(3.0, abs=1e-9)
    assert opt.inside and opt.tokens_per_param == pytest.approx(opt.tokens / opt.params)


def test_isoflop_minimum_flags_an_unbracketed_curve() -> None:
    n = np.geomspace(1e5, 1e6, 4)
    losses = 3.0 + 0.05 * (np.log(n) - math.log(1e7)) ** 2  # the minimum lies above every size tried
    assert not isoflop_minimum(1e15, n, 1e15 / (6 * n), losses).inside
    concave = 3.0 - 0.05 * (np.log(n) - math.log(3e5)) ** 2  # opens downwards: no minimum at all
    opt = isoflop_minimum(1e15, n, 1e15 / (6 * n), concave)
    assert not opt.inside and opt.loss == pytest.approx(min(concave))
    with pytest.raises(ValueError, match="3 or more sizes"):
        isoflop_minimum(1e15, n[:2], n[:2], losses[:2])


def test_power_fit() -> None:
    fit = fit_power([1e18, 1e19, 1e20], [2e8 * (c / 1e18) ** 0.5 for c in (1e18, 1e19, 1e20)])
    assert fit.exponent == pytest.approx(0.5) and fit.predict(1e18) == pytest.approx(2e8)
    with pytest.raises(ValueError, match="two or more distinct"):
        fit_power([1e18, 1e18], [1.0, 2.0])
