"""A ladder's verdict: per mixture a fitted law, its loss predicted at the target with a bootstrap
interval, the mixtures ranked at the target, and (with ``verify``) the prediction's measured error.

Per mixture, on the decision value (``config.metric`` averaged over the decision eval sets, as in
the one-size report):

- ``compute`` law: ``L(C) = E + A C^-alpha`` through the ladder widths (one point per width, the
  mean over seeds), evaluated at the target's FLOPs. The target follows the same recipe, so it
  sits on the same curve. By default (``law: auto``) the floor ``E`` is kept only when the
  small-sample Akaike criterion prefers it to the pure power law (``E = 0``), in the full fit and
  again in every bootstrap draw, so the interval carries the choice's uncertainty too.
- ``joint`` law: ``L(N, D)`` through every ladder and isoflop run, evaluated at the target's size
  and tokens (used when the ladder has no compute-optimal widths, or asked for).
- isoflop optima: per budget the vertex of a parabola in ``log N``; power laws of the optimal size
  and tokens against compute give the compute-optimal tokens per parameter at the target, and
  ``L(C)`` through the optima (three or more budgets) the compute-optimal frontier.
- holdout: the law refitted without the largest ladder run predicts that run (a backtest of the
  extrapolation that costs nothing).

Intervals come from one bootstrap shared by every mixture: a replicate draws ladder points with
replacement (at least three distinct, the law's parameter count) and, within each drawn point,
seeds with replacement; every mixture is refitted on the same draw. The predictions of a replicate
are paired, so the interval of a difference between two mixtures excludes the noise they share;
the ranking at the target is *decided* when every adjacent pair's difference interval excludes
zero. Percentile intervals at ``config.confidence``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from zephyr.config import ConfigError
from zephyr.train.scaling import ScalingRecipe

from .ladder import LadderPoint, fits_jointly
from .ladder_spec import LadderSpec
from .runner import AblationPlan, RunResult
from .scaling_law import (
    IsoflopOptimum,
    JointLaw,
    LossLaw,
    PowerFit,
    choose_loss_law,
    fit_joint_law,
    fit_loss_law,
    fit_power,
    isoflop_minimum,
    joint_identifiable,
)

__all__ = [
    "axis_value",
    "PointValues",
    "Holdout",
    "MixtureLadder",
    "PairDifference",
    "TransferCheck",
    "LadderReport",
    "build_ladder_report",
]

_MIN_DISTINCT = 3  # points a replicate needs: the compute law has three parameters
_MAX_DRAWS = 50  # draws per replicate before a replicate is given up (only tiny ladders get near it)


@dataclass(frozen=True)
class PointValues:
    """One mixture at one ladder point: the decision value per seed."""

    point: LadderPoint
    values: dict[int, float]

    @property
    def mean(self) -> float:
        return math.fsum(self.values.values()) / len(self.values)


@dataclass(frozen=True)
class Holdout:
    """The law fitted without ``point`` (the largest ladder run), predicting it."""

    point: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class MixtureLadder:
    """One mixture's fits, its prediction at the target and, when verified, the target's measured value."""

    mixture: str
    points: tuple[PointValues, ...]  # ladder and isoflop points; the target is in `measured`
    method: str  # "ladder" (L(x) through the ladder widths) | "joint" (L(N, D)): what `predicted` comes from
    law: LossLaw | None  # L(x) on the ladder's axis (LadderReport.axis)
    compute_law: LossLaw | None  # L(C) through the same runs, for the compute exponent (the same law when axis=flops)
    curve: tuple[tuple[float, float], ...]  # (FLOPs, predicted value) along the recipe, smallest width to target
    joint: JointLaw | None
    optima: tuple[IsoflopOptimum, ...]
    optima_law: LossLaw | None
    params_fit: PowerFit | None  # compute-optimal N against C, from the isoflop optima
    tokens_fit: PowerFit | None  # compute-optimal D against C
    tokens_per_param: float | None  # compute-optimal D/N at the target's compute (isoflop)
    tokens_per_param_interval: tuple[float, float] | None
    predicted: float
    interval: tuple[float, float] | None
    holdout: Holdout | None
    measured: dict[int, float]  # target seed -> value (verify)

    @property
    def measured_mean(self) -> float | None:
        return math.fsum(self.measured.values()) / len(self.measured) if self.measured else None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured at the target, or None before it is trained."""
        m = self.measured_mean
        return None if m is None else (self.predicted - m) / m

    @property
    def within_interval(self) -> bool | None:
        m = self.measured_mean
        if m is None or self.interval is None:
            return None
        return self.interval[0] <= m <= self.interval[1]


