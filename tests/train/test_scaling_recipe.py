"""ScalingRecipe: shapes, tokens, learning rate, batch and schedule from one width, costed as the trainer counts."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

from zephyr.config import ConfigError
from zephyr.train.model import Transformer
from zephyr.train.scaling import ScalingRecipe

RECIPE = ScalingRecipe(
    vocab_size=1024, seq_len=64, head_dim=8, aspect_ratio=16, base_batch_size=16, mlp_multiple=4, min_steps=1
)


def test_shapes_follow_the_width() -> None:
    for width, layers, heads, head_dim, mlp in [(16, 2, 2, 8, 48), (20, 2, 2, 10, 60), (48, 3, 6, 8, 144)]:
        m = RECIPE.model(width)
        assert (m.hidden_dim, m.num_layers, m.num_heads, m.resolved_head_dim, m.intermediate_dim) == (
            width,
            layers,
            heads,
            head_dim,
            mlp,
        )
        assert m.num_kv_heads == m.num_heads and m.qk_norm and m.tie_embeddings and m.max_seq_len == 64
    grouped = dataclasses.replace(RECIPE, kv_group=2)
    assert grouped.model(32).num_kv_heads == 2 and grouped.model(32).num_heads == 4


def test_params_match_the_initialised_model_and_flops_are_the_trainers() -> None:
    run = RECIPE.run(24)
    model = Transformer.init(run.model, key=jax.random.PRNGKey(0))
    leaves = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(model))
    assert run.params == leaves  # embeddings counted once (tied)
    assert run.non_embedding_params == leaves - 1024 * 24
    assert run.flops_per_token == run.model.flops_per_token(64)
    assert run.flops == run.flops_per_token * run.tokens
    kaplan = dataclasses.replace(RECIPE, count_embeddings=False)
    assert kaplan.run(24).params == run.non_embedding_params


def test_tokens_come_from_the_ratio_or_a_budget() -> None:
    run = RECIPE.run(32)
    per_step = run.batch_size * run.seq_len
    assert abs(run.tokens - 20 * run.params) <= per_step / 2  # steps rounded to the nearest whole step
    assert run.tokens_per_param == pytest.approx(20, rel=0.01)
    budget = RECIPE.run(32, flops=1e12)
    assert abs(budget.flops - 1e12) <= budget.flops_per_token * per_step / 2
    assert RECIPE.run(32, tokens=100_000).tokens == round(100_000 / per_step) * per_step
    with pytest.raises(ConfigError, match="not both"):
        RECIPE.run(32, tokens=1000, flops=1e9)


def test_learning_rate_batch_and_schedule_rules() -> None:
    recipe = dataclasses.replace(
        RECIPE,
        base_lr=0.01,
        base_width=32,
        base_tokens=1e6,
        lr_width_exponent=1.0,
        lr_tokens_exponent=0.5,
        base_batch_size=16,
        batch_tokens_exponent=0.5,
        batch_multiple=8,
        warmup_fraction=0.1,
        decay_fraction=0.2,
    )
    assert recipe.learning_rate(32, 1e6) == pytest.approx(0.01)
    assert recipe.learning_rate(64, 4e6) == pytest.approx(0.01 / 2 / 2)
    assert recipe.batch_size(1e6) == 16 and recipe.batch_size(4e6) == 32 and recipe.batch_size(1e4) == 8  # min 8
    run = recipe.run(64, tokens=4e6)
    opt = run.optimizer
    assert opt.learning_rate == pytest.approx(recipe.learning_rate(64, run.tokens))
    assert opt.warmup_steps == round(0.1 * run.steps) and opt.decay_fraction == 0.2 and opt.schedule == "wsd"
    assert opt.min_lr_ratio == 0.0


def test_compute_optimal_width_for_a_budget() -> None:
    for width in (16, 32, 48):
        assert RECIPE.width_for_flops(RECIPE.run(width).flops) == width
    flops = math.sqrt(RECIPE.run(32).flops * RECIPE.run(34).flops)
    assert RECIPE.width_for_flops(flops) in (32, 34)


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="multiple of 2"):
        RECIPE.model(15)
    with pytest.raises(ConfigError, match="vocab_size is unset"):
        ScalingRecipe().model(64)
    with pytest.raises(ConfigError, match="min_steps"):
        dataclasses.replace(RECIPE, min_steps=50).run(16, tokens=16 * 64 * 10)
    with pytest.raises(ConfigError, match="derives from the width"):
        ScalingRecipe(extra_model={"num_layers": 3})
    with pytest.raises(ConfigError, match="overlap the decay"):
        ScalingRecipe(warmup_fraction=0.5, decay_fraction=0.6)
