"""What a scaling ladder is made of: its widths, isoflop budgets, learning-rate transfer check and target.

``ladder:`` in an ablation config (:mod:`zephyr.ablate.config`) becomes a :class:`LadderSpec`, checked
when built like every config dataclass, so a width the recipe cannot shape or a target smaller than
the ladder fails before any store is read. :mod:`zephyr.ablate.ladder` turns it into runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from zephyr.config import require
from zephyr.train.scaling import ScalingRecipe

__all__ = ["IsoflopSpec", "TransferSpec", "LadderSpec"]


@dataclass(frozen=True)
class IsoflopSpec:
    """Isoflop sweeps: at each compute budget, every width in ``widths`` trained on ``budget / FLOPs per token``.

    Widths that would get fewer than ``recipe.min_steps`` steps at a budget are left out of it (the
    plan says which); each budget needs three or more widths left to place its parabola's minimum.
    """

    budgets: tuple[float, ...]
    widths: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "budgets", tuple(float(b) for b in self.budgets))
        object.__setattr__(self, "widths", tuple(sorted(int(w) for w in self.widths)))
        require(
            bool(self.budgets) and all(b > 0 and math.isfinite(b) for b in self.budgets),
            f"ladder.isoflop.budgets must be a non-empty list of FLOP counts > 0, got {list(self.budgets)}.",
        )
        require(len(set(self.budgets)) == len(self.budgets), f"ladder.isoflop.budgets repeat: {list(self.budgets)}.")
        require(
            len(set(self.widths)) >= 3 and len(set(self.widths)) == len(self.widths),
            f"ladder.isoflop.widths must be 3 or more distinct widths (a parabola has three parameters), got "
            f"{list(self.widths)}.",
        )


@dataclass(frozen=True)
class TransferSpec:
    """The learning-rate transfer check: the recipe's rate times each multiplier at each width (baseline only).

    A ladder predicts well only if the recipe's hyperparameters are as good at the target's size as at
    the ladder's; a rate tuned at one size and scaled wrongly bends the curve. Transfer holds when at
    every width the recipe's own rate (multiplier 1) is within ``tolerance`` (relative) of the best.
    """

    widths: tuple[int, ...]
    multipliers: tuple[float, ...] = (0.5, 1.0, 2.0)
    tolerance: float = 0.005

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(sorted({int(w) for w in self.widths})))
        object.__setattr__(self, "multipliers", tuple(sorted({float(m) for m in self.multipliers})))
        require(
            bool(self.widths),
            "ladder.transfer.widths is empty; give two or more widths (e.g. the smallest and largest ladder width).",
        )
        require(
            1.0 in self.multipliers and len(self.multipliers) >= 3 and all(m > 0 for m in self.multipliers),
            f"ladder.transfer.multipliers must hold 1 (the recipe's rate) and values on both sides of it, e.g. "
            f"[0.5, 1, 2]; got {list(self.multipliers)}.",
        )
        require(self.tolerance >= 0, f"ladder.transfer.tolerance must be >= 0, got {self.tolerance}.")


@dataclass(frozen=True)
class LadderSpec:
    """A scaling ladder: small runs of one recipe, a law fitted per mixture, a prediction at the target.

    ``widths`` are trained at the recipe's tokens per parameter (a compute-optimal ladder); an
    ``isoflop`` sweep adds runs of several widths at fixed budgets (compute-optimal size and tokens
    per parameter, and a joint ``L(N, D)``). The target is ``target_width`` at the recipe's tokens
    per parameter, or the compute-optimal width for ``target_flops``. ``verify`` also trains the
    target (with ``target_seeds``, default the first seed) to measure the prediction's error.
    ``law`` picks the prediction: ``compute`` (``L(C) = E + A C^-alpha`` through the ladder
    widths), ``power`` (the same with ``E = 0``), ``joint`` (``L(N, D)`` through every run), or
    ``auto`` (with ladder widths, ``compute`` or ``power`` by the small-sample Akaike criterion,
    refitted so in every bootstrap draw; without, ``joint``). ``axis`` is what the ladder law is a
    power law of: the runs' non-embedding parameters (the default: Kaplan's count, whose trend holds
    across depths; on the benchmark's ladder it predicted a 31x larger run within 1%, where the same
    law in FLOPs was 4% off), all parameters, or FLOPs (``L(C)``); the compute exponent is reported
    either way. ``bootstrap`` resamples for the
    intervals (0: none). ``transfer`` adds the learning-rate transfer check (:class:`TransferSpec`)
    on the baseline mixture.
    """

    widths: tuple[int, ...] = ()
    target_width: int | None = None
    target_flops: float | None = None
    isoflop: IsoflopSpec | None = None
    recipe: ScalingRecipe = field(default_factory=ScalingRecipe)
    law: Literal["auto", "compute", "power", "joint"] = "auto"
    axis: Literal["non_embedding_params", "params", "flops"] = "non_embedding_params"
    bootstrap: int = 1000
    verify: bool = False
    target_seeds: tuple[int, ...] | None = None
    transfer: TransferSpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(sorted(int(w) for w in self.widths)))
        if self.target_seeds is not None:
            object.__setattr__(self, "target_seeds", tuple(int(s) for s in self.target_seeds))
            require(bool(self.target_seeds), "ladder.target_seeds is empty; give one or more seeds, or leave it out.")
        require(
            len(set(self.widths)) == len(self.widths), f"ladder.widths repeat: {list(self.widths)}; give each once."
        )
        require(
            not self.widths or len(self.widths) >= 3,
            f"ladder.widths must hold 3 or more widths (L(C) = E + A C^-alpha has three parameters), got "
            f"{list(self.widths)}; 4 to 5 give the bootstrap interval room.",
        )
        require(
            bool(self.widths) or self.isoflop is not None,
            "a ladder needs widths (a compute-optimal ladder) or an isoflop sweep (or both).",
        )
        require(
            (self.target_width is None) != (self.target_flops is None),
            f"a ladder needs exactly one of target_width or target_flops, got target_width={self.target_width}, "
            f"target_flops={self.target_flops}.",
        )
        require(
            self.target_flops is None or (self.target_flops > 0 and math.isfinite(self.target_flops)),
            f"ladder.target_flops must be a finite number > 0, got {self.target_flops}.",
        )
        for width in (
            *self.widths,
            *(self.isoflop.widths if self.isoflop else ()),
            *(self.transfer.widths if self.transfer else ()),
            *filter(None, [self.target_width]),
        ):
            self.recipe.check_width(width)
        require(
            self.target_width is None or not self.widths or self.target_width > max(self.widths),
            f"ladder.target_width ({self.target_width}) must exceed every ladder width ({list(self.widths)}): the "
            "ladder predicts a larger run.",
        )
        require(
            self.law in ("auto", "compute", "power", "joint"),
            f"ladder.law must be auto, compute, power or joint, got {self.law!r}.",
        )
        require(
            self.law not in ("compute", "power") or bool(self.widths),
            f"ladder.law: {self.law} fits L(C) through the ladder widths; give ladder.widths or use law: joint.",
        )
        require(
            self.axis in ("non_embedding_params", "params", "flops"),
            f"ladder.axis must be non_embedding_params, params or flops, got {self.axis!r}.",
        )
        require(
            self.law != "joint" or self.isoflop is not None,
            "ladder.law: joint fits L(N, D), which needs runs that vary N and D independently: add ladder.isoflop.",
        )
        require(
            self.bootstrap == 0 or self.bootstrap >= 100,
            f"ladder.bootstrap must be 0 (no interval) or at least 100 resamples, got {self.bootstrap}.",
        )
