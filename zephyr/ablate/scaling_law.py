"""Scaling-law fits: loss against compute or size, loss against size and tokens, and isoflop minima.

Three fits, each small and deterministic (numpy and scipy only, so synthetic tests check them
against known parameters):

- `fit_loss_law`: ``L(x) = E + A * x^-alpha`` through a ladder's (x, eval loss) points, where x is
  its compute (``L(C)``) or its size (``L(N)``; along one recipe the tokens follow the size).
- `fit_joint_law`: Chinchilla's ``L(N, D) = E + A * N^-alpha + B * D^-beta``, for runs that vary
  size and tokens independently (isoflop sweeps). On a compute-optimal ladder ``D`` is a fixed
  multiple of ``N``, the two terms cannot be told apart, and `joint_identifiable` says so.
- `isoflop_minimum`: a parabola in ``log N`` through the runs of one compute budget; its vertex is
  the compute-optimal size for that budget (Chinchilla's approach 2).

Both laws are fitted by variable projection: for fixed exponents the loss is linear in the
coefficients, so those come from a non-negative least-squares solve (E, A, B >= 0: a loss floor
and decreasing terms) and only the exponents are searched (a grid, then Nelder-Mead or a bounded
scalar search from the best grid point). This has no starting-point sensitivity, which a direct
five-parameter L-BFGS fit (Chinchilla's approach 3) is known for. Residuals are relative
(``(fit - L) / L``): the question asked of the fit is a relative prediction error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LossLaw",
    "JointLaw",
    "IsoflopOptimum",
    "PowerFit",
    "fit_loss_law",
    "choose_loss_law",
    "fit_joint_law",
    "joint_identifiable",
    "isoflop_minimum",
    "fit_power",
]

_ALPHA_GRID = np.concatenate([np.linspace(0.01, 0.2, 20), np.linspace(0.22, 2.0, 90)])
_MAX_EXPONENT = 3.0


@dataclass(frozen=True)
class LossLaw:
    """``L(x) = E + A * x^-alpha``; ``rmse`` is the root mean square relative residual of the fit.

    ``x`` is what the law was fitted on: compute (``L(C)``) or a parameter count (``L(N)``).
    ``points`` counts distinct x values (a point drawn twice by a bootstrap is still one
    measurement of the curve); ``floor`` is False for a pure power law (E held at 0, two parameters).
    """

    E: float
    A: float
    alpha: float
    rmse: float
    points: int
    floor: bool = True

    def predict(self, x: float | np.ndarray) -> float | np.ndarray:
        return self.E + self.A * np.power(np.asarray(x, dtype=float), -self.alpha)

    @property
    def parameters(self) -> int:
        return 3 if self.floor else 2

    @property
    def aicc(self) -> float:
        """Akaike's criterion with the small-sample correction, on the relative residuals (lower is better).

        ``n ln(rmse^2) + 2k + 2k(k+1)/(n-k-1)``: infinite when ``n <= k + 1`` (too few points to weigh
        ``k`` parameters). Five points charge a third parameter 20 more than a second, so a floor
        ``E`` is kept only when the curvature it buys is far above the noise.
        """
        n, k = self.points, self.parameters
        if n - k - 1 <= 0:
            return math.inf
        return n * math.log(max(self.rmse, 1e-12) ** 2) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


@dataclass(frozen=True)
class JointLaw:
    """``L(N, D) = E + A * N^-alpha + B * D^-beta``."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    rmse: float
    points: int

    def predict(self, params: float | np.ndarray, tokens: float | np.ndarray) -> float | np.ndarray:
        n, d = np.asarray(params, dtype=float), np.asarray(tokens, dtype=float)
        return self.E + self.A * np.power(n, -self.alpha) + self.B * np.power(d, -self.beta)

    def optimal_tokens_per_param(self, flops: float, flops_per_param_token: float = 6.0) -> float:
        """``D/N`` minimising the loss at ``flops = k * N * D`` (``k`` FLOPs per parameter per token)."""
        # d/dN of A N^-a + B (C / (k N))^-b = 0  =>  a A N^-a = b B D^-b, with D = C / (k N).
        logs = np.linspace(math.log(flops) / 2 - 12, math.log(flops) / 2 + 12, 4801)
        n = np.exp(logs)
        d = flops / (flops_per_param_token * n)
        best = int(np.argmin(self.predict(n, d)))
        return float(d[best] / n[best])


