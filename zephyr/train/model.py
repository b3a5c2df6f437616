"""A Llama-style decoder in Equinox, readable in one sitting.

RMSNorm (computed in f32), rotary position embeddings, grouped-query attention
(causal + document masking) through ``jax.nn.dot_product_attention`` or a Pallas flash kernel, SwiGLU,
optional QK-norm, tied or untied embeddings. The blocks are stacked along a
leading layer axis and run with ``lax.scan`` so compile time does not grow with
depth; each block is rematerialised according to ``ModelConfig.remat``.

Shapes: B batch, S sequence, D hidden, N query heads, K kv heads, H head dim,
I intermediate, V vocab, L layers.

The model returns final-normed hidden states; the loss (``loss.py``) applies the
output projection itself so it never has to materialise [tokens x vocab] logits.
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu.attention import BlockSizes, mha
from jaxtyping import Array, Float, Int

from zephyr.train.config import MatmulPrecision, ModelConfig

__all__ = [
    "RMSNorm",
    "Attention",
    "MLP",
    "Block",
    "Transformer",
    "linear",
    "causal_attention",
    "segment_ids_from_eos",
    "rope_tables",
    "apply_rope",
]


def _normal(key: jax.Array, shape: tuple[int, ...], std: float) -> Array:
    return std * jax.random.normal(key, shape, dtype=jnp.float32)


SUM_BLOCK = 32
"""Contraction block of ``linear(..., "highest")`` in f32, chosen on SmolLM2-135M's f32 logits over 49
real articles: largest distance from a float64 run 8.2e-5 with 32-wide blocks, 1.1e-4 with 16,
1.4e-4 with 64, 2.3e-4 unblocked (transformers' own f32 logits: 1.8e-4)."""


def linear(x: Float[Array, "... K"], w: Float[Array, "K O"], precision: MatmulPrecision) -> Float[Array, "... O"]:
    """``x @ w``, the projection every layer uses.

    ``"default"`` is XLA's fastest dot: on a GPU an f32 dot may run as TF32, and on CPU an f32
    dot's rounding error grows with K (at SmolLM2's K=1536 it is twice that of PyTorch's MKL GEMM).
    ``"highest"`` is for checking the model against another implementation: full-precision
    products, and in f32 the contraction split into ``SUM_BLOCK``-wide dots whose partial sums
    are added pairwise, so no sum runs longer than 32 terms plus log2(K/32) additions. It costs
    K/32 smaller dots, so training keeps ``"default"``.
    """
    if precision == "default":
        return x @ w
    k = x.shape[-1]
    if x.dtype != jnp.float32 or k <= SUM_BLOCK:
        return jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST)
    parts = [
        jnp.matmul(x[..., i : i + SUM_BLOCK], w[i : i + SUM_BLOCK], precision=jax.lax.Precision.HIGHEST)
        for i in range(0, k, SUM_BLOCK)
    ]
    while len(parts) > 1:  # pairwise: each partial sum takes part in log2(K/32) additions
        parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


class RMSNorm(eqx.Module):
    """Root-mean-square normalisation with a learned scale (no bias, no mean subtraction), computed in at least
    float32."""

    weight: Float[Array, "D"]
    eps: float = eqx.field(static=True)

    @staticmethod
    def init(dim: int, eps: float) -> "RMSNorm":
        return RMSNorm(jnp.ones((dim,), jnp.float32), eps)

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        # Statistics in f32 whatever the compute dtype: bf16 variance loses the small components.
        acc = jnp.promote_types(x.dtype, jnp.float32)
        x32 = x.astype(acc)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (self.weight.astype(acc) * y).astype(x.dtype)


def rope_tables(
    seq_len: int, head_dim: int, theta: float, dtype: jnp.dtype = jnp.float32
) -> tuple[Float[Array, "S H"], Float[Array, "S H"]]:
    """cos/sin tables in the 'rotate half' layout Hugging Face Llama uses."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=dtype) / head_dim))  # H/2
    angles = jnp.arange(seq_len, dtype=dtype)[:, None] * inv_freq[None, :]  # S H/2
    angles = jnp.concatenate([angles, angles], axis=-1)  # S H
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(
    x: Float[Array, "B S N H"], cos: Float[Array, "S H"], sin: Float[Array, "S H"]
) -> Float[Array, "B S N H"]:
    """Rotary position embedding: rotate each head's halves by the positions' angles (cos, sin per position)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)  # B S N H
    acc = jnp.promote_types(x.dtype, jnp.float32)
    cos, sin = cos[None, :, None, :].astype(acc), sin[None, :, None, :].astype(acc)  # 1 S 1 H
    return (x.astype(acc) * cos + rotated.astype(acc) * sin).astype(x.dtype)


