"""Pallas (Triton backend) kernels for the fused linear cross-entropy.

Same contract as ``loss.fused_linear_cross_entropy``: ``(hidden [N, D], weight
[D, V], labels [N]) -> (ce [N], lse [N])`` with a custom VJP, never holding
more than one ``token_block x vocab_block`` tile of logits. Every tile is
small enough for a streaming multiprocessor: the hidden dimension is walked in
chunks of ``d_block`` columns, so no operand tile is wider than that (a whole
``[token_block, D]`` row block of SmolLM2's D=576, padded to Triton's
power-of-two shapes, would not fit in shared memory).

- forward, one program per token block: for each vocabulary block, logits
  accumulated over D chunks, then an online log-sum-exp;
- backward, one program per (token block, vocabulary block) tile: recompute the
  tile's logits from the saved log-sum-exp, form d logits, and add its
  contributions to d hidden and d weight chunk by chunk with atomic adds (f32),
  the way cut-cross-entropy kernels do. Each tile's logits are computed once in
  the backward; the price is that on a GPU the order of the atomic additions,
  and so the last bits of the gradients, can differ between runs.

On CPU the kernels run with ``interpret=True`` (that is how the tests check
them); ``benchmarks/train_gpu.py`` runs them compiled on a GPU against the
reference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt
from jaxtyping import Array, Float, Int

from zephyr.train.ce_vjp import check_linear_ce_shapes, linear_ce_with_vjp

__all__ = ["pallas_linear_cross_entropy"]

_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a [T, Bv] . b [Dc, Bv] -> [T, Dc]   (a @ b.T)
_CONTRACT_FIRST = (((0,), (0,)), ((), ()))  # a [T, Dc] . b [T, Bv]  -> [Dc, Bv]  (a.T @ b)


def _tile_logits(h_ref, w_ref, j, *, bv, dc, n_d, v):
    """Logits of the token block in ``h_ref`` against vocabulary block ``j``; padding columns at -inf."""

    def chunk(k, acc):
        h_k = h_ref[:, pl.ds(k * dc, dc)]  # T Dc
        w_kj = w_ref[pl.ds(k * dc, dc), pl.ds(j * bv, bv)]  # Dc Bv
        return acc + jnp.dot(h_k, w_kj, preferred_element_type=jnp.float32)

    t = h_ref.shape[0]
    logits = jax.lax.fori_loop(0, n_d, chunk, jnp.zeros((t, bv), jnp.float32))  # T Bv
    cols = j * bv + jnp.arange(bv, dtype=jnp.int32)  # Bv
    return jnp.where(cols[None, :] < v, logits, -jnp.inf), cols


def _forward_kernel(h_ref, w_ref, y_ref, ce_ref, lse_ref, *, bv, dc, n_v, n_d, v):
    y = y_ref[...]  # T

    def body(j, carry):
        running_max, running_sum, label_logit = carry
        logits, cols = _tile_logits(h_ref, w_ref, j, bv=bv, dc=dc, n_d=n_d, v=v)
        new_max = jnp.maximum(running_max, jnp.max(logits, axis=1))
        running_sum = running_sum * jnp.exp(running_max - new_max) + jnp.sum(jnp.exp(logits - new_max[:, None]), axis=1)
        label_logit = label_logit + jnp.sum(jnp.where(cols[None, :] == y[:, None], logits, 0.0), axis=1)
        return new_max, running_sum, label_logit

    t = y.shape[0]
    init = (jnp.full((t,), -jnp.inf, jnp.float32), jnp.zeros((t,), jnp.float32), jnp.zeros((t,), jnp.float32))
    running_max, running_sum, label_logit = jax.lax.fori_loop(0, n_v, body, init)
    lse = running_max + jnp.log(running_sum)
    ce_ref[...] = lse - label_logit
    lse_ref[...] = lse


def _backward_kernel(
    h_ref, w_ref, y_ref, lse_ref, gce_ref, glse_ref, dh_in, dw_in, dh_ref, dw_ref, *, t, bv, dc, n_d, v
):
    del dh_in, dw_in  # the same buffers as dh_ref / dw_ref (aliased zeros), accumulated with atomics
    i, j = pl.program_id(0), pl.program_id(1)
    y, lse, g_ce, g_lse = y_ref[...], lse_ref[...], gce_ref[...], glse_ref[...]
    logits, cols = _tile_logits(h_ref, w_ref, j, bv=bv, dc=dc, n_d=n_d, v=v)
    p = jnp.exp(logits - lse[:, None])  # T Bv, zero on padding columns
    onehot = (cols[None, :] == y[:, None]).astype(jnp.float32)
    # d ce / d logits = p - onehot ; d lse / d logits = p
    dlogits = (p * (g_ce + g_lse)[:, None] - onehot * g_ce[:, None]).astype(h_ref.dtype)  # T Bv

    @pl.loop(0, n_d)
    def _(k):
        h_k = h_ref[:, pl.ds(k * dc, dc)]  # T Dc
        w_kj = w_ref[pl.ds(k * dc, dc), pl.ds(j * bv, bv)]  # Dc Bv
        dh_k = jax.lax.dot_general(dlogits, w_kj, _CONTRACT_LAST, preferred_element_type=jnp.float32)  # T Dc
        dw_kj = jax.lax.dot_general(h_k, dlogits, _CONTRACT_FIRST, preferred_element_type=jnp.float32)  # Dc Bv
        plt.atomic_add(dh_ref, (pl.ds(i * t, t), pl.ds(k * dc, dc)), dh_k)
        plt.atomic_add(dw_ref, (pl.ds(k * dc, dc), pl.ds(j * bv, bv)), dw_kj)


def _pad(x: Array, axis: int, size: int) -> Array:
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths)


def _layout(hidden, weight, labels, t, bv, dc):
    """Pad N, V and D to whole blocks; zero rows and columns change nothing."""
    n, d = hidden.shape
    v = weight.shape[1]
    n_t, n_v, n_d = pl.cdiv(n, t), pl.cdiv(v, bv), pl.cdiv(d, dc)
    h = _pad(_pad(hidden, 0, n_t * t), 1, n_d * dc)  # Np Dp
    w = _pad(_pad(weight.astype(hidden.dtype), 1, n_v * bv), 0, n_d * dc)  # Dp Vp
    y = _pad(labels, 0, n_t * t)
    return h, w, y, n_t, n_v, n_d


def _call_forward(hidden, weight, labels, blocks, interpret):
    t, bv, dc, num_warps = blocks
    n, v = hidden.shape[0], weight.shape[1]
    h, w, y, n_t, n_v, n_d = _layout(hidden, weight, labels, t, bv, dc)
    row = pl.BlockSpec((t,), lambda i: (i,))
    ce, lse = pl.pallas_call(
        functools.partial(_forward_kernel, bv=bv, dc=dc, n_v=n_v, n_d=n_d, v=v),
        out_shape=(jax.ShapeDtypeStruct((n_t * t,), jnp.float32),) * 2,
        grid=(n_t,),
        in_specs=[pl.BlockSpec((t, h.shape[1]), lambda i: (i, 0)), pl.BlockSpec(w.shape, lambda i: (0, 0)), row],
        out_specs=(row, row),
        compiler_params=plt.CompilerParams(num_warps=num_warps),
        interpret=interpret,
        name="fused_ce_forward",
    )(h, w, y)
    return ce[:n], lse[:n]


def _call_backward(hidden, weight, labels, lse, g_ce, g_lse, blocks, interpret):
    t, bv, dc, num_warps = blocks
    n, d = hidden.shape
    v = weight.shape[1]
    h, w, y, n_t, n_v, n_d = _layout(hidden, weight, labels, t, bv, dc)
    lse, g_ce, g_lse = (_pad(x.astype(jnp.float32), 0, n_t * t) for x in (lse, g_ce, g_lse))  # padded rows: zero grad
    row = pl.BlockSpec((t,), lambda i, j: (i,))
    whole_h = pl.BlockSpec(h.shape, lambda i, j: (0, 0))
    whole_w = pl.BlockSpec(w.shape, lambda i, j: (0, 0))
    dh, dw = pl.pallas_call(
        functools.partial(_backward_kernel, t=t, bv=bv, dc=dc, n_d=n_d, v=v),
        out_shape=(jax.ShapeDtypeStruct(h.shape, jnp.float32), jax.ShapeDtypeStruct(w.shape, jnp.float32)),
        grid=(n_t, n_v),
        in_specs=[pl.BlockSpec((t, h.shape[1]), lambda i, j: (i, 0)), whole_w, row, row, row, row, whole_h, whole_w],
        out_specs=(whole_h, whole_w),
        input_output_aliases={6: 0, 7: 1},
        compiler_params=plt.CompilerParams(num_warps=num_warps),
        interpret=interpret,
        name="fused_ce_backward",
    )(h, w, y, lse, g_ce, g_lse, jnp.zeros(h.shape, jnp.float32), jnp.zeros(w.shape, jnp.float32))
    return dh[:n, :d].astype(hidden.dtype), dw[:d, :v].astype(weight.dtype)


_pallas_ce = linear_ce_with_vjp(_call_forward, _call_backward)  # (hidden, weight, labels, blocks, interpret)


def pallas_linear_cross_entropy(
    hidden: Float[Array, "N D"],
    weight: Float[Array, "D V"],
    labels: Int[Array, "N"],
    *,
    token_block: int = 128,
    vocab_block: int = 128,
    d_block: int = 64,
    num_warps: int = 8,
    interpret: bool = False,
) -> tuple[Float[Array, "N"], Float[Array, "N"]]:
    """(ce, lse) via Pallas kernels. ``interpret=True`` runs anywhere (slowly); otherwise needs a GPU.

    The three block sizes must be powers of two (Triton's tiles); N, V and D are
    zero-padded to whole blocks. The defaults were the fastest of those tried on an
    H100 (benchmarks/train_gpu.py); a 64 x 256 tile already exceeds shared memory.
    """
    check_linear_ce_shapes("pallas_linear_cross_entropy", hidden, weight, labels)
    blocks = (int(token_block), int(vocab_block), int(d_block), int(num_warps))
    if any(b < 1 or b & (b - 1) for b in blocks[:3]):
        raise ValueError(
            f"Triton tiles must be powers of two; got token_block={token_block}, vocab_block={vocab_block}, "
            f"d_block={d_block}. Use e.g. 64, 128, 64."
        )
    return _pallas_ce(hidden, weight, labels.astype(jnp.int32), blocks, bool(interpret))