@dataclass(frozen=True)
class TransferCheck:
    """The baseline's decision value at one width for each learning-rate multiplier of the recipe's rate."""

    width: int
    losses: dict[float, float]
    tolerance: float

    @property
    def best(self) -> float:
        return min(self.losses, key=lambda m: self.losses[m])

    @property
    def recipe_gap(self) -> float:
        """How much worse the recipe's own rate is than the best multiplier tried (relative, >= 0)."""
        return self.losses[1.0] / self.losses[self.best] - 1

    @property
    def holds(self) -> bool:
        return self.recipe_gap <= self.tolerance


@dataclass(frozen=True)
class PairDifference:
    """Predicted ``worse - better`` at the target (> 0), with its bootstrap interval."""

    better: str
    worse: str
    mean: float
    low: float
    high: float

    @property
    def decided(self) -> bool:
        return self.low > 0


@dataclass(frozen=True)
class LadderReport:
    """Everything a ladder found, in one value: per mixture its fit and prediction, the ranking at the target with
    its paired intervals, the compute spent, and the transfer check; what the text, JSON, plot and UI are made from."""

    axis: str  # what the ladder law is a function of: non_embedding_params | params | flops
    metric: str
    decision_sets: tuple[str, ...]
    confidence: float
    bootstrap: int  # replicates drawn (0: no intervals)
    baseline: str
    descriptions: dict[str, str]  # mixture -> its weights
    target: LadderPoint
    points: tuple[LadderPoint, ...]  # every point planned, target last
    mixtures: tuple[MixtureLadder, ...]
    ranking: tuple[str, ...]  # predicted at the target, best (lowest) first
    pairs: tuple[PairDifference, ...]  # adjacent pairs of `ranking`
    ranking_ladder: tuple[str, ...]  # measured at the ladder's largest run
    ladder_point: str  # that run's point
    ranking_measured: tuple[str, ...] | None  # at the target, when every mixture's target was trained
    ladder_flops: float  # every ladder and isoflop run, all mixtures and seeds
    target_flops: float  # one target run per mixture
    recipe: dict[str, object]
    notes: tuple[str, ...]
    transfer: tuple[TransferCheck, ...] = ()  # the learning-rate transfer check, when asked for
    transfer_flops: float = 0.0  # its runs, outside the ladder's

    @property
    def transfer_holds(self) -> bool | None:
        return all(t.holds for t in self.transfer) if self.transfer else None

    @property
    def decided(self) -> bool:
        return bool(self.pairs) and all(p.decided for p in self.pairs)

    @property
    def extrapolation(self) -> float:
        """Target FLOPs over the largest ladder run's."""
        return self.target.flops / max(p.flops for p in self.points if p.kind in ("ladder", "isoflop"))

    @property
    def ladder_flops_share(self) -> float:
        """All ladder FLOPs (every mixture, seed and isoflop run) over the targets' (one per mixture)."""
        return self.ladder_flops / self.target_flops

    def mixture(self, name: str) -> MixtureLadder:
        for m in self.mixtures:
            if m.mixture == name:
                return m
        raise KeyError(f"no ladder for mixture {name!r}; mixtures are {[m.mixture for m in self.mixtures]}.")

    def verdict(self) -> str:
        order = " < ".join(self.ranking)
        if len(self.ranking) < 2:
            return f"predicted at the target: {order}"
        if self.bootstrap == 0:
            return f"ranking at the target (no bootstrap, undecided): {order}"
        if self.decided:
            return f"ranking at the target DECIDED: {order}"
        open_pairs = ", ".join(
            f"{p.better} vs {p.worse} ({p.mean:+.4f} [{p.low:+.4f}, {p.high:+.4f}])"
            for p in self.pairs
            if not p.decided
        )
        return f"ranking at the target UNDECIDED: {order}; intervals include 0 for {open_pairs}"


# ----------------------------------------------------------------------------------------- building


def _decision_value(result: RunResult, sets: Sequence[str], metric: str) -> float:
    values = [result.eval[s][metric] for s in sets]
    if any(v is None for v in values):
        raise ValueError(f"run {result.run_dir} has no {metric} for eval sets {list(sets)}: {result.eval}.")
    return math.fsum(float(v) for v in values if v is not None) / len(values)