def segment_ids_from_eos(tokens: Int[Array, "B S"], eos_id: int) -> Int[Array, "B S"]:
    """Document index of each token: an EOS belongs to the document it ends.

    ``[a b EOS c d]`` -> ``[0 0 0 1 1]``; attention is then allowed only within a segment.
    """
    is_eos = (tokens == eos_id).astype(jnp.int32)
    return jnp.cumsum(is_eos, axis=-1) - is_eos


class Attention(eqx.Module):
    """Grouped-query self-attention with rotary positions and optional QK-norm; causal."""

    wq: Float[Array, "D NH"]
    wk: Float[Array, "D KH"]
    wv: Float[Array, "D KH"]
    wo: Float[Array, "NH D"]
    q_norm: RMSNorm | None
    k_norm: RMSNorm | None
    cfg: ModelConfig = eqx.field(static=True)

    @staticmethod
    def init(cfg: ModelConfig, *, key: jax.Array) -> "Attention":
        d, h = cfg.hidden_dim, cfg.resolved_head_dim
        kq, kk, kv, ko = jax.random.split(key, 4)
        out_std = cfg.init_std / (2 * cfg.num_layers) ** 0.5  # residual-branch scaling (GPT-2)
        return Attention(
            wq=_normal(kq, (d, cfg.num_heads * h), cfg.init_std),
            wk=_normal(kk, (d, cfg.num_kv_heads * h), cfg.init_std),
            wv=_normal(kv, (d, cfg.num_kv_heads * h), cfg.init_std),
            wo=_normal(ko, (cfg.num_heads * h, d), out_std),
            q_norm=RMSNorm.init(h, cfg.norm_eps) if cfg.qk_norm else None,
            k_norm=RMSNorm.init(h, cfg.norm_eps) if cfg.qk_norm else None,
            cfg=cfg,
        )

    def __call__(
        self, x: Float[Array, "B S D"], cos: Array, sin: Array, segment_ids: Array | None
    ) -> Float[Array, "B S D"]:
        cfg = self.cfg
        b, s, _ = x.shape
        h = cfg.resolved_head_dim
        q = linear(x, self.wq, cfg.matmul_precision).reshape(b, s, cfg.num_heads, h)  # B S N H
        k = linear(x, self.wk, cfg.matmul_precision).reshape(b, s, cfg.num_kv_heads, h)  # B S K H
        v = linear(x, self.wv, cfg.matmul_precision).reshape(b, s, cfg.num_kv_heads, h)  # B S K H
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = causal_attention(q, k, v, segment_ids, cfg.attention_impl)  # B S N H
        return linear(out.reshape(b, s, cfg.num_heads * h), self.wo, cfg.matmul_precision)  # B S D


PALLAS_ATTENTION_BLOCKS = BlockSizes(
    block_q=64, block_k=64, block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64
)
"""Tiles of the Pallas flash-attention kernel (forward, d key/value, d query): on an H100 at head
dim 64 these trained SmolLM2-135M's shape 21% faster than JAX's defaults (benchmarks/train_gpu.py)."""


def causal_attention(
    q: Float[Array, "B S N H"],
    k: Float[Array, "B S K H"],
    v: Float[Array, "B S K H"],
    segment_ids: Int[Array, "B S"] | None,
    impl: Literal["xla", "cudnn", "pallas"] | None,
) -> Float[Array, "B S N H"]:
    """Causal attention within documents.

    ``xla`` and ``cudnn`` go through ``jax.nn.dot_product_attention`` with a dense
    [B, 1, S, S] document mask (cuDNN's packed-segment mode, reached through JAX's
    internal cuDNN module, was measured slower on an H100: 8.6 ms per layer against
    6.7 at SmolLM2-135M's shape, and more memory; so was building cuDNN's additive bias once
    for all layers: 661 ms a training step against 595, its gradient then summed across
    layers); ``pallas`` is JAX's Triton flash-attention kernel,
    which reads the [B, S] segment ids directly and never builds the mask (kv heads
    are repeated for it, as it has no grouped-query layout). On CPU the Pallas kernel
    runs in interpret mode, which is how the tests compare it with XLA. ``None``
    picks cuDNN's flash attention on a GPU for bf16/f16 (the dtypes it supports; 4x
    XLA's speed on an H100) and XLA otherwise.
    """
    if impl is None:
        impl = "cudnn" if jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16) else "xla"
    if impl == "pallas":
        groups = q.shape[2] // k.shape[2]
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)  # B S N H
        return mha(
            q,
            k,
            v,
            segment_ids,
            sm_scale=q.shape[-1] ** -0.5,
            causal=True,
            block_sizes=PALLAS_ATTENTION_BLOCKS,
            interpret=jax.default_backend() != "gpu",
        )
    mask = None if segment_ids is None else (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])  # B 1 S S
    return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True, implementation=impl)


