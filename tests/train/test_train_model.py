"""The model: every variant lowers a training step (shape-only), masking is causal and per document."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zephyr.train.config import DataConfig, LossConfig, ModelConfig, TrainConfig
from zephyr.train.model import SUM_BLOCK, Transformer, causal_attention, linear, segment_ids_from_eos
from zephyr.train.optim import make_optimizer
from zephyr.train.trainer import init_state, make_train_step

BASE = ModelConfig(
    vocab_size=300, hidden_dim=32, intermediate_dim=64, num_layers=2, num_heads=4, num_kv_heads=2, max_seq_len=32
)

VARIANTS = {
    "base": {},
    "untied": {"model": {"tie_embeddings": False}},
    "qk_norm": {"model": {"qk_norm": True}},
    "mha": {"model": {"num_kv_heads": 4}},
    "mqa": {"model": {"num_kv_heads": 1}},
    "head_dim_override": {"model": {"head_dim": 16}},
    "remat_none": {"model": {"remat": "none"}},
    "remat_full": {"model": {"remat": "full"}},
    "highest_precision": {"model": {"matmul_precision": "highest"}},
    "bf16_compute_f32_master": {"compute_dtype": "bfloat16"},
    "bf16_params": {"compute_dtype": "bfloat16", "param_dtype": "bfloat16"},
    "reference_loss": {"loss": {"impl": "reference"}},
    "pallas_loss": {"loss": {"impl": "pallas"}},
    "z_loss": {"loss": {"z_loss": 1e-4}},
}


def _variant(name: str) -> TrainConfig:
    spec = VARIANTS[name]
    model = dataclasses.replace(BASE, **spec.get("model", {}))
    loss = LossConfig(vocab_block=128, token_block=32, **spec.get("loss", {}))
    top = {k: v for k, v in spec.items() if k not in ("model", "loss")}
    return TrainConfig(model=model, loss=loss, data=DataConfig(seq_len=16, batch_size=2), steps=10, **top)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_train_variant_lowers_training_step(name):
    """Grug's variant contract: one full training step traces and lowers with shapes only (no FLOPs run)."""
    cfg = _variant(name)
    optimizer = make_optimizer(cfg.optimizer, cfg.steps)
    state = jax.eval_shape(lambda: init_state(cfg, optimizer, key=jax.random.PRNGKey(0)))
    tokens = jax.ShapeDtypeStruct((2, 17), jnp.int32)
    step = make_train_step(cfg, optimizer, eos_id=0)
    new_state, metrics = jax.eval_shape(step, state, tokens)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    for before, after in zip(jax.tree.leaves(state), jax.tree.leaves(new_state), strict=False):
        assert (before.shape, before.dtype) == (after.shape, after.dtype)
    assert metrics["loss"].shape == () and metrics["loss"].dtype == jnp.float32
    lowered = jax.jit(step).lower(state, tokens)
    assert "stablehlo" in lowered.as_text()[:20000] or "func.func" in lowered.as_text()[:20000]
    params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    assert params == cfg.model.num_params()


def test_train_segment_ids_from_eos():
    tokens = jnp.array([[5, 6, 0, 7, 8, 0, 0, 9]])
    np.testing.assert_array_equal(segment_ids_from_eos(tokens, 0), [[0, 0, 0, 1, 1, 1, 2, 3]])


def test_train_attention_is_causal_and_stays_inside_documents(numpy_init):
    model = numpy_init(dataclasses.replace(BASE, remat="none"))
    forward = jax.jit(lambda m, t, seg: m(t, seg))
    tokens = np.array([[11, 12, 13, 0, 21, 22, 23, 24]])  # document 1 ends with EOS (0) at position 3
    changed = tokens.copy()
    changed[0, 1] = 99  # edit inside document 1
    seg = seg_changed = np.array([[0, 0, 0, 0, 1, 1, 1, 1]])  # what segment_ids_from_eos gives (tested above)
    h, h_changed = forward(model, tokens, seg), forward(model, changed, seg_changed)
    np.testing.assert_array_equal(h[0, 4:], h_changed[0, 4:])  # document 2 cannot see document 1
    assert not np.allclose(h[0, 1:4], h_changed[0, 1:4])  # document 1 itself does change
    np.testing.assert_array_equal(h[0, :1], h_changed[0, :1])  # causal: earlier positions unaffected
    # Without segment ids the edit leaks into the next document (plain causal attention).
    assert not np.allclose(forward(model, tokens, None)[0, 4:], forward(model, changed, None)[0, 4:])