def axis_value(point: LadderPoint, axis: str) -> float:
    """Where a point sits on the ladder law's axis: its non-embedding parameters, parameters or FLOPs."""
    return float(getattr(point, axis))


def _fit_ladder(points: Sequence[PointValues], law: str, axis: str) -> LossLaw:
    """The ladder's ``L(x)``: with a floor (``compute``), without (``power``), or chosen by AICc (``auto``)."""
    x, losses = [axis_value(p.point, axis) for p in points], [p.mean for p in points]
    if law == "auto":
        return choose_loss_law(x, losses)
    return fit_loss_law(x, losses, floor=law == "compute")


def _fit_joint(points: Sequence[PointValues], start: tuple[float, float] | None = None) -> JointLaw:
    return fit_joint_law(
        [p.point.params for p in points], [p.point.tokens for p in points], [p.mean for p in points], start=start
    )


def _optima(points: Sequence[PointValues]) -> list[IsoflopOptimum]:
    budgets = sorted({p.point.budget for p in points if p.point.budget is not None})
    out = []
    for budget in budgets:
        curve = sorted((p for p in points if p.point.budget == budget), key=lambda p: p.point.params)
        out.append(
            isoflop_minimum(
                budget, [p.point.params for p in curve], [p.point.tokens for p in curve], [p.mean for p in curve]
            )
        )
    return out


def _ratio_at(optima: Sequence[IsoflopOptimum], flops: float) -> tuple[float | None, PowerFit | None, PowerFit | None]:
    """Compute-optimal tokens per parameter at ``flops`` from the optima that were bracketed."""
    inside = [o for o in optima if o.inside]
    if len({o.flops for o in inside}) >= 2:
        params_fit = fit_power([o.flops for o in inside], [o.params for o in inside])
        tokens_fit = fit_power([o.flops for o in inside], [o.tokens for o in inside])
        return tokens_fit.predict(flops) / params_fit.predict(flops), params_fit, tokens_fit
    if inside:
        return inside[0].tokens_per_param, None, None
    return None, None, None


