"""AdamW with parameter groups, warmup-stable-decay or cosine schedule, global-norm clipping.

Weight decay applies to matmul weights only: decaying RMSNorm gains pulls them
towards zero (not towards one, their identity value), and decaying embeddings
penalises rare tokens that receive few gradient updates.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from zephyr.train.config import OptimizerConfig

__all__ = ["learning_rate_schedule", "decay_mask", "make_optimizer"]


def learning_rate_schedule(cfg: OptimizerConfig, total_steps: int) -> optax.Schedule:
    """``wsd``: linear warmup, constant, then linear decay to ``min_lr`` over the last ``decay_fraction``.

    ``cosine``: linear warmup then cosine decay to ``min_lr`` at ``total_steps``.
    ``constant``: linear warmup then constant.
    """
    peak, floor = cfg.learning_rate, cfg.learning_rate * cfg.min_lr_ratio
    warmup = min(cfg.warmup_steps, total_steps)

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warm = peak * jnp.minimum(1.0, (step + 1.0) / max(warmup, 1))
        if cfg.schedule == "constant":
            return warm
        if cfg.schedule == "cosine":
            progress = jnp.clip((step - warmup) / max(total_steps - warmup, 1), 0.0, 1.0)
            after = floor + (peak - floor) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        else:  # wsd
            decay_steps = int(round(cfg.decay_fraction * total_steps))
            decay_start = total_steps - decay_steps
            progress = jnp.clip((step - decay_start) / max(decay_steps, 1), 0.0, 1.0)
            after = peak + (floor - peak) * progress
        return jnp.where(step < warmup, warm, after)

    return schedule


def decay_mask(params: Any) -> Any:
    """True for leaves that get weight decay: matmul weights, not norms, not embeddings."""

    def wants_decay(path: tuple, leaf: Any) -> bool:
        names = [getattr(p, "name", getattr(p, "key", "")) for p in path]
        if any("norm" in str(n) or str(n) == "embed" for n in names):
            return False
        return getattr(leaf, "ndim", 0) >= 2

    return jax.tree_util.tree_map_with_path(wants_decay, params)


def make_optimizer(cfg: OptimizerConfig, total_steps: int) -> optax.GradientTransformation:
    """Clip by global norm, then AdamW with the schedule and the decay mask."""
    adamw = optax.adamw(
        learning_rate=learning_rate_schedule(cfg, total_steps),
        b1=cfg.beta1,
        b2=cfg.beta2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        mask=decay_mask,
    )
    if cfg.max_grad_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
