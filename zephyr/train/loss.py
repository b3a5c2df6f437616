"""Linear cross-entropy that never materialises the [tokens x vocab] logits.

The output projection and the softmax cross-entropy are fused: the forward
walks the vocabulary in blocks of ``vocab_block`` columns keeping a running
log-sum-exp (online softmax), and the custom VJP walks them again, recomputing
each block of logits from the saved log-sum-exp. Tokens are processed in
blocks of ``token_block`` rows, so the largest temporary is
``token_block x vocab_block`` whatever the batch and vocabulary. Trading one
extra matmul for memory is what lets a 49k-256k vocabulary fit beside a large
batch.

Every implementation (fused, reference, Pallas) has the same contract::

    (hidden [N, D], weight [D, V], labels [N]) -> (ce [N], lse [N])

``ce = lse - logit[label]`` in f32; ``lse`` is returned so that z-loss
(``z * lse**2``) and per-token weights are plain JAX on top and differentiate
through the same VJP. Labels must lie in ``[0, V)``; mask positions with zero
token weight rather than with an out-of-range label.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from zephyr.train.ce_vjp import check_linear_ce_shapes, linear_ce_with_vjp

__all__ = ["reference_linear_cross_entropy", "fused_linear_cross_entropy", "linear_cross_entropy_loss"]


def reference_linear_cross_entropy(
    hidden: Float[Array, "N D"], weight: Float[Array, "D V"], labels: Int[Array, "N"]
) -> tuple[Float[Array, "N"], Float[Array, "N"]]:
    """The obvious implementation: full logits, then log-softmax. Kept as the ground truth."""
    logits = jnp.dot(hidden, weight.astype(hidden.dtype), preferred_element_type=jnp.float32)  # N V
    lse = jax.nn.logsumexp(logits, axis=-1)  # N
    label_logits = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]  # N
    return lse - label_logits, lse


def _pad_rows(x: Array, rows: int) -> Array:
    return x if x.shape[0] == rows else jnp.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1))


def _blocked(hidden: Array, weight: Array, labels: Array, vocab_block: int, token_block: int):
    """Pad to whole blocks; returns hidden as [nT, T, D], labels [nT, T], weight [D, nV*Bv]."""
    n, d = hidden.shape
    v = weight.shape[1]
    t = min(token_block, n)
    bv = min(vocab_block, v)
    n_t, n_v = -(-n // t), -(-v // bv)
    h = _pad_rows(hidden, n_t * t).reshape(n_t, t, d)  # nT T D
    y = _pad_rows(labels, n_t * t).reshape(n_t, t)  # nT T
    w = weight if n_v * bv == v else jnp.pad(weight, [(0, 0), (0, n_v * bv - v)])  # D nV*Bv
    return h, y, w.astype(hidden.dtype), t, bv, n_v


def _block_logits(h: Array, w: Array, j: Array, bv: int, v: int) -> tuple[Array, Array]:
    """Logits of vocabulary block ``j`` (padding columns at -inf) and their column ids."""
    w_j = jax.lax.dynamic_slice_in_dim(w, j * bv, bv, axis=1)  # D Bv
    cols = j * bv + jnp.arange(bv)  # Bv
    logits = jnp.dot(h, w_j, preferred_element_type=jnp.float32)  # T Bv
    return jnp.where(cols[None, :] < v, logits, -jnp.inf), cols


def _forward(hidden, weight, labels, vocab_block, token_block):
    n, v = hidden.shape[0], weight.shape[1]
    h, y, w, _, bv, n_v = _blocked(hidden, weight, labels, vocab_block, token_block)

    def token_block_fn(args):
        h_i, y_i = args  # T D, T

        def vocab_step(carry, j):
            running_max, running_sum, label_logit = carry  # T, T, T
            logits, cols = _block_logits(h_i, w, j, bv, v)  # T Bv
            new_max = jnp.maximum(running_max, logits.max(axis=-1))
            running_sum = running_sum * jnp.exp(running_max - new_max) + jnp.exp(logits - new_max[:, None]).sum(axis=-1)
            label_logit = label_logit + jnp.where(cols[None, :] == y_i[:, None], logits, 0.0).sum(axis=-1)
            return (new_max, running_sum, label_logit), None

        t = h_i.shape[0]
        init = (jnp.full((t,), -jnp.inf, jnp.float32), jnp.zeros((t,), jnp.float32), jnp.zeros((t,), jnp.float32))
        (running_max, running_sum, label_logit), _ = jax.lax.scan(vocab_step, init, jnp.arange(n_v))
        lse = running_max + jnp.log(running_sum)
        return lse - label_logit, lse

    ce, lse = jax.lax.map(token_block_fn, (h, y))  # nT T each
    return ce.reshape(-1)[:n], lse.reshape(-1)[:n]


def _backward(hidden, weight, labels, lse, g_ce, g_lse, vocab_block, token_block):
    n, d = hidden.shape
    v = weight.shape[1]
    h, y, w, t, bv, n_v = _blocked(hidden, weight, labels, vocab_block, token_block)
    n_t = h.shape[0]
    lse_b = _pad_rows(lse, n_t * t).reshape(n_t, t)
    # d ce / d logits = p - onehot ; d lse / d logits = p   ->   dlogits = p (g_ce + g_lse) - g_ce onehot
    g_ce_b = _pad_rows(g_ce.astype(jnp.float32), n_t * t).reshape(n_t, t)  # padded rows get zero gradient
    g_lse_b = _pad_rows(g_lse.astype(jnp.float32), n_t * t).reshape(n_t, t)

    def token_step(dw, args):
        h_i, y_i, lse_i, gce_i, glse_i = args  # T D, T, T, T, T

        def vocab_step(carry, j):
            dh_i, dw = carry  # T D (f32), D nV*Bv (f32)
            logits, cols = _block_logits(h_i, w, j, bv, v)  # T Bv
            p = jnp.exp(logits - lse_i[:, None])  # T Bv, zero on padding columns
            onehot = (cols[None, :] == y_i[:, None]).astype(jnp.float32)
            dlogits = (p * (gce_i + glse_i)[:, None] - onehot * gce_i[:, None]).astype(h_i.dtype)  # T Bv
            w_j = jax.lax.dynamic_slice_in_dim(w, j * bv, bv, axis=1)  # D Bv
            dh_i = dh_i + jnp.dot(dlogits, w_j.T, preferred_element_type=jnp.float32)  # T D
            dw_j = jax.lax.dynamic_slice_in_dim(dw, j * bv, bv, axis=1) + jnp.dot(
                h_i.T, dlogits, preferred_element_type=jnp.float32
            )
            return (dh_i, jax.lax.dynamic_update_slice_in_dim(dw, dw_j, j * bv, axis=1)), None

        (dh_i, dw), _ = jax.lax.scan(vocab_step, (jnp.zeros((t, d), jnp.float32), dw), jnp.arange(n_v))
        return dw, dh_i

    dw0 = jnp.zeros((d, n_v * bv), jnp.float32)
    dw, dh = jax.lax.scan(token_step, dw0, (h, y, lse_b, g_ce_b, g_lse_b))  # D nV*Bv, nT T D
    return dh.reshape(-1, d)[:n].astype(hidden.dtype), dw[:, :v].astype(weight.dtype)


_fused = linear_ce_with_vjp(_forward, _backward)  # (hidden, weight, labels, vocab_block, token_block)


def fused_linear_cross_entropy(
    hidden: Float[Array, "N D"],
    weight: Float[Array, "D V"],
    labels: Int[Array, "N"],
    *,
    vocab_block: int = 2048,
    token_block: int = 4096,
) -> tuple[Float[Array, "N"], Float[Array, "N"]]:
    """Streaming (ce, lse) with a custom VJP; peak temporary is token_block x vocab_block f32."""
    check_linear_ce_shapes("fused_linear_cross_entropy", hidden, weight, labels)
    return _fused(hidden, weight, labels.astype(jnp.int32), int(vocab_block), int(token_block))


def linear_cross_entropy_loss(
    hidden: Float[Array, "... D"],
    weight: Float[Array, "D V"],
    labels: Int[Array, "..."],
    token_weights: Float[Array, "..."] | None = None,
    *,
    z_loss: float = 0.0,
    impl: Literal["fused", "reference", "pallas"] = "fused",
    vocab_block: int = 2048,
    token_block: int = 4096,
) -> tuple[Float[Array, ""], dict[str, Array]]:
    """Weighted mean of ``ce + z_loss * lse**2`` over tokens.

    Returns ``(loss, stats)`` where stats holds the weighted sums needed to pool
    across batches (``ce_sum``, ``weight_sum``) and the mean z-loss term.
    """
    d = hidden.shape[-1]
    h = hidden.reshape(-1, d)  # N D
    y = labels.reshape(-1)  # N
    w = jnp.ones(y.shape, jnp.float32) if token_weights is None else token_weights.reshape(-1).astype(jnp.float32)
    if impl == "fused":
        ce, lse = fused_linear_cross_entropy(h, weight, y, vocab_block=vocab_block, token_block=token_block)
    elif impl == "reference":
        ce, lse = reference_linear_cross_entropy(h, weight, y)
    elif impl == "pallas":
        from zephyr.train.pallas_loss import pallas_linear_cross_entropy

        ce, lse = pallas_linear_cross_entropy(h, weight, y, interpret=jax.default_backend() != "gpu")
    else:
        raise ValueError(f"loss impl must be 'fused', 'reference' or 'pallas', got {impl!r}.")
    weight_sum = jnp.sum(w)
    denom = jnp.maximum(weight_sum, 1e-8)
    ce_sum = jnp.sum(ce * w)
    z_term = jnp.sum(z_loss * jnp.square(lse) * w) / denom if z_loss else jnp.zeros((), jnp.float32)
    return ce_sum / denom + z_term, {"ce_sum": ce_sum, "weight_sum": weight_sum, "z_loss": z_term}
