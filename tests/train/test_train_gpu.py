"""The Pallas kernels compiled by Triton on a real GPU (skipped where JAX sees none).

CI has no GPU; these run on a lent accelerator with ``pytest tests/train/test_train_gpu.py``.
The CPU suite checks the same kernels in interpret mode (test_train_loss, test_train_model).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zephyr.train.loss import reference_linear_cross_entropy
from zephyr.train.model import causal_attention, segment_ids_from_eos
from zephyr.train.pallas_loss import pallas_linear_cross_entropy

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a CUDA GPU (Triton kernels)")


@pytest.mark.parametrize("dtype,tolerance", [(jnp.float32, 2e-5), (jnp.bfloat16, 2e-2)])
def test_gpu_pallas_loss_matches_reference(dtype, tolerance):
    """SmolLM2's head (D=576, not a power of two), a vocabulary that is not whole blocks, masked tokens."""
    rng = np.random.default_rng(0)
    n, d, v = 3000, 576, 50257
    hidden = jnp.asarray(rng.normal(size=(n, d)), dtype)
    weight = jnp.asarray(rng.normal(size=(d, v)) * 0.05, dtype)
    labels = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    weights = jnp.asarray(rng.random(n) > 0.1, jnp.float32)

    def objective(fn):
        def f(h, w):
            ce, lse = fn(h, w, labels)
            return jnp.sum(ce * weights) / jnp.sum(weights) + 1e-4 * jnp.mean(lse**2)

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    with jax.default_matmul_precision("highest"):  # f32 without TF32 on both sides
        want, want_grads = objective(reference_linear_cross_entropy)(hidden, weight)
        got, got_grads = objective(pallas_linear_cross_entropy)(hidden, weight)
    np.testing.assert_allclose(float(got), float(want), rtol=tolerance)
    for g, w in zip(got_grads, want_grads, strict=False):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert np.abs(g - w).max() <= tolerance * np.abs(w).max()


@pytest.mark.parametrize(
    "impl,dtype,tolerance,doc_tokens",
    [("pallas", jnp.float32, 1e-3, 300), ("cudnn", jnp.bfloat16, 2e-2, 300), ("cudnn", jnp.bfloat16, 2e-2, 12)],
)
def test_gpu_flash_attention_with_documents_matches_xla(impl, dtype, tolerance, doc_tokens):
    """The Pallas kernel (segment ids) and cuDNN (dense document mask as a bias) against XLA:
    grouped-query heads, documents of ~300 and ~12 tokens packed in 2,048 positions; values and gradients."""
    rng = np.random.default_rng(0)
    b, s, n, k, h = 2, 2048, 9, 3, 64
    q, kk, v = (jnp.asarray(rng.normal(size=(b, s, heads, h)), dtype) for heads in (n, k, k))
    tokens = rng.integers(1, 1000, (b, s))
    tokens[rng.random(tokens.shape) < 1 / doc_tokens] = 0
    seg = segment_ids_from_eos(jnp.asarray(tokens), 0)
    probe = jnp.asarray(rng.normal(size=(b, s, n, h)), jnp.float32)

    def run(impl, dtype):
        out, vjp = jax.vjp(
            lambda q, kk, v: causal_attention(q, kk, v, seg, impl), *(x.astype(dtype) for x in (q, kk, v))
        )
        return [np.asarray(x, np.float32) for x in (out, *vjp(probe.astype(dtype)))]

    with jax.default_matmul_precision("highest"):
        want, got = run("xla", jnp.float32), run(impl, dtype)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=False):
        assert np.abs(g - w).max() <= tolerance * np.abs(w).max(), (impl, name, np.abs(g - w).max(), np.abs(w).max())