def test_train_pallas_flash_attention_matches_xla_with_documents():
    """The Pallas flash kernel (interpret mode here, Triton on GPU) against XLA's masked attention:
    grouped-query heads, three documents per row, values and gradients."""
    rng = np.random.default_rng(0)
    b, s, n, k, h = 2, 64, 4, 2, 16
    q, kk, v = (jnp.asarray(rng.normal(size=(b, s, heads, h)), jnp.float32) for heads in (n, k, k))
    tokens = rng.integers(1, 50, (b, s))
    tokens[0, [9, 40]] = 0
    tokens[1, [30]] = 0
    seg = segment_ids_from_eos(jnp.asarray(tokens), 0)
    probe = jnp.asarray(rng.normal(size=(b, s, n, h)), jnp.float32)

    def loss(impl):
        return jax.value_and_grad(
            lambda q, kk, v: jnp.sum(causal_attention(q, kk, v, seg, impl) * probe), argnums=(0, 1, 2)
        )(q, kk, v)

    (want, want_grads), (got, got_grads) = loss("xla"), loss("pallas")
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=False):
        np.testing.assert_allclose(g, w, atol=1e-4 * float(jnp.abs(w).max()))


def test_train_linear_highest_sums_long_contractions_more_exactly():
    """SmolLM2's MLP down projection shape (K=1536) with activations of the size its residual stream
    reaches: blocked pairwise summation lands closer to float64 than XLA's single f32 chain."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((256, 1536)) * np.exp(rng.normal(0, 1.5, 1536))).astype(
        np.float32
    )  # heavy-tailed channels
    w = (rng.standard_normal((1536, 576)) * 0.05).astype(np.float32)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    run = jax.jit(linear, static_argnums=2)
    default, highest = np.asarray(run(x, w, "default")), np.asarray(run(x, w, "highest"))
    err_default, err_highest = np.abs(default - exact), np.abs(highest - exact)
    assert err_highest.max() < err_default.max() and err_highest.mean() < 0.75 * err_default.mean(), (
        err_highest.max(),
        err_default.max(),
        err_highest.mean(),
        err_default.mean(),
    )
    np.testing.assert_allclose(highest, exact, rtol=0, atol=1e-5 * np.abs(exact).max())
    # A ragged last block, a contraction shorter than one block, and bf16 (one dot at full precision)
    # keep shapes and values.
    for k in (SUM_BLOCK * 3 + 5, SUM_BLOCK - 1):
        xs, ws = x[:4, :k], w[:k, :8]
        np.testing.assert_allclose(
            np.asarray(run(xs, ws, "highest")), xs.astype(np.float64) @ ws.astype(np.float64), rtol=1e-5, atol=1e-5
        )
    bf16 = run(jnp.asarray(x[:4], jnp.bfloat16), jnp.asarray(w, jnp.bfloat16), "highest")
    assert bf16.dtype == jnp.bfloat16 and bf16.shape == (4, 576)


def test_train_model_highest_precision_is_the_same_model(numpy_init):
    """Same weights, both precisions: the same function up to f32 rounding."""
    tokens = np.random.default_rng(1).integers(1, 300, (2, 24))
    cfg = dataclasses.replace(BASE, remat="none", tie_embeddings=False)
    fast, exact = numpy_init(cfg), numpy_init(dataclasses.replace(cfg, matmul_precision="highest"))
    assert exact.blocks.mlp.precision == "highest" and exact.blocks.attn.cfg.matmul_precision == "highest"
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(exact), strict=False):
        np.testing.assert_array_equal(a, b)
    logits = jax.jit(lambda m, t: m.logits(t))
    np.testing.assert_allclose(
        np.asarray(logits(exact, tokens)), np.asarray(logits(fast, tokens)), rtol=1e-5, atol=1e-5
    )


def test_train_model_config_errors_suggest_fixes():
    with pytest.raises(ValueError, match=r"num_kv_heads to one of \[1, 2, 4\]"):
        ModelConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="matmul_precision must be 'default' or 'highest'"):
        ModelConfig(matmul_precision="high")
    with pytest.raises(ValueError, match="set head_dim explicitly"):
        ModelConfig(hidden_dim=100, num_heads=3, num_kv_heads=1)
    model = jax.eval_shape(
        lambda: Transformer.init(dataclasses.replace(BASE, max_seq_len=4), key=jax.random.PRNGKey(0))
    )
    with pytest.raises(ValueError, match="raise max_seq_len"):
        jax.eval_shape(model, jax.ShapeDtypeStruct((1, 8), jnp.int32))