def _percentiles(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


Draw = list[tuple[int, tuple[int, ...]]]  # (point index, seeds drawn for it)


def _draw(rng: np.random.Generator, n_points: int, seeds: Sequence[int], distinct: int) -> Draw | None:
    """Point indices drawn with replacement (at least ``distinct`` different ones), each with its seeds redrawn."""
    for _ in range(_MAX_DRAWS):
        idx = rng.integers(0, n_points, n_points)
        if len(set(idx.tolist())) >= distinct:
            break
    else:
        return None
    pool = np.asarray(seeds)
    return [(int(i), tuple(int(s) for s in rng.choice(pool, len(pool)))) for i in idx]


def _apply(draw: Draw, points: Sequence[PointValues]) -> list[PointValues]:
    return [PointValues(points[i].point, dict(enumerate(points[i].values[s] for s in seeds))) for i, seeds in draw]


def _bootstrap(
    per_mixture: dict[str, list[PointValues]],
    seeds: Sequence[int],
    predict: Callable[[str, list[PointValues]], float],
    replicates: int,
    rng: np.random.Generator,
    distinct: int,
) -> dict[str, np.ndarray]:
    """Predictions at the target per replicate, every mixture refitted on the same draw (paired).

    ``per_mixture`` lists every mixture's points in one order, so an index names the same point in each.
    """
    names = list(per_mixture)
    n_points = len(per_mixture[names[0]])
    out: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(replicates):
        draw = _draw(rng, n_points, seeds, distinct)
        if draw is None:
            continue
        try:
            row = {name: predict(name, _apply(draw, per_mixture[name])) for name in names}
        except ValueError:  # a degenerate draw (the joint law not identifiable on it): skipped for every mixture
            continue
        for name, value in row.items():
            out[name].append(value)
    return {n: np.asarray(v) for n, v in out.items()}


def _isoflop_ratio_interval(
    points: Sequence[PointValues], seeds: Sequence[int], flops: float, replicates: int, rng: np.random.Generator
) -> np.ndarray:
    """Compute-optimal tokens per parameter at ``flops``, per replicate: each budget's runs resampled on their own."""
    budgets = sorted({p.point.budget for p in points if p.point.budget is not None})
    curves = [[p for p in points if p.point.budget == b] for b in budgets]
    out = []
    for _ in range(replicates):
        optima = []
        for curve in curves:
            draw = _draw(rng, len(curve), seeds, _MIN_DISTINCT)
            if draw is None:
                break
            drawn = _apply(draw, curve)
            optima.append(
                isoflop_minimum(
                    drawn[0].point.budget or 0.0,
                    [p.point.params for p in drawn],
                    [p.point.tokens for p in drawn],
                    [p.mean for p in drawn],
                )
            )
        else:
            ratio = _ratio_at(optima, flops)[0]
            if ratio is not None:
                out.append(ratio)
    return np.asarray(out)


def _describe(plan: AblationPlan) -> dict[str, str]:
    return {
        m.name: (m.derivation + ": " if m.derivation != "explicit" else "")
        + ", ".join(
            f"{d}{' (shuffled)' if d in m.shuffled else ''} {100 * w:.1f}%" for d, (_, w) in m.components.items()
        )
        for m in plan.mixtures
    }


def _values_by_point(
    plan: AblationPlan, results: Sequence[RunResult], metric: str
) -> dict[tuple[str, str], dict[int, float]]:
    """(mixture, point) -> {seed: decision value} over every finished run."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in results:
        out.setdefault((r.mixture, r.point), {})[r.seed] = _decision_value(r, plan.config.decision_sets, metric)
    return out


def _fitted_points(
    plan: AblationPlan, values: dict[tuple[str, str], dict[int, float]], fitted: Sequence[LadderPoint]
) -> dict[str, list[PointValues]]:
    """Every mixture's values at every ladder and isoflop point (all seeds), in the plan's point order."""
    seeds = plan.config.seeds
    per_mixture: dict[str, list[PointValues]] = {}
    for m in plan.mixtures:
        pts = []
        for p in fitted:
            found = values.get((m.name, p.name), {})
            missing = sorted(set(seeds) - set(found))
            if missing:
                raise ValueError(
                    f"mixture {m.name!r} has no finished run at ladder point {p.name} for seed(s) {missing}; "
                    "train the ladder first (zephyr ablate CONFIG without --report-only)."
                )
            pts.append(PointValues(p, {s: found[s] for s in seeds}))
        per_mixture[m.name] = pts
    return per_mixture


@dataclass(frozen=True)
class _Fitter:
    """How the target is predicted: from which points, by which law, on which axis, with how many distinct
    points per draw."""

    method: str  # "ladder" | "joint"
    indices: tuple[int, ...]  # of the fitted points the law goes through
    law: str  # ladder: "auto" | "compute" | "power"
    axis: str
    distinct: int

    def fit(self, points: Sequence[PointValues], start: tuple[float, float] | None = None) -> LossLaw | JointLaw:
        return _fit_ladder(points, self.law, self.axis) if self.method == "ladder" else _fit_joint(points, start)

    def predict_at(self, law: LossLaw | JointLaw, point: LadderPoint) -> float:
        if isinstance(law, LossLaw):
            return float(law.predict(axis_value(point, self.axis)))
        return float(law.predict(point.params, point.tokens))


def _fitter(spec: LadderSpec, fitted: Sequence[LadderPoint]) -> _Fitter:
    ladder_idx = tuple(i for i, p in enumerate(fitted) if p.kind == "ladder")
    if not fits_jointly(spec):
        law = spec.law if spec.law in ("compute", "power") else "auto"
        return _Fitter("ladder", ladder_idx, law, spec.axis, _MIN_DISTINCT)
    return _Fitter("joint", tuple(range(len(fitted))), "joint", "params", 5)


def _curve(
    fitter: _Fitter, law: LossLaw | JointLaw, recipe: ScalingRecipe, low: int, target: LadderPoint
) -> tuple[tuple[float, float], ...]:
    """The law's prediction along the recipe (every width from ``low`` to the target's), as (FLOPs, value)."""
    out = []
    for width in recipe.widths(low, target.width - 1):
        try:
            run = recipe.run(width)
        except ConfigError:  # too few steps at this width: not a run the recipe would make
            continue
        out.append((run.flops, fitter.predict_at(law, LadderPoint.of("", "ladder", run))))
    out.append((target.flops, fitter.predict_at(law, target)))
    return tuple(out)


def _mixture_ladder(
    name: str,
    pts: list[PointValues],
    fitter: _Fitter,
    law: LossLaw | JointLaw,
    samples: np.ndarray | None,
    target: LadderPoint,
    measured: dict[int, float],
    spec: LadderSpec,
    recipe: ScalingRecipe,
    seeds: Sequence[int],
    confidence: float,
    rng: np.random.Generator,
) -> MixtureLadder:
    """One mixture's fits around its prediction: isoflop optima and ratio, the optima's law, the holdout."""
    optima = _optima(pts) if any(p.point.kind == "isoflop" for p in pts) else []
    ratio, params_fit, tokens_fit = _ratio_at(optima, target.flops)
    ratio_interval = None
    if optima and spec.bootstrap:
        iso = [p for p in pts if p.point.kind == "isoflop"]
        ratios = _isoflop_ratio_interval(iso, seeds, target.flops, spec.bootstrap, rng)
        ratio_interval = _percentiles(ratios, confidence) if len(ratios) else None
    inside = [o for o in optima if o.inside]
    optima_law = fit_loss_law([o.flops for o in inside], [o.loss for o in inside]) if len(inside) >= 3 else None
    holdout = None
    ladder_pts = [p for p in pts if p.point.kind == "ladder"]
    if fitter.method == "ladder" and len(ladder_pts) >= 4:
        largest = max(ladder_pts, key=lambda p: p.point.flops)
        rest = [p for p in ladder_pts if p is not largest]
        holdout = Holdout(largest.point.name, fitter.predict_at(fitter.fit(rest), largest.point), largest.mean)
    compute_law = None
    if isinstance(law, LossLaw):
        compute_law = law if fitter.axis == "flops" else _fit_ladder(ladder_pts, fitter.law, "flops")
    low = min((p.point.width for p in (ladder_pts or pts)), default=target.width)
    return MixtureLadder(
        mixture=name,
        points=tuple(pts),
        method=fitter.method,
        law=law if isinstance(law, LossLaw) else None,
        compute_law=compute_law,
        curve=_curve(fitter, law, recipe, low, target),
        joint=law if isinstance(law, JointLaw) else _try_joint(pts),
        optima=tuple(optima),
        optima_law=optima_law,
        params_fit=params_fit,
        tokens_fit=tokens_fit,
        tokens_per_param=ratio,
        tokens_per_param_interval=ratio_interval,
        predicted=fitter.predict_at(law, target),
        interval=_percentiles(samples, confidence) if samples is not None and len(samples) else None,
        holdout=holdout,
        measured=measured,
    )


def _ranking(
    mixtures: Sequence[MixtureLadder], boot: dict[str, np.ndarray], confidence: float
) -> tuple[tuple[str, ...], tuple[PairDifference, ...]]:
    """Mixtures by predicted value (best first) and each adjacent pair's paired bootstrap difference."""
    by_name = {m.mixture: m for m in mixtures}
    ranking = tuple(sorted(by_name, key=lambda n: by_name[n].predicted))
    pairs = []
    for better, worse in zip(ranking, ranking[1:], strict=False):
        low, high = (
            _percentiles(boot[worse] - boot[better], confidence) if len(boot.get(better, ())) else (-math.inf, math.inf)
        )
        pairs.append(PairDifference(better, worse, by_name[worse].predicted - by_name[better].predicted, low, high))
    return ranking, tuple(pairs)


