"""One scaling recipe: every run of a scaling ladder, and the larger run it predicts, from one size parameter.

A ladder of small runs predicts a large one only if all of them are trained "the same way": the same
shape family, learning rate and batch rules that transfer across sizes, the same schedule, and
token budgets set by one rule. `ScalingRecipe` is that rule, a function of the model's width
(``hidden_dim``, the one size parameter):

- shape: ``num_heads`` nearest ``width / head_dim`` (whole heads of even size),
  ``num_layers = max(min_layers, round(width / aspect_ratio))``, ``intermediate_dim = mlp_ratio *
  width`` rounded up to ``mlp_multiple``, kv heads every ``kv_group`` query heads, QK-norm on (it
  keeps attention logits bounded as the learning rate moves with size);
- tokens: ``tokens_per_param * N`` (compute-optimal at Chinchilla's 20 by default), or a FLOP budget
  divided by the FLOPs per token (isoflop runs);
- learning rate: ``base_lr * (base_width / width) ** lr_width_exponent * (base_tokens / tokens) **
  lr_tokens_exponent``: Adam's best step shrinks with width (muP's 1/width for hidden matrices; less
  where tied embeddings hold much of the model) and with a longer horizon (Delphi's ``(T0/T)^0.3``
  token-horizon correction). The defaults are the optima of learning-rate sweeps on CPU-sized models
  (widths 12 to 40 at 20 tokens per parameter, prose and code; docs/ladder.md): 0.0136, 0.0095,
  0.007 and 0.006 at widths 12, 16, 32 and 40, which ``0.0072 * (32 / w)^0.5 * (1e6 / T)^0.2``
  follows within 25%. At other scales, check them with ``ladder.transfer`` before trusting a ladder;
- batch: ``base_batch_size * (tokens / base_tokens) ** batch_tokens_exponent`` sequences, a multiple of
  ``batch_multiple``, at least ``min_batch_size`` (the critical batch grows with the horizon);
- schedule: warmup over ``warmup_fraction`` of the steps, then warmup-stable-decay with a linear
  decay to ``min_lr_ratio`` over the last ``decay_fraction`` (or cosine).

Counting. FLOPs are the trainer's own count (``ModelConfig.flops_per_token``, the figure its MFU
uses): 6 x every matmul parameter per token, the output projection included, plus attention
scores; the embedding lookup costs nothing. ``N`` for ``tokens_per_param`` counts every parameter
once (``count_embeddings=True``): embeddings are tied to the output layer, whose matmul is real
compute, and at the small widths a CPU ladder uses they are a third of the model, so leaving them
out would make ``N`` a poor proxy for the cost. Set ``count_embeddings=False`` for Kaplan's
non-embedding count.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.config import require
from zephyr.train.config import MODEL_SHAPE_FIELDS, ModelConfig, OptimizerConfig

__all__ = ["ScalingRecipe", "RecipeRun"]


@dataclass(frozen=True)
class RecipeRun:
    """One run the recipe prescribes: shapes, optimizer, batch, steps, and what it costs."""

    width: int
    model: ModelConfig
    optimizer: OptimizerConfig
    batch_size: int  # sequences per step
    seq_len: int
    steps: int
    params: int  # every parameter once (tied embeddings once)
    non_embedding_params: int
    flops_per_token: float  # ModelConfig.flops_per_token(seq_len): the trainer's MFU count

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.seq_len

    @property
    def flops(self) -> float:
        return self.flops_per_token * self.tokens

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    def describe(self) -> str:
        m = self.model
        return (
            f"width {self.width}: {m.num_layers} layers, {m.num_heads} heads, mlp {m.intermediate_dim}, "
            f"{self.params:,} params ({self.non_embedding_params:,} non-embedding), {self.tokens:,} tokens "
            f"({self.steps} steps x {self.batch_size} x {self.seq_len}), lr {self.optimizer.learning_rate:.3g}, "
            f"{self.flops:.3g} FLOPs"
        )


@dataclass(frozen=True)
class ScalingRecipe:
    """Shapes, learning rate, batch, schedule and tokens as functions of the width; see the module docstring."""

    vocab_size: int | None = None  # None until known: an ablation sets it from its stores
    seq_len: int = 256
    head_dim: int = 64
    aspect_ratio: float = 64.0  # width / layers
    min_layers: int = 2
    mlp_ratio: float = 3.0
    mlp_multiple: int = 16
    kv_group: int = 1  # query heads per kv head (1: no grouping)
    qk_norm: bool = True
    tie_embeddings: bool = True
    init_std: float = 0.02
    tokens_per_param: float = 20.0
    count_embeddings: bool = True
    base_width: int = 32  # the learning rate is base_lr at this width and base_tokens tokens
    base_tokens: float = 1e6
    base_lr: float = 7.2e-3
    lr_width_exponent: float = 0.5
    lr_tokens_exponent: float = 0.2
    base_batch_size: int = 32
    batch_tokens_exponent: float = 0.0
    min_batch_size: int = 8
    batch_multiple: int = 8
    warmup_fraction: float = 0.1
    decay_fraction: float = 0.2
    schedule: Literal["wsd", "cosine"] = "wsd"
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    max_grad_norm: float | None = 1.0
    min_steps: int = 20
    remat: Literal["none", "full", "dots"] = "none"
    extra_model: dict[str, object] = field(default_factory=dict)  # other ModelConfig fields, same for every size

    def __post_init__(self) -> None:
        require(
            self.vocab_size is None or (isinstance(self.vocab_size, int) and self.vocab_size > 0),
            f"recipe.vocab_size must be a positive int or null (set from the stores), got {self.vocab_size!r}.",
        )
        for name in ("seq_len", "head_dim", "min_layers", "mlp_multiple", "kv_group", "base_width"):
            value = getattr(self, name)
            require(isinstance(value, int) and value > 0, f"recipe.{name} must be a positive int, got {value!r}.")
        require(self.head_dim % 2 == 0, f"recipe.head_dim must be even (RoPE rotates pairs), got {self.head_dim}.")
        for name in ("aspect_ratio", "mlp_ratio", "tokens_per_param", "base_tokens", "base_lr", "init_std"):
            value = getattr(self, name)
            require(value > 0 and math.isfinite(value), f"recipe.{name} must be a finite number > 0, got {value!r}.")
        require(
            self.base_batch_size >= 1 and self.min_batch_size >= 1 and self.batch_multiple >= 1,
            "recipe.base_batch_size, min_batch_size and batch_multiple must be >= 1, got "
            f"{self.base_batch_size}, {self.min_batch_size}, {self.batch_multiple}.",
        )
        require(
            0 <= self.warmup_fraction < 1 and 0 <= self.decay_fraction <= 1,
            f"recipe.warmup_fraction must be in [0, 1) and decay_fraction in [0, 1], got {self.warmup_fraction}, "
            f"{self.decay_fraction}.",
        )
        require(
            self.warmup_fraction + (self.decay_fraction if self.schedule == "wsd" else 0) <= 1,
            f"recipe.warmup_fraction ({self.warmup_fraction}) + decay_fraction ({self.decay_fraction}) exceed 1: "
            "the warmup would overlap the decay.",
        )
        require(
            self.schedule in ("wsd", "cosine"), f"recipe.schedule must be 'wsd' or 'cosine', got {self.schedule!r}."
        )
        require(self.min_steps >= 1, f"recipe.min_steps must be >= 1, got {self.min_steps}.")
        clash = sorted(set(MODEL_SHAPE_FIELDS) & set(self.extra_model))
        require(
            not clash,
            f"recipe.extra_model sets {clash}, which the recipe derives from the width; set head_dim, aspect_ratio, "
            "mlp_ratio or kv_group instead.",
        )
        object.__setattr__(self, "extra_model", dict(self.extra_model))

    # ------------------------------------------------------------------------------------ shapes
    def heads(self, width: int) -> int | None:
        """Query heads for ``width``: the count nearest ``width / head_dim`` that splits it into whole, even
        heads (RoPE rotates pairs) and whole kv groups; None when no count does."""
        if not isinstance(width, int) or width < 2:
            return None
        divisors = {d for k in range(1, math.isqrt(width) + 1) if width % k == 0 for d in (k, width // k)}
        counts = [h for h in divisors if (width // h) % 2 == 0 and h % self.kv_group == 0]
        wanted = width / self.head_dim
        return min(counts, key=lambda h: (abs(math.log(h / wanted)), h)) if counts else None

    def check_width(self, width: int) -> None:
        """Refuse a width the shape rule cannot use, naming the nearest ones it can."""
        if self.heads(width) is None:
            step = 2 * self.kv_group
            near = max(step, (int(width) // step) * step) if isinstance(width, int | float) and width > 0 else step
            require(
                False,
                f"width {width!r} cannot be split into whole heads of even size in groups of kv_group={self.kv_group}; "
                f"use a multiple of {step} (e.g. {near} or {near + step}).",
            )

    def model_fields(self, width: int) -> dict[str, Any]:
        """The `ModelConfig` fields the recipe sets for this width (the rest keep the trainer's defaults)."""
        self.check_width(width)
        require(
            self.vocab_size is not None,
            "recipe.vocab_size is unset: give it, or let the ablation set it from its stores' tokenizer "
            "(dataclasses.replace(recipe, vocab_size=...)).",
        )
        heads = self.heads(width) or 1
        return {
            "vocab_size": self.vocab_size,
            "hidden_dim": width,
            "intermediate_dim": -(-math.ceil(self.mlp_ratio * width) // self.mlp_multiple) * self.mlp_multiple,
            "num_layers": max(self.min_layers, round(width / self.aspect_ratio)),
            "num_heads": heads,
            "num_kv_heads": heads // self.kv_group,
            "head_dim": width // heads,
            "max_seq_len": self.seq_len,
            "qk_norm": self.qk_norm,
            "tie_embeddings": self.tie_embeddings,
            "init_std": self.init_std,
            "remat": self.remat,
            **self.extra_model,
        }

    def model(self, width: int) -> ModelConfig:
        """The model of this width: layers, heads and MLP size follow from it."""
        return ModelConfig(**self.model_fields(width))

    def params(self, width: int) -> int:
        """``N`` for the tokens-per-parameter rule (embeddings counted unless ``count_embeddings`` is off)."""
        return self.model(width).num_params(include_embeddings=self.count_embeddings)

    def widths(self, low: int, high: int) -> Iterator[int]:
        """Every width the shape rule allows in ``[low, high]``, smallest first."""
        return (w for w in range(max(2, low), high + 1) if self.heads(w) is not None)

    # ------------------------------------------------------------------------------------ runs
    def batch_size(self, tokens: float) -> int:
        raw = self.base_batch_size * (tokens / self.base_tokens) ** self.batch_tokens_exponent
        rounded = max(1, round(raw / self.batch_multiple)) * self.batch_multiple
        return max(self.min_batch_size, rounded)

    def learning_rate(self, width: int, tokens: float) -> float:
        return (
            self.base_lr
            * (self.base_width / width) ** self.lr_width_exponent
            * (self.base_tokens / tokens) ** self.lr_tokens_exponent
        )

    def optimizer_fields(self, width: int, tokens: int, steps: int) -> dict[str, Any]:
        """The `OptimizerConfig` fields the recipe sets for a run of this width, tokens and steps."""
        return {
            "learning_rate": self.learning_rate(width, tokens),
            "min_lr_ratio": self.min_lr_ratio,
            "weight_decay": self.weight_decay,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "warmup_steps": round(self.warmup_fraction * steps),
            "decay_fraction": self.decay_fraction,
            "schedule": self.schedule,
            "max_grad_norm": self.max_grad_norm,
        }

    def run(self, width: int, *, tokens: float | None = None, flops: float | None = None) -> RecipeRun:
        """The run of this width: ``tokens_per_param * N`` tokens, or ``tokens``, or a ``flops`` budget."""
        require(
            tokens is None or flops is None,
            f"give the run of width {width} a token count or a FLOP budget, not both ({tokens}, {flops}).",
        )
        model = self.model(width)
        per_token = model.flops_per_token(self.seq_len)
        if flops is not None:
            require(flops > 0, f"the FLOP budget must be > 0, got {flops}.")
            wanted = flops / per_token
        elif tokens is not None:
            require(tokens > 0, f"tokens must be > 0, got {tokens}.")
            wanted = float(tokens)
        else:
            wanted = self.tokens_per_param * model.num_params(include_embeddings=self.count_embeddings)
        batch = self.batch_size(wanted)
        steps = max(1, round(wanted / (batch * self.seq_len)))
        require(
            steps >= self.min_steps,
            f"width {width} gets {steps} steps of {batch} x {self.seq_len} tokens ({wanted:,.0f} tokens), fewer "
            f"than recipe.min_steps={self.min_steps}: too short to follow the schedule. Give it a larger budget, "
            "a smaller batch (recipe.base_batch_size) or lower min_steps.",
        )
        return RecipeRun(
            width=width,
            model=model,
            optimizer=OptimizerConfig(**self.optimizer_fields(width, steps * batch * self.seq_len, steps)),
            batch_size=batch,
            seq_len=self.seq_len,
            steps=steps,
            params=model.num_params(include_embeddings=self.count_embeddings),
            non_embedding_params=model.num_params(include_embeddings=False),
            flops_per_token=per_token,
        )

    def width_for_flops(self, flops: float, *, max_width: int = 65536) -> int:
        """The width whose compute-optimal run (``tokens_per_param``) costs closest to ``flops`` (in log)."""
        require(flops > 0, f"the FLOP budget must be > 0, got {flops}.")
        best, best_gap = 0, math.inf
        for width in self.widths(2 * self.kv_group, max_width):
            model = self.model(width)
            cost = (
                model.flops_per_token(self.seq_len)
                * self.tokens_per_param
                * model.num_params(include_embeddings=self.count_embeddings)
            )
            gap = abs(math.log(cost / flops))
            if gap < best_gap:
                best, best_gap = width, gap
            if cost > flops:
                break
        return best
