"""Pallas (Triton backend) kernels for the fused linear cross-entropy.

Same contract as ``loss.fused_linear_cross_entropy``: ``(hidden [N, D], weight
[D, V], labels [N]) -> (ce [N], lse [N])`` with a custom VJP, never holding
more than one ``token_block x vocab_block`` tile of logits. Three kernels:

- forward, one program per token block: online log-sum-exp over vocab blocks;
- d hidden, one program per token block: recompute each logits tile from lse;
- d weight, one program per vocab block: loop over token blocks and
  accumulate, so no two programs write the same output (no atomics).

On CPU the kernels run with ``interpret=True`` (that is how the tests check
them). Status: verified only in interpret mode; the compiled Triton path has
not yet been run on a GPU from this repository, and the block sizes are
untuned guesses.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jaxtyping import Array, Float, Int

__all__ = ["pallas_linear_cross_entropy"]

_CONTRACT_COLS = (((1,), (1,)), ((), ()))  # a [T, Bv] . b [D, Bv] -> [T, D]   (a @ b.T)
_CONTRACT_ROWS = (((0,), (0,)), ((), ()))  # a [T, D] . b [T, Bv]  -> [D, Bv]  (a.T @ b)


def _tile_logits(h, w_ref, j, bv, v):
    w_j = w_ref[:, pl.ds(j * bv, bv)]  # D Bv
    cols = j * bv + jnp.arange(bv, dtype=jnp.int32)  # Bv
    logits = jnp.dot(h, w_j, preferred_element_type=jnp.float32)  # T Bv
    return jnp.where(cols[None, :] < v, logits, -jnp.inf), cols, w_j


def _forward_kernel(h_ref, w_ref, y_ref, ce_ref, lse_ref, *, bv, n_v, v):
    h, y = h_ref[...], y_ref[...]  # T D, T

    def body(j, carry):
        running_max, running_sum, label_logit = carry
        logits, cols, _ = _tile_logits(h, w_ref, j, bv, v)
        new_max = jnp.maximum(running_max, jnp.max(logits, axis=1))
        running_sum = running_sum * jnp.exp(running_max - new_max) + jnp.sum(jnp.exp(logits - new_max[:, None]), axis=1)
        label_logit = label_logit + jnp.sum(jnp.where(cols[None, :] == y[:, None], logits, 0.0), axis=1)
        return new_max, running_sum, label_logit

    t = h.shape[0]
    init = (jnp.full((t,), -jnp.inf, jnp.float32), jnp.zeros((t,), jnp.float32), jnp.zeros((t,), jnp.float32))
    running_max, running_sum, label_logit = jax.lax.fori_loop(0, n_v, body, init)
    lse = running_max + jnp.log(running_sum)
    ce_ref[...] = lse - label_logit
    lse_ref[...] = lse


def _dlogits(logits, cols, y, lse, g_ce, g_lse, dtype):
    p = jnp.exp(logits - lse[:, None])  # T Bv
    onehot = (cols[None, :] == y[:, None]).astype(jnp.float32)
    return (p * (g_ce + g_lse)[:, None] - onehot * g_ce[:, None]).astype(dtype)


def _dhidden_kernel(h_ref, w_ref, y_ref, lse_ref, gce_ref, glse_ref, dh_ref, *, bv, n_v, v):
    h, y, lse, g_ce, g_lse = h_ref[...], y_ref[...], lse_ref[...], gce_ref[...], glse_ref[...]

    def body(j, dh):
        logits, cols, w_j = _tile_logits(h, w_ref, j, bv, v)
        dl = _dlogits(logits, cols, y, lse, g_ce, g_lse, h.dtype)  # T Bv
        return dh + jax.lax.dot_general(dl, w_j, _CONTRACT_COLS, preferred_element_type=jnp.float32)  # T D

    dh = jax.lax.fori_loop(0, n_v, body, jnp.zeros(h.shape, jnp.float32))
    dh_ref[...] = dh.astype(dh_ref.dtype)


def _dweight_kernel(h_ref, w_ref, y_ref, lse_ref, gce_ref, glse_ref, dw_ref, *, t, n_t, bv, v):
    j = pl.program_id(0)
    w_j = w_ref[...]  # D Bv
    cols = j * bv + jnp.arange(bv, dtype=jnp.int32)

    def body(i, dw):
        rows = pl.ds(i * t, t)
        h, y, lse, g_ce, g_lse = h_ref[rows, :], y_ref[rows], lse_ref[rows], gce_ref[rows], glse_ref[rows]
        logits = jnp.dot(h, w_j, preferred_element_type=jnp.float32)  # T Bv
        logits = jnp.where(cols[None, :] < v, logits, -jnp.inf)
        dl = _dlogits(logits, cols, y, lse, g_ce, g_lse, h.dtype)
        return dw + jax.lax.dot_general(h, dl, _CONTRACT_ROWS, preferred_element_type=jnp.float32)  # D Bv

    dw = jax.lax.fori_loop(0, n_t, body, jnp.zeros(w_j.shape, jnp.float32))
    dw_ref[...] = dw.astype(dw_ref.dtype)


def _pad(x: Array, axis: int, size: int) -> Array:
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths)


def _layout(hidden, weight, labels, token_block, vocab_block, pad_pow2):
    """Pad N, V to whole blocks (and D to a power of two for Triton); zeros change nothing."""
    n, d = hidden.shape
    v = weight.shape[1]
    t, bv = token_block, vocab_block
    n_t, n_v = pl.cdiv(n, t), pl.cdiv(v, bv)
    dp = pl.next_power_of_2(d) if pad_pow2 else d
    h = _pad(_pad(hidden, 0, n_t * t), 1, dp)  # Np Dp
    w = _pad(_pad(weight.astype(hidden.dtype), 1, n_v * bv), 0, dp)  # Dp Vp
    y = _pad(labels, 0, n_t * t)
    return h, w, y, n_t, n_v, dp


def _call_forward(hidden, weight, labels, token_block, vocab_block, interpret, pad_pow2):
    n, v = hidden.shape[0], weight.shape[1]
    h, w, y, n_t, n_v, dp = _layout(hidden, weight, labels, token_block, vocab_block, pad_pow2)
    t, bv = token_block, vocab_block
    row = pl.BlockSpec((t,), lambda i: (i,))
    ce, lse = pl.pallas_call(
        functools.partial(_forward_kernel, bv=bv, n_v=n_v, v=v),
        out_shape=(jax.ShapeDtypeStruct((n_t * t,), jnp.float32),) * 2,
        grid=(n_t,),
        in_specs=[pl.BlockSpec((t, dp), lambda i: (i, 0)), pl.BlockSpec(w.shape, lambda i: (0, 0)), row],
        out_specs=(row, row),
        interpret=interpret,
        name="fused_ce_forward",
    )(h, w, y)
    return ce[:n], lse[:n]


def _call_backward(hidden, weight, labels, lse, g_ce, g_lse, token_block, vocab_block, interpret, pad_pow2):
    n, d = hidden.shape
    v = weight.shape[1]
    h, w, y, n_t, n_v, dp = _layout(hidden, weight, labels, token_block, vocab_block, pad_pow2)
    t, bv = token_block, vocab_block
    lse, g_ce, g_lse = (_pad(x.astype(jnp.float32), 0, n_t * t) for x in (lse, g_ce, g_lse))  # padded rows: zero grad
    row = pl.BlockSpec((t,), lambda i: (i,))
    dh = pl.pallas_call(
        functools.partial(_dhidden_kernel, bv=bv, n_v=n_v, v=v),
        out_shape=jax.ShapeDtypeStruct(h.shape, hidden.dtype),
        grid=(n_t,),
        in_specs=[pl.BlockSpec((t, dp), lambda i: (i, 0)), pl.BlockSpec(w.shape, lambda i: (0, 0)), row, row, row, row],
        out_specs=pl.BlockSpec((t, dp), lambda i: (i, 0)),
        interpret=interpret,
        name="fused_ce_dhidden",
    )(h, w, y, lse, g_ce, g_lse)
    whole = pl.BlockSpec((n_t * t,), lambda j: (0,))
    dw = pl.pallas_call(
        functools.partial(_dweight_kernel, t=t, n_t=n_t, bv=bv, v=v),
        out_shape=jax.ShapeDtypeStruct(w.shape, weight.dtype),
        grid=(n_v,),
        in_specs=[pl.BlockSpec(h.shape, lambda j: (0, 0)), pl.BlockSpec((dp, bv), lambda j: (0, j)), whole, whole, whole, whole],
        out_specs=pl.BlockSpec((dp, bv), lambda j: (0, j)),
        interpret=interpret,
        name="fused_ce_dweight",
    )(h, w, y, lse, g_ce, g_lse)
    return dh[:n, :d], dw[:d, :v]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _pallas_ce(hidden, weight, labels, token_block, vocab_block, interpret, pad_pow2):
    return _call_forward(hidden, weight, labels, token_block, vocab_block, interpret, pad_pow2)


def _pallas_ce_fwd(hidden, weight, labels, token_block, vocab_block, interpret, pad_pow2):
    ce, lse = _call_forward(hidden, weight, labels, token_block, vocab_block, interpret, pad_pow2)
    return (ce, lse), (hidden, weight, labels, lse)


def _pallas_ce_bwd(token_block, vocab_block, interpret, pad_pow2, residuals, cotangents):
    hidden, weight, labels, lse = residuals
    g_ce, g_lse = cotangents
    dh, dw = _call_backward(hidden, weight, labels, lse, g_ce, g_lse, token_block, vocab_block, interpret, pad_pow2)
    return dh, dw, None


_pallas_ce.defvjp(_pallas_ce_fwd, _pallas_ce_bwd)


def pallas_linear_cross_entropy(
    hidden: Float[Array, "N D"],
    weight: Float[Array, "D V"],
    labels: Int[Array, "N"],
    *,
    token_block: int = 64,
    vocab_block: int = 128,
    interpret: bool = False,
    pad_pow2: bool | None = None,
) -> tuple[Float[Array, "N"], Float[Array, "N"]]:
    """(ce, lse) via Pallas kernels. ``interpret=True`` runs anywhere (slowly); otherwise needs a GPU.

    Triton wants power-of-two tiles: ``token_block`` and ``vocab_block`` must be
    powers of two there, and D is zero-padded to one (``pad_pow2`` defaults to
    ``not interpret``).
    """
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[0] or labels.shape != hidden.shape[:1]:
        raise ValueError(f"expected hidden [N, D], weight [D, V], labels [N]; got {hidden.shape}, {weight.shape}, {labels.shape}.")
    pad_pow2 = (not interpret) if pad_pow2 is None else pad_pow2
    if pad_pow2 and any(b & (b - 1) for b in (token_block, vocab_block)):
        raise ValueError(f"Triton tiles must be powers of two; got token_block={token_block}, vocab_block={vocab_block}. Use e.g. 64 and 128.")
    return _pallas_ce(hidden, weight, labels.astype(jnp.int32), int(token_block), int(vocab_block), bool(interpret), bool(pad_pow2))