def build_ladder_report(plan: AblationPlan, results: Sequence[RunResult], *, seed: int = 0) -> LadderReport:
    """Fit every mixture's ladder from ``results`` (its finished runs) and predict the target; see the module doc.

    ``seed`` seeds the bootstrap, so a report is reproducible.
    """
    cfg, spec = plan.config, plan.config.ladder
    if spec is None or not plan.points or plan.recipe is None:
        raise ValueError("build_ladder_report needs the plan of a ladder ablation (ladder: in the config).")
    have_bpb = all(r.eval.get(s, {}).get("bpb") is not None for r in results for s in cfg.decision_sets)
    metric = cfg.metric if cfg.metric == "loss" or have_bpb else "loss"
    notes = list(plan.notes)
    if metric != cfg.metric:
        notes.append(f"fits use loss: bits per byte is unknown for some eval set (asked for {cfg.metric})")
    target = plan.points[-1]
    fitted = [p for p in plan.points if p.kind in ("ladder", "isoflop")]
    values = _values_by_point(plan, results, metric)
    per_mixture = _fitted_points(plan, values, fitted)
    fitter = _fitter(spec, fitted)
    fit_points = {n: [pts[i] for i in fitter.indices] for n, pts in per_mixture.items()}
    full = {name: fitter.fit(pts) for name, pts in fit_points.items()}

    def predict(name: str, pts: list[PointValues]) -> float:
        law = full[name]
        start = (law.alpha, law.beta) if isinstance(law, JointLaw) else None  # a draw starts from the full fit
        return fitter.predict_at(fitter.fit(pts, start), target)

    rng = np.random.default_rng(seed)
    resamplable = len(fitter.indices) > fitter.distinct or len(cfg.seeds) > 1
    if spec.bootstrap and not resamplable:
        notes.append(
            f"no intervals: {len(fitter.indices)} ladder points for a law of {fitter.distinct} parameters and one "
            "seed leave nothing to resample (every draw refits the same points); add a width or a seed"
        )
    boot = (
        _bootstrap(fit_points, cfg.seeds, predict, spec.bootstrap, rng, fitter.distinct)
        if spec.bootstrap and resamplable
        else {}
    )
    kept = min((len(v) for v in boot.values()), default=0)
    if boot and kept < spec.bootstrap * 0.9:
        notes.append(f"{spec.bootstrap - kept} of {spec.bootstrap} bootstrap draws were degenerate and skipped")
    mixtures = []
    for m in plan.mixtures:
        ladder = _mixture_ladder(
            m.name,
            per_mixture[m.name],
            fitter,
            full[m.name],
            boot.get(m.name),
            target,
            dict(values.get((m.name, target.name), {})),
            spec,
            plan.recipe,
            cfg.seeds,
            cfg.confidence,
            rng,
        )
        mixtures.append(ladder)
        if ladder.optima and not all(o.inside for o in ladder.optima):
            edge = [f"{o.flops:.3g}" for o in ladder.optima if not o.inside]
            notes.append(
                f"{m.name}: isoflop budget(s) {edge} have their minimum outside the widths tried (or no minimum): "
                "widen ladder.isoflop.widths there"
            )
    ranking, pairs = _ranking(mixtures, boot, cfg.confidence)
    widths = [p for p in fitted if p.kind == "ladder"]
    reference = max(widths or fitted, key=lambda p: p.flops)
    at_reference = {m.mixture: next(p.mean for p in m.points if p.point.name == reference.name) for m in mixtures}
    measured = {m.mixture: m.measured_mean for m in mixtures}
    by_point = {p.name: p for p in plan.points}
    kinds = [by_point[r.point].kind for r in plan.runs]
    return LadderReport(
        axis=fitter.axis if fitter.method == "ladder" else "params",
        metric=metric,
        decision_sets=tuple(cfg.decision_sets),
        confidence=cfg.confidence,
        bootstrap=kept,
        baseline=cfg.baseline.name,
        descriptions=_describe(plan),
        target=target,
        points=plan.points,
        mixtures=tuple(mixtures),
        ranking=ranking,
        pairs=pairs,
        ranking_ladder=tuple(sorted(at_reference, key=lambda n: at_reference[n])),
        ladder_point=reference.name,
        ranking_measured=(
            tuple(sorted(measured, key=lambda n: measured[n] or 0.0))
            if all(v is not None for v in measured.values())
            else None
        ),
        ladder_flops=math.fsum(
            by_point[r.point].flops for r, k in zip(plan.runs, kinds, strict=True) if k in ("ladder", "isoflop")
        ),
        target_flops=target.flops * len(plan.mixtures),
        recipe=dataclasses.asdict(plan.recipe),
        notes=tuple(notes),
        transfer=_transfer_checks(plan, values),
        transfer_flops=math.fsum(
            by_point[r.point].flops for r, k in zip(plan.runs, kinds, strict=True) if k == "transfer"
        ),
    )


def _transfer_checks(plan: AblationPlan, values: dict[tuple[str, str], dict[int, float]]) -> tuple[TransferCheck, ...]:
    spec = plan.config.ladder
    if spec is None or spec.transfer is None:
        return ()
    base, seed = plan.config.baseline.name, plan.config.seeds[0]
    checks = []
    for width in spec.transfer.widths:
        losses = {}
        for mult in spec.transfer.multipliers:
            name = f"w{width}" if mult == 1.0 and width in spec.widths else f"lr{mult:g}-w{width}"
            found = values.get((base, name), {})
            if seed not in found:
                raise ValueError(f"the transfer check's run {name} of {base!r} (seed {seed}) has not finished.")
            losses[mult] = found[seed]
        checks.append(TransferCheck(width, losses, spec.transfer.tolerance))
    return tuple(checks)


def _try_joint(points: Sequence[PointValues]) -> JointLaw | None:
    """``L(N, D)`` beside the compute law when the runs allow it (isoflop runs), else None."""
    if not joint_identifiable([p.point.params for p in points], [p.point.tokens for p in points]):
        return None
    try:
        return _fit_joint(points)
    except ValueError:
        return None
