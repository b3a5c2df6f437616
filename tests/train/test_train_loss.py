"""Fused linear cross-entropy: same loss and gradients as the reference, without [tokens x vocab] memory."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zephyr.train.loss import fused_linear_cross_entropy, linear_cross_entropy_loss, reference_linear_cross_entropy
from zephyr.train.pallas_loss import pallas_linear_cross_entropy


def _inputs(n: int, d: int, v: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    hidden = jnp.asarray(rng.standard_normal((n, d)), jnp.float32)
    weight = jnp.asarray(
        rng.standard_normal((d, v)) / np.sqrt(d) * 3.0, jnp.float32
    )  # peaked softmax, like a trained head
    labels = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    token_weights = jnp.asarray((rng.random(n) > 0.2) * rng.uniform(0.5, 2.0, n), jnp.float32)  # some tokens masked
    return hidden, weight, labels, token_weights


@pytest.mark.parametrize(
    ("n", "d", "v", "vocab_block", "token_block"),
    [
        (50, 32, 1000, 128, 16),  # neither tokens (50 = 3 * 16 + 2) nor vocab (1000 = 7 * 128 + 104) divisible
        (33, 8, 96, 1024, 1024),  # blocks larger than the data
    ],
)
def test_train_fused_loss_and_grads_match_reference(n, d, v, vocab_block, token_block):
    hidden, weight, labels, token_weights = _inputs(n, d, v)

    def loss(impl, **kw):
        return lambda h, w: linear_cross_entropy_loss(h, w, labels, token_weights, z_loss=1e-3, impl=impl, **kw)[0]

    (ref, (ref_dh, ref_dw)) = jax.jit(jax.value_and_grad(loss("reference"), argnums=(0, 1)))(hidden, weight)
    (got, (dh, dw)) = jax.jit(
        jax.value_and_grad(loss("fused", vocab_block=vocab_block, token_block=token_block), argnums=(0, 1))
    )(hidden, weight)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-6)
    np.testing.assert_allclose(dh, ref_dh, atol=1e-5)
    np.testing.assert_allclose(dw, ref_dw, atol=1e-5)
    assert float(jnp.abs(ref_dw).max()) > 1e-3  # the gradients compared are not trivially zero


def test_train_fused_per_token_outputs_and_arbitrary_cotangents():
    """(ce, lse) per token match, and the VJP is right for any cotangent (not just a mean)."""
    hidden, weight, labels, _ = _inputs(45, 16, 300)
    g = jnp.asarray(np.random.default_rng(1).standard_normal((2, 45)), jnp.float32)

    def outputs_and_vjp(fn):
        out, vjp = jax.vjp(lambda h, w: fn(h, w, labels), hidden, weight)
        return out, vjp((g[0], g[1]))

    fused = jax.jit(
        lambda: outputs_and_vjp(lambda h, w, y: fused_linear_cross_entropy(h, w, y, vocab_block=64, token_block=16))
    )()
    ref = jax.jit(lambda: outputs_and_vjp(reference_linear_cross_entropy))()
    for got, want in zip(jax.tree.leaves(fused), jax.tree.leaves(ref), strict=False):  # ce, lse, d hidden, d weight
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_train_fused_loss_bf16_close_to_f32_reference():
    hidden, weight, labels, token_weights = _inputs(64, 32, 500)
    ref = jax.jit(lambda: linear_cross_entropy_loss(hidden, weight, labels, token_weights, impl="reference")[0])()
    got = jax.jit(
        lambda: linear_cross_entropy_loss(
            hidden.astype(jnp.bfloat16),
            weight.astype(jnp.bfloat16),
            labels,
            token_weights,
            impl="fused",
            vocab_block=128,
            token_block=32,
        )[0]
    )()
    assert got.dtype == jnp.float32
    assert abs(float(got) - float(ref)) < 0.05 * abs(float(ref))


def test_train_fused_loss_rejects_unflattened_input():
    hidden, weight, labels, _ = _inputs(8, 4, 10)
    with pytest.raises(ValueError, match="Flatten batch and sequence"):
        fused_linear_cross_entropy(hidden.reshape(2, 4, 4), weight, labels)


def test_train_pallas_interpret_matches_reference():
    """The Pallas kernels (interpret mode on CPU) give the reference loss and gradients."""
    hidden, weight, labels, token_weights = _inputs(21, 12, 50)  # D not a power of two; N, V not whole blocks

    def loss(fn):
        def f(h, w):
            ce, lse = fn(h, w, labels)
            return jnp.sum(ce * token_weights) / jnp.sum(token_weights) + 1e-3 * jnp.mean(lse**2)

        return f

    ref, ref_grads = jax.jit(jax.value_and_grad(loss(reference_linear_cross_entropy), argnums=(0, 1)))(hidden, weight)
    for d_block in (4, 16):  # D=12 in three chunks, and in one chunk padded with zeros
        fn = functools.partial(
            pallas_linear_cross_entropy, token_block=8, vocab_block=16, d_block=d_block, interpret=True
        )
        got, grads = jax.jit(jax.value_and_grad(loss(fn), argnums=(0, 1)))(hidden, weight)
        np.testing.assert_allclose(got, ref, atol=1e-5)
        for g, r in zip(grads, ref_grads, strict=False):
            np.testing.assert_allclose(g, r, atol=1e-5)


def _buffer_shapes(hlo_text: str) -> set[tuple[int, ...]]:
    return {tuple(int(x) for x in dims.split(",") if x) for dims in re.findall(r"f32\[([\d,]*)\]", hlo_text)}


def test_train_step_memory_has_no_tokens_by_vocab_buffer():
    """Compile a whole loss+grad step; the fused one holds no [tokens x vocab] array, the reference does."""
    from zephyr.train.config import ModelConfig
    from zephyr.train.model import Transformer

    cfg = ModelConfig(
        vocab_size=8192,
        hidden_dim=16,
        intermediate_dim=32,
        num_layers=1,
        num_heads=1,
        num_kv_heads=1,
        max_seq_len=64,
        remat="none",
    )
    b, s = 4, 64
    n, v = b * s, cfg.vocab_size
    model = jax.eval_shape(lambda: Transformer.init(cfg, key=jax.random.PRNGKey(0)))
    tokens = jax.ShapeDtypeStruct((b, s + 1), jnp.int32)

    def step(impl):
        def loss(m, t):
            hidden = m(t[:, :-1])
            return linear_cross_entropy_loss(
                hidden, m.output_weight(), t[:, 1:], impl=impl, vocab_block=512, token_block=64
            )[0]

        return jax.jit(jax.grad(loss)).lower(model, tokens).compile()

    fused, reference = step("fused"), step("reference")
    logits_bytes = n * v * 4
    fused_temp = fused.memory_analysis().temp_size_in_bytes
    reference_temp = reference.memory_analysis().temp_size_in_bytes
    assert reference_temp >= logits_bytes  # the naive path does hold the logits
    assert fused_temp < logits_bytes / 4, (fused_temp, logits_bytes)
    too_big = [shape for shape in _buffer_shapes(fused.as_text()) if int(np.prod(shape)) >= n * v // 2]
    assert not too_big, f"fused step has a [tokens x vocab]-sized buffer: {too_big}"
    assert any(int(np.prod(sh)) >= n * v for sh in _buffer_shapes(reference.as_text()))