class MLP(eqx.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    w_gate: Float[Array, "D I"]
    w_up: Float[Array, "D I"]
    w_down: Float[Array, "I D"]
    precision: MatmulPrecision = eqx.field(static=True)

    @staticmethod
    def init(cfg: ModelConfig, *, key: jax.Array) -> "MLP":
        kg, ku, kd = jax.random.split(key, 3)
        d, i = cfg.hidden_dim, cfg.intermediate_dim
        out_std = cfg.init_std / (2 * cfg.num_layers) ** 0.5
        return MLP(
            _normal(kg, (d, i), cfg.init_std),
            _normal(ku, (d, i), cfg.init_std),
            _normal(kd, (i, d), out_std),
            cfg.matmul_precision,
        )

    def __call__(self, x: Float[Array, "B S D"]) -> Float[Array, "B S D"]:
        gate, up = linear(x, self.w_gate, self.precision), linear(x, self.w_up, self.precision)  # B S I
        return linear(jax.nn.silu(gate) * up, self.w_down, self.precision)  # B S D


class Block(eqx.Module):
    """One decoder layer: pre-norm attention and pre-norm MLP, each with a residual connection."""

    attn_norm: RMSNorm
    attn: Attention
    mlp_norm: RMSNorm
    mlp: MLP

    @staticmethod
    def init(cfg: ModelConfig, *, key: jax.Array) -> "Block":
        ka, km = jax.random.split(key)
        return Block(
            RMSNorm.init(cfg.hidden_dim, cfg.norm_eps),
            Attention.init(cfg, key=ka),
            RMSNorm.init(cfg.hidden_dim, cfg.norm_eps),
            MLP.init(cfg, key=km),
        )

    def __call__(
        self, x: Float[Array, "B S D"], cos: Array, sin: Array, segment_ids: Array | None
    ) -> Float[Array, "B S D"]:
        x = x + self.attn(self.attn_norm(x), cos, sin, segment_ids)
        return x + self.mlp(self.mlp_norm(x))


_REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Transformer(eqx.Module):
    """The Llama-style decoder: embeddings, the layers stacked on a leading axis (scanned), a final norm and the LM
    head (or tied embeddings)."""

    embed: Float[Array, "V D"]
    blocks: Block  # every array has a leading L axis
    final_norm: RMSNorm
    lm_head: Float[Array, "D V"] | None  # None when embeddings are tied
    cfg: ModelConfig = eqx.field(static=True)

    @staticmethod
    def init(cfg: ModelConfig, *, key: jax.Array) -> "Transformer":
        k_embed, k_blocks, k_head = jax.random.split(key, 3)
        blocks = jax.vmap(lambda k: Block.init(cfg, key=k))(
            jax.random.split(k_blocks, cfg.num_layers)
        )  # stacked: L ...
        return Transformer(
            embed=_normal(k_embed, (cfg.vocab_size, cfg.hidden_dim), cfg.init_std),
            blocks=blocks,
            final_norm=RMSNorm.init(cfg.hidden_dim, cfg.norm_eps),
            lm_head=None if cfg.tie_embeddings else _normal(k_head, (cfg.hidden_dim, cfg.vocab_size), cfg.init_std),
            cfg=cfg,
        )

    def __call__(
        self, tokens: Int[Array, "B S"], segment_ids: Int[Array, "B S"] | None = None
    ) -> Float[Array, "B S D"]:
        """Final-normed hidden states. ``segment_ids`` (e.g. from EOS) stop attention across documents."""
        cfg = self.cfg
        _, s = tokens.shape
        if s > cfg.max_seq_len:
            raise ValueError(
                f"sequence length {s} exceeds model.max_seq_len {cfg.max_seq_len}; raise max_seq_len in the model "
                "config."
            )
        x = jnp.take(self.embed, tokens, axis=0)  # B S D
        cos, sin = rope_tables(s, cfg.resolved_head_dim, cfg.rope_theta)  # S H (f32 angles, as in transformers)

        def layer(x: Array, block: Block) -> tuple[Array, None]:
            return block(x, cos, sin, segment_ids), None

        if cfg.remat != "none":
            layer = jax.checkpoint(layer, policy=_REMAT_POLICIES[cfg.remat])
        x, _ = jax.lax.scan(layer, x, self.blocks)  # B S D
        return self.final_norm(x)

    def output_weight(self) -> Float[Array, "D V"]:
        return self.embed.T if self.lm_head is None else self.lm_head

    def logits(self, tokens: Int[Array, "B S"], segment_ids: Int[Array, "B S"] | None = None) -> Float[Array, "B S V"]:
        """Full logits, for inference and checks against other implementations (not for training)."""
        hidden = self(tokens, segment_ids)
        acc = jnp.promote_types(hidden.dtype, jnp.float32)
        if self.cfg.matmul_precision == "highest":
            return linear(hidden.astype(acc), self.output_weight().astype(acc), "highest")
        return jnp.einsum("bsd,dv->bsv", hidden, self.output_weight().astype(hidden.dtype), preferred_element_type=acc)
