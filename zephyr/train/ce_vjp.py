"""What every hand-written linear cross-entropy shares (fused JAX in `loss.py`, Pallas in `pallas_loss.py`):
the shape contract, and the custom VJP wiring. The forward saves only (hidden, weight, labels, lse), never the
[N x V] logits, and the backward recomputes them block by block from that saved log-sum-exp. Kept in one
place so that the residuals and the gradient contract (no gradient for the labels) cannot drift between
implementations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["linear_ce_with_vjp", "check_linear_ce_shapes"]


def check_linear_ce_shapes(function: str, hidden: Any, weight: Any, labels: Any) -> None:
    """Raise ValueError unless hidden is [N, D], weight [D, V] and labels [N]: the contract of every
    implementation, named `function` in the message."""
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[0] or labels.shape != hidden.shape[:1]:
        raise ValueError(
            f"{function} expects hidden [N, D], weight [D, V], labels [N]; got hidden {hidden.shape}, "
            f"weight {weight.shape}, labels {labels.shape}. Flatten batch and sequence first: hidden.reshape(-1, D)."
        )


def linear_ce_with_vjp(forward: Callable[..., Any], backward: Callable[..., Any]) -> Callable[..., Any]:
    """`f(hidden, weight, labels, a, b) -> (ce, lse)` differentiable through `backward`.

    `forward(hidden, weight, labels, a, b)` returns (ce, lse); `backward(hidden, weight, labels, lse, g_ce,
    g_lse, a, b)` returns (d hidden, d weight). `a` and `b` are static (hashable: block sizes, flags).
    """

    @functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
    def linear_ce(hidden, weight, labels, a, b):
        return forward(hidden, weight, labels, a, b)

    def linear_ce_fwd(hidden, weight, labels, a, b):
        ce, lse = forward(hidden, weight, labels, a, b)
        return (ce, lse), (hidden, weight, labels, lse)

    def linear_ce_bwd(a, b, residuals, cotangents):
        hidden, weight, labels, lse = residuals
        g_ce, g_lse = cotangents
        dh, dw = backward(hidden, weight, labels, lse, g_ce, g_lse, a, b)
        return dh, dw, None

    linear_ce.defvjp(linear_ce_fwd, linear_ce_bwd)
    return linear_ce