@dataclass(frozen=True)
class IsoflopOptimum:
    """The minimum of one isoflop curve: compute-optimal size, tokens and loss for that budget.

    ``inside`` is False when the vertex falls outside the sizes tried (the curve's minimum was not
    bracketed: extend the sizes) or the parabola opens downwards (no minimum at all).
    """

    flops: float
    params: float
    tokens: float
    loss: float
    curvature: float  # the parabola's coefficient of (log N)^2
    inside: bool
    points: int

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


@dataclass(frozen=True)
class PowerFit:
    """``y = coefficient * x^exponent``, fitted in log-log space."""

    coefficient: float
    exponent: float

    def predict(self, x: float) -> float:
        return self.coefficient * x**self.exponent


def _relative_nnls(columns: np.ndarray, losses: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative coefficients minimising the weighted relative residuals; returns (coefficients, rmse)."""
    from scipy.optimize import nnls

    scale = np.sqrt(weights) / losses
    coef, _ = nnls(columns * scale[:, None], losses * scale)
    residual = (columns @ coef - losses) / losses
    return coef, float(math.sqrt(np.sum(weights * residual**2) / np.sum(weights)))


def _checked(x: Sequence[float], losses: Sequence[float], weights: Sequence[float] | None, what: str):
    xs, ys = np.asarray(x, dtype=float), np.asarray(losses, dtype=float)
    w = np.ones_like(ys) if weights is None else np.asarray(weights, dtype=float)
    if not (xs.shape == ys.shape == w.shape) or xs.ndim != 1:
        raise ValueError(f"{what}: x, losses and weights must be 1-D and of one length, got {xs.shape}, {ys.shape}.")
    if not (np.all(np.isfinite(xs)) and np.all(xs > 0) and np.all(np.isfinite(ys)) and np.all(ys > 0)):
        raise ValueError(f"{what}: every x and loss must be a finite number > 0, got x={xs.tolist()}, {ys.tolist()}.")
    if np.any(w < 0) or not np.any(w > 0):
        raise ValueError(f"{what}: weights must be >= 0 and not all 0, got {w.tolist()}.")
    return xs, ys, w


def _two_column_fits(x: np.ndarray, y: np.ndarray, w: np.ndarray, alphas: np.ndarray):
    """For every alpha at once: the non-negative (E, A) minimising weighted relative residuals, and the rmse.

    Two columns (1 and ``x^-alpha``) have a closed-form NNLS: the unconstrained solution when both
    coefficients come out >= 0, else the better of the two one-column fits. Vectorised over the
    alphas, so the grid search and every bootstrap replicate cost a few array operations.
    """
    s = np.sqrt(w) / y  # row scale: relative residuals, weighted
    t = np.sqrt(w)  # the scaled target s * y
    u = np.broadcast_to(s, (len(alphas), len(x)))
    v = s * np.power(x[None, :], -alphas[:, None])  # G n
    uu, vv, uv = (u * u).sum(1), (v * v).sum(1), (u * v).sum(1)
    ut, vt = (u * t).sum(1), (v * t).sum(1)
    det = uu * vv - uv * uv
    with np.errstate(divide="ignore", invalid="ignore"):
        e_both, a_both = (vv * ut - uv * vt) / det, (uu * vt - uv * ut) / det
    e_only, a_only = np.maximum(ut / uu, 0.0), np.maximum(vt / vv, 0.0)
    candidates = [
        (np.where((e_both >= 0) & (a_both >= 0) & np.isfinite(e_both), e_both, np.nan), a_both),
        (e_only, np.zeros_like(e_only)),
        (np.zeros_like(a_only), a_only),
    ]
    best_e, best_a, best_r = None, None, None
    for e, a in candidates:
        r = ((t[None, :] - e[:, None] * u - a[:, None] * v) ** 2).sum(1)
        r = np.where(np.isfinite(r), r, np.inf)
        if best_r is None:
            best_e, best_a, best_r = e, a, r
        else:
            better = r < best_r
            best_e, best_a, best_r = (
                np.where(better, e, best_e),
                np.where(better, a, best_a),
                np.where(better, r, best_r),
            )
    return best_e, best_a, np.sqrt(best_r / w.sum())


def fit_loss_law(
    x: Sequence[float],
    losses: Sequence[float],
    *,
    weights: Sequence[float] | None = None,
    floor: bool = True,
) -> LossLaw:
    """Fit ``L(x) = E + A * x^-alpha`` (at least three distinct x values), or with ``floor=False`` the
    pure power law ``A * x^-alpha`` (E held at 0; two or more)."""
    from scipy.optimize import minimize_scalar

    c, y, w = _checked(x, losses, weights, "fit_loss_law")
    distinct = len(np.unique(c[w > 0]))
    needed = 3 if floor else 2
    if distinct < needed:
        raise ValueError(
            f"fit_loss_law needs runs at {needed} or more distinct compute values or sizes "
            f"({'E, A and alpha' if floor else 'A and alpha'}), got {distinct}; add ladder sizes."
        )
    if not floor:
        slope, intercept = np.polyfit(np.log(c), np.log(y), 1, w=np.sqrt(w))
        fitted = np.exp(intercept) * c**slope
        rmse = float(math.sqrt(np.sum(w * ((fitted - y) / y) ** 2) / np.sum(w)))
        return LossLaw(E=0.0, A=float(np.exp(intercept)), alpha=float(-slope), rmse=rmse, points=distinct, floor=False)
    ref = float(np.exp(np.mean(np.log(c))))  # fit in x / ref: columns near 1 keep the solve well conditioned
    scaled = c / ref
    scores = _two_column_fits(scaled, y, w, _ALPHA_GRID)[2]
    i = int(np.argmin(scores))
    alpha = float(_ALPHA_GRID[i])
    lo, hi = _ALPHA_GRID[max(i - 1, 0)], _ALPHA_GRID[min(i + 1, len(_ALPHA_GRID) - 1)]
    found = minimize_scalar(
        lambda a: float(_two_column_fits(scaled, y, w, np.array([a]))[2][0]),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-10},
    )
    if found.fun <= scores[i]:
        alpha = float(found.x)
    e, a, rmse = (float(v[0]) for v in _two_column_fits(scaled, y, w, np.array([alpha])))
    return LossLaw(E=e, A=a * ref**alpha, alpha=alpha, rmse=rmse, points=distinct)


def choose_loss_law(x: Sequence[float], losses: Sequence[float]) -> LossLaw:
    """The law with a floor ``E`` or the pure power law, whichever has the lower `LossLaw.aicc`.

    A short ladder cannot tell a floor from a slightly smaller exponent: with five points spanning
    ten times the compute, 0.5% noise on one point moved ``E`` from 0 to 3.3 nats and the prediction
    at 12x from 2% low to 6% high (docs/ladder.md). The power law is kept unless the curvature
    the floor explains is far larger than the noise; ties go to the simpler law.
    """
    power = fit_loss_law(x, losses, floor=False)
    if len(np.unique(np.asarray(x, dtype=float))) < 3:
        return power
    floored = fit_loss_law(x, losses)
    return floored if floored.aicc < power.aicc else power


def joint_identifiable(params: Sequence[float] | np.ndarray, tokens: Sequence[float] | np.ndarray) -> bool:
    """Whether the runs vary size and tokens independently (``log N`` and ``log D`` not collinear), 5+ runs."""
    n, d = np.log(np.asarray(params, dtype=float)), np.log(np.asarray(tokens, dtype=float))
    if len(n) < 5:
        return False
    design = np.stack([np.ones_like(n), n - n.mean(), d - d.mean()], axis=1)
    singular = np.linalg.svd(design, compute_uv=False)
    return bool(singular[-1] > 1e-3 * singular[0] and singular[-1] > 0.05)


def fit_joint_law(
    params: Sequence[float],
    tokens: Sequence[float],
    losses: Sequence[float],
    *,
    weights: Sequence[float] | None = None,
    start: tuple[float, float] | None = None,
) -> JointLaw:
    """Fit ``L(N, D) = E + A N^-alpha + B D^-beta`` (needs runs that vary N and D independently).

    ``start``: exponents to search from instead of a grid (a bootstrap replicate starts from the full fit).
    """
    from scipy.optimize import minimize

    n, y, w = _checked(params, losses, weights, "fit_joint_law")
    d = np.asarray(tokens, dtype=float)
    if d.shape != n.shape or not np.all(d > 0):
        raise ValueError(f"fit_joint_law: tokens must be > 0 and as many as params, got {d.tolist()}.")
    if not joint_identifiable(n, d):
        raise ValueError(
            "fit_joint_law: the runs do not vary size and tokens independently (or are fewer than 5): on a "
            "compute-optimal ladder D is a fixed multiple of N; add isoflop budgets to fit L(N, D)."
        )
    n_ref, d_ref = float(np.exp(np.mean(np.log(n)))), float(np.exp(np.mean(np.log(d))))
    xn, xd = n / n_ref, d / d_ref

    def objective(exponents: np.ndarray) -> float:
        a, b = float(exponents[0]), float(exponents[1])
        if not (0 < a <= _MAX_EXPONENT and 0 < b <= _MAX_EXPONENT):
            return 1e9
        return _relative_nnls(np.stack([np.ones_like(xn), xn**-a, xd**-b], axis=1), y, w)[1]

    if start is None:
        grid = np.linspace(0.05, 1.5, 30)
        start = min(((a, b) for a in grid for b in grid), key=lambda ab: objective(np.array(ab)))
    found = minimize(objective, np.array(start), method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-12})
    alpha, beta = (float(v) for v in (found.x if found.fun <= objective(np.array(start)) else start))
    (e, a_coef, b_coef), rmse = _relative_nnls(np.stack([np.ones_like(xn), xn**-alpha, xd**-beta], axis=1), y, w)
    return JointLaw(
        E=float(e),
        A=float(a_coef) * n_ref**alpha,
        alpha=alpha,
        B=float(b_coef) * d_ref**beta,
        beta=beta,
        rmse=rmse,
        points=len(n),
    )


def isoflop_minimum(
    flops: float, params: Sequence[float], tokens: Sequence[float], losses: Sequence[float], *, span: int = 2
) -> IsoflopOptimum:
    """The vertex of ``L = a (log N)^2 + b log N + c`` through one budget's runs (3 or more sizes).

    The parabola goes through the lowest run and up to ``span`` sizes on each side of it: an isoflop
    curve is a parabola only near its minimum, and its far ends (a model given a few dozen steps, or a
    tiny one given far too many tokens) are runs nobody would train; at 3e11 FLOPs on the benchmark's
    data, the width-40 run ended 7.7% above the width-32 one while its neighbours were 2% apart.
    Tokens at the optimum come from the line of ``log D`` against ``log N`` through the same runs
    (at a fixed budget ``D`` is ``C`` over FLOPs per token, nearly ``C / 6N``).
    """
    n, y, _ = _checked(params, losses, None, "isoflop_minimum")
    d = np.asarray(tokens, dtype=float)
    if len(np.unique(n)) < 3:
        raise ValueError(
            f"an isoflop curve needs 3 or more sizes to place its minimum, got {len(np.unique(n))} at {flops:.3g} "
            "FLOPs; add isoflop widths."
        )
    sizes, group = np.unique(n, return_inverse=True)  # a size drawn twice (a bootstrap) is one size: mean it
    y = np.bincount(group, weights=y) / np.bincount(group)
    d = np.exp(np.bincount(group, weights=np.log(d)) / np.bincount(group))
    n = sizes
    best = int(np.argmin(y))
    lo = max(0, min(best - span, len(n) - (2 * span + 1)))
    keep = slice(lo, lo + 2 * span + 1)
    n, y, d = n[keep], y[keep], d[keep]
    x = np.log(n)
    a, b, c = np.polyfit(x, y, 2)
    slope, intercept = np.polyfit(x, np.log(d), 1)
    if a <= 0:  # no minimum: report the best run seen, flagged
        best = int(np.argmin(y))
        return IsoflopOptimum(flops, float(n[best]), float(d[best]), float(y[best]), float(a), False, len(n))
    vertex = -b / (2 * a)
    inside = bool(x.min() <= vertex <= x.max())
    return IsoflopOptimum(
        flops=float(flops),
        params=float(math.exp(vertex)),
        tokens=float(math.exp(intercept + slope * vertex)),
        loss=float(c - b * b / (4 * a)),
        curvature=float(a),
        inside=inside,
        points=len(n),
    )


def fit_power(x: Sequence[float], y: Sequence[float]) -> PowerFit:
    """``y = k x^p`` by least squares on logs (two or more distinct x)."""
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if len(np.unique(lx)) < 2:
        raise ValueError(f"a power law needs two or more distinct x values, got {np.exp(lx).tolist()}.")
    p, k = np.polyfit(lx, ly, 1)
    return PowerFit(float(math.exp(k)), float(p))
