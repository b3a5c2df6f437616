"""Config parsing and checks, the optimizer's schedule and parameter groups, and data determinism."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from zephyr.train.config import ConfigError, ModelConfig, OptimizerConfig, TrainConfig, load_config
from zephyr.train.data import eos_id_of, eval_sets, make_mixture
from zephyr.train.model import Transformer
from zephyr.train.optim import decay_mask, learning_rate_schedule, make_optimizer


def test_train_config_yaml_overrides_and_errors(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "model: {hidden_dim: 64, num_heads: 4, num_kv_heads: 2}\n"
        "data:\n  train: {web: [stores/web, 0.7], code: [stores/code, 0.3]}\n  seq_len: 128\n"
        "optimizer: {learning_rate: 1e-3}\n"  # YAML reads 1e-3 as a string; the loader makes it a float
    )
    cfg = load_config(path, ["steps=7", "model.qk_norm=true", "optimizer.schedule=cosine"])
    assert cfg.steps == 7 and cfg.model.qk_norm and cfg.optimizer.schedule == "cosine"
    assert cfg.optimizer.learning_rate == 1e-3 and cfg.data.train == {
        "web": ("stores/web", 0.7),
        "code": ("stores/code", 0.3),
    }
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['hiden_dim'\]"):
        load_config(path, ["model.hiden_dim=3"])
    with pytest.raises(ConfigError, match="raise model.max_seq_len or shorten data.seq_len"):
        load_config(path, ["data.seq_len=4096"])
    with pytest.raises(ConfigError, match="is not key=value"):
        load_config(path, ["steps"])
    with pytest.raises(ConfigError, match="0 would zero every update"):
        OptimizerConfig(max_grad_norm=0)
    with pytest.raises(ConfigError, match=r"model.head_dim must be a positive int, got -2"):
        ModelConfig(head_dim=-2)  # even, so only the shape-field check refuses it
    with pytest.raises(ConfigError, match="must be divisible by data_parallel"):
        TrainConfig(data_parallel=3)
    example = load_config(Path(__file__).resolve().parents[2] / "zephyr" / "train" / "example.yaml", ["steps=5"])
    assert example.steps == 5 and example.model.num_kv_heads == 2


def test_train_flops_and_param_count_are_consistent():
    cfg = ModelConfig(
        vocab_size=1000,
        hidden_dim=64,
        intermediate_dim=128,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        tie_embeddings=False,
        qk_norm=True,
    )
    model = jax.eval_shape(lambda: Transformer.init(cfg, key=jax.random.PRNGKey(0)))
    assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(model)) == cfg.num_params()
    # 6 N D rule on the matmul weights (embedding lookup excluded, output projection included) + attention.
    matmul_params = (
        cfg.num_params(include_embeddings=False) - (2 * cfg.num_layers + 1) * 64 - 2 * 16 * cfg.num_layers + 1000 * 64
    )
    assert cfg.flops_per_token(256) == pytest.approx(6 * (matmul_params + 3 * 2 * 4 * 16 * 256))


def test_train_schedules():
    steps = 100
    wsd = learning_rate_schedule(
        OptimizerConfig(learning_rate=1.0, warmup_steps=10, decay_fraction=0.2, min_lr_ratio=0.1), steps
    )
    lrs = np.array([float(wsd(s)) for s in range(steps)])
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # linear warmup
    assert np.all(lrs[10:80] == 1.0)  # stable
    assert np.all(np.diff(lrs[80:]) < 0) and lrs[-1] == pytest.approx(0.1 + 0.9 / 20, rel=1e-5)  # decaying to the floor
    cosine = learning_rate_schedule(
        OptimizerConfig(learning_rate=1.0, warmup_steps=10, schedule="cosine", min_lr_ratio=0.0), steps
    )
    assert (
        float(cosine(10)) == pytest.approx(1.0)
        and float(cosine(55)) == pytest.approx(0.5, abs=0.01)
        and float(cosine(100)) == pytest.approx(0.0, abs=1e-6)
    )


def test_train_weight_decay_groups_and_clipping(numpy_init):
    cfg = ModelConfig(
        vocab_size=50,
        hidden_dim=8,
        intermediate_dim=16,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        qk_norm=True,
        tie_embeddings=False,
    )
    params = numpy_init(cfg)
    mask = decay_mask(params)
    assert (
        not mask.embed
        and not mask.final_norm.weight
        and not mask.blocks.attn_norm.weight
        and not mask.blocks.attn.q_norm.weight
    )
    assert mask.lm_head and mask.blocks.attn.wq and mask.blocks.mlp.w_down
    # Decay moves only the decayed group when gradients are zero; clipping bounds a huge gradient.
    opt = make_optimizer(
        OptimizerConfig(learning_rate=0.1, warmup_steps=0, weight_decay=0.5, max_grad_norm=1.0, schedule="constant"), 10
    )
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(opt.update)(zeros, jax.jit(opt.init)(params), params)
    assert float(jnp.abs(updates.embed).max()) == 0 and float(jnp.abs(updates.blocks.mlp_norm.weight).max()) == 0
    assert float(jnp.abs(updates.blocks.attn.wq).max()) > 0
    clip = optax.clip_by_global_norm(1.0)
    norm = jax.jit(
        lambda p: optax.global_norm(clip.update(jax.tree.map(lambda x: jnp.full_like(x, 1e6), p), clip.init(p))[0])
    )(params)
    assert float(norm) == pytest.approx(1.0, rel=1e-4)


def test_train_data_is_a_pure_function_of_seed_and_step(tiny_config):
    data = tiny_config().data
    a, b = make_mixture(data), make_mixture(data)
    np.testing.assert_array_equal(a.batch(7, 4), b.batch(7, 4))  # fresh readers, same batch
    assert not np.array_equal(a.batch(7, 4), a.batch(8, 4))
    assert a.batch(3, 4).shape == (4, data.seq_len + 1) and a.batch(3, 4).dtype == np.int32
    assert eos_id_of(a) == 0  # SmolLM2's <|endoftext|>, read from the store manifest
    assert eos_id_of(a, override=5) == 5
    (held_out,) = eval_sets(a, batch_size=4, max_batches=2)
    assert held_out.name == "heldout" and len(held_out.batches) == 2
    # Bytes for bits-per-byte: plausible for English BPE (3-6 bytes per token).
    tokens = sum(b[:, 1:].size for b in held_out.batches)
    assert 2.5 < held_out.target_bytes / tokens < 7
