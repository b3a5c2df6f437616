"""The runs of a scaling ladder: which widths and budgets, what each costs, and the target they predict.

A ladder (``ladder:`` in an ablation config, :class:`zephyr.ablate.config.LadderSpec`) trains every
mixture at several small sizes with one `zephyr.train.scaling.ScalingRecipe` and predicts its loss
at a larger target. This module turns the spec into named points, each a `RecipeRun` (shapes,
optimizer, batch, steps, FLOPs), identical for every mixture: the points are what the runs of
each mixture share, so a mixture's law is fitted on the same sizes as every other's and the
bootstrap can resample them in pairs. The runner (:mod:`zephyr.ablate.runner`) makes one ordinary
ablation run per (mixture, point, seed), fingerprinted and reused like any other;
:mod:`zephyr.ablate.ladder_fit` fits and reports.

Point names (also the run directories' prefixes): ``w64`` a ladder width at the recipe's tokens per
parameter, ``iso3e+11-w48`` width 48 at an isoflop budget of 3e11 FLOPs, ``lr0.5-w32`` width 32 at
half the recipe's learning rate (the transfer check; the baseline mixture only), ``target-w160``
the target.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from zephyr.config import ConfigError, require
from zephyr.train.scaling import RecipeRun, ScalingRecipe

from .ladder_spec import LadderSpec
from .scaling_law import joint_identifiable

__all__ = ["LadderPoint", "fits_jointly", "ladder_points"]

PointKind = Literal["ladder", "isoflop", "transfer", "target"]


@dataclass(frozen=True)
class LadderPoint:
    """One size (and budget) of a ladder, the same for every mixture; plain data for plan.json and reports."""

    name: str
    kind: PointKind
    width: int
    budget: float | None  # the isoflop budget it belongs to, if any
    params: int  # N as the recipe counts it (recipe.count_embeddings)
    non_embedding_params: int
    tokens: int
    flops: float  # the trainer's FLOPs per token x tokens
    steps: int
    batch_size: int
    seq_len: int
    learning_rate: float
    layers: int
    heads: int
    intermediate: int
    lr_multiplier: float = 1.0  # a transfer-check run: the recipe's learning rate times this

    @staticmethod
    def of(
        name: str, kind: PointKind, run: RecipeRun, budget: float | None = None, lr_multiplier: float = 1.0
    ) -> LadderPoint:
        return LadderPoint(
            name=name,
            kind=kind,
            width=run.width,
            budget=budget,
            params=run.params,
            non_embedding_params=run.non_embedding_params,
            tokens=run.tokens,
            flops=run.flops,
            steps=run.steps,
            batch_size=run.batch_size,
            seq_len=run.seq_len,
            learning_rate=run.optimizer.learning_rate * lr_multiplier,
            layers=run.model.num_layers,
            heads=run.model.num_heads,
            intermediate=run.model.intermediate_dim,
            lr_multiplier=lr_multiplier,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fits_jointly(spec: LadderSpec) -> bool:
    """Whether the report fits L(N, D) through every run (law joint, or auto without ladder widths) rather than a
    law through the ladder widths; `ladder_points` checks at plan time, before any training, that it can."""
    return spec.law == "joint" or not spec.widths


def _budget_name(budget: float) -> str:
    return f"iso{budget:.3g}"


def ladder_points(spec: LadderSpec, recipe: ScalingRecipe) -> tuple[list[tuple[LadderPoint, RecipeRun]], list[str]]:
    """Every point of the ladder (widths, isoflop runs, then the target) with its run, and notes for the plan.

    ``recipe`` is ``spec.recipe`` with the vocabulary of the stores filled in. Isoflop widths too
    small or too large for a budget (fewer than ``recipe.min_steps`` steps) are left out with a
    note; a budget left with fewer than three widths, or a target no larger than the largest
    ladder run, is an error.
    """
    points: list[tuple[LadderPoint, RecipeRun]] = []
    notes: list[str] = []
    for width in spec.widths:
        run = recipe.run(width)
        points.append((LadderPoint.of(f"w{width}", "ladder", run), run))
    if spec.isoflop is not None:
        for budget in spec.isoflop.budgets:
            kept, skipped = [], []
            for width in spec.isoflop.widths:
                try:
                    run = recipe.run(width, flops=budget)
                except ConfigError:
                    skipped.append(width)
                    continue
                kept.append((LadderPoint.of(f"{_budget_name(budget)}-w{width}", "isoflop", run, budget), run))
            if skipped:
                notes.append(
                    f"isoflop budget {budget:.3g}: widths {skipped} left out (fewer than recipe.min_steps="
                    f"{recipe.min_steps} steps at this budget)"
                )
            require(
                len(kept) >= 3,
                f"isoflop budget {budget:.3g} FLOPs keeps {len(kept)} width(s) ({[p.width for p, _ in kept]}) with at "
                f"least recipe.min_steps={recipe.min_steps} steps; a curve needs 3. Raise the budget, or give "
                "smaller widths or a smaller recipe.base_batch_size.",
            )
            points.extend(kept)
    if spec.transfer is not None:
        for width in spec.transfer.widths:
            run = recipe.run(width)
            for mult in spec.transfer.multipliers:
                if mult == 1.0 and width in spec.widths:
                    continue  # the ladder's own run at this width is the x1 run
                points.append((LadderPoint.of(f"lr{mult:g}-w{width}", "transfer", run, lr_multiplier=mult), run))
    if spec.target_width is not None:
        target = recipe.run(spec.target_width)
    else:
        assert spec.target_flops is not None  # LadderSpec checks one of them is given
        target = recipe.run(recipe.width_for_flops(spec.target_flops), flops=spec.target_flops)
    fitted = [point for point, _ in points if point.kind in ("ladder", "isoflop")]
    require(
        not fits_jointly(spec) or joint_identifiable([p.params for p in fitted], [p.tokens for p in fitted]),
        f"ladder.law {spec.law}: the {len(fitted)} runs ({', '.join(p.name for p in fitted)}) do not vary size and "
        "tokens independently enough to fit L(N, D) (one isoflop budget's runs trade one for the other); give "
        "ladder.isoflop a second budget, or (law auto) ladder.widths for a law through the ladder.",
    )
    largest = max(run.flops for point, run in points if point.kind != "transfer")
    require(
        target.flops > largest,
        f"the target ({target.describe()}) does not cost more than the largest ladder run ({largest:.3g} FLOPs); "
        "a ladder predicts a larger run: raise target_width / target_flops or shrink the ladder.",
    )
    points.append((LadderPoint.of(f"target-w{target.width}", "target", target), target))
    return points, notes
