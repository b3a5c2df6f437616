"""Training configuration: frozen dataclasses checked when built, loadable from YAML.

Every check runs in ``__post_init__`` so a bad config fails before any array is
allocated, with a message that says what was expected, what was received and
how to fix it. ``load_config(path, overrides)`` reads YAML and applies
``key.sub=value`` overrides (the ``zephyr train CONFIG.yaml lr=...`` syntax); the loading itself
is `zephyr.config`'s, shared with Datashop and ablations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zephyr.config import (
    ConfigError,
    apply_overrides,
    from_dict,
    load_yaml,
    require,
    to_dict,
)

__all__ = [
    "ConfigError",
    "ModelConfig",
    "MODEL_SHAPE_FIELDS",
    "LossConfig",
    "OptimizerConfig",
    "DataConfig",
    "TrainConfig",
    "load_config",
    "config_from_dict",
    "config_to_dict",
    "apply_overrides",
]

RematPolicy = Literal["none", "full", "dots"]
LossImpl = Literal["fused", "reference", "pallas"]
DType = Literal["float32", "bfloat16"]
MatmulPrecision = Literal["default", "highest"]

MODEL_SHAPE_FIELDS = (
    "vocab_size",
    "hidden_dim",
    "intermediate_dim",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "max_seq_len",
)
"""The `ModelConfig` fields that size its arrays: positive ints (``head_dim`` may be None), and what a
`zephyr.train.scaling.ScalingRecipe` derives from the width."""


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-style decoder. Defaults are a ~15M-parameter model that trains on a laptop."""

    vocab_size: int = 49152
    hidden_dim: int = 256
    intermediate_dim: int = 768
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    head_dim: int | None = None  # None: hidden_dim // num_heads
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    qk_norm: bool = False
    tie_embeddings: bool = True
    init_std: float = 0.02
    remat: RematPolicy = "dots"
    attention_impl: Literal["xla", "cudnn", "pallas"] | None = (
        None  # None: cuDNN on GPU in bf16, else XLA (model.causal_attention)
    )
    matmul_precision: MatmulPrecision = (
        "default"  # "highest": exact-as-f32-allows projections, for checks against other code (model.linear)
    )

    def __post_init__(self) -> None:
        for name in MODEL_SHAPE_FIELDS:
            value = getattr(self, name)
            if name == "head_dim" and value is None:
                continue  # hidden_dim // num_heads
            require(isinstance(value, int) and value > 0, f"model.{name} must be a positive int, got {value!r}.")
        require(
            self.num_heads % self.num_kv_heads == 0,
            f"model.num_heads ({self.num_heads}) must be a multiple of model.num_kv_heads ({self.num_kv_heads}) "
            f"for grouped-query attention; e.g. set num_kv_heads to one of "
            f"{[k for k in range(1, self.num_heads + 1) if self.num_heads % k == 0]}.",
        )
        if self.head_dim is None:
            require(
                self.hidden_dim % self.num_heads == 0,
                f"model.hidden_dim ({self.hidden_dim}) is not divisible by model.num_heads ({self.num_heads}); "
                f"set head_dim explicitly or pick num_heads dividing hidden_dim.",
            )
        require(self.resolved_head_dim % 2 == 0, f"head_dim must be even for RoPE, got {self.resolved_head_dim}.")
        require(self.rope_theta > 0, f"model.rope_theta must be > 0, got {self.rope_theta}.")
        require(
            self.remat in ("none", "full", "dots"), f"model.remat must be 'none', 'full' or 'dots', got {self.remat!r}."
        )
        require(
            self.attention_impl in (None, "xla", "cudnn", "pallas"),
            f"model.attention_impl must be null, 'xla', 'cudnn' or 'pallas', got {self.attention_impl!r}.",
        )
        require(
            self.matmul_precision in ("default", "highest"),
            f"model.matmul_precision must be 'default' or 'highest', got {self.matmul_precision!r}.",
        )

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_dim // self.num_heads

    def num_params(self, *, include_embeddings: bool = True) -> int:
        """Exact parameter count (matches ``jax.tree`` leaves of the initialised model)."""
        d, h, i = self.hidden_dim, self.resolved_head_dim, self.intermediate_dim
        attn = d * h * (self.num_heads * 2 + self.num_kv_heads * 2) + (2 * h if self.qk_norm else 0)
        block = attn + 3 * d * i + 2 * d
        body = self.num_layers * block + d
        embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return body + (embed if include_embeddings else 0)

    def flops_per_token(self, seq_len: int) -> float:
        """Analytic training FLOPs per token (forward + backward = 3x forward), PaLM appendix B style.

        Counts every matmul including the output projection, plus attention scores
        (``QK^T`` and ``AV``); causal masking is not discounted, as is customary.
        """
        d, h, i, n_q, n_kv = (
            self.hidden_dim,
            self.resolved_head_dim,
            self.intermediate_dim,
            self.num_heads,
            self.num_kv_heads,
        )
        matmul_params = self.num_layers * (d * h * (2 * n_q + 2 * n_kv) + 3 * d * i) + d * self.vocab_size
        attention = self.num_layers * 2 * n_q * h * seq_len  # QK^T and AV, per token
        return 3.0 * 2.0 * (matmul_params + attention)


@dataclass(frozen=True)
class LossConfig:
    """Cross-entropy settings. ``fused`` never materialises [tokens x vocab] logits.

    Its largest temporary is ``token_block x vocab_block`` f32 (32 MiB at the defaults).
    ``pallas`` uses its own Triton-sized tiles and ignores the two block sizes.
    """

    impl: LossImpl = "fused"
    vocab_block: int = 2048
    token_block: int = 4096
    z_loss: float = 0.0

    def __post_init__(self) -> None:
        require(
            self.impl in ("fused", "reference", "pallas"),
            f"loss.impl must be 'fused', 'reference' or 'pallas', got {self.impl!r}.",
        )
        require(
            self.vocab_block > 0 and self.token_block > 0,
            f"loss.vocab_block and loss.token_block must be > 0, got {self.vocab_block}, {self.token_block}.",
        )
        require(self.z_loss >= 0, f"loss.z_loss must be >= 0 (1e-4 is a common value), got {self.z_loss}.")


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with a warmup-stable-decay (``wsd``) or ``cosine`` schedule and global-norm clipping."""

    learning_rate: float = 3e-3
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    warmup_steps: int = 10
    decay_fraction: float = 0.2  # wsd: last fraction of steps decays linearly to min_lr
    schedule: Literal["wsd", "cosine", "constant"] = "wsd"
    max_grad_norm: float | None = 1.0

    def __post_init__(self) -> None:
        require(self.learning_rate > 0, f"optimizer.learning_rate must be > 0, got {self.learning_rate}.")
        require(0.0 <= self.min_lr_ratio <= 1.0, f"optimizer.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}.")
        require(self.warmup_steps >= 0, f"optimizer.warmup_steps must be >= 0, got {self.warmup_steps}.")
        require(
            0.0 <= self.decay_fraction <= 1.0, f"optimizer.decay_fraction must be in [0, 1], got {self.decay_fraction}."
        )
        require(
            self.schedule in ("wsd", "cosine", "constant"),
            f"optimizer.schedule must be 'wsd', 'cosine' or 'constant', got {self.schedule!r}.",
        )
        require(
            self.max_grad_norm is None or self.max_grad_norm > 0,
            f"optimizer.max_grad_norm must be > 0 or null (no clipping), got {self.max_grad_norm}; "
            "0 would zero every update.",
        )


@dataclass(frozen=True)
class DataConfig:
    """Where sequences come from: a weighted mixture of token stores, plus named eval stores.

    ``train`` maps a source name to ``(store path, weight)``; ``eval`` maps an eval
    set name to a store path.
    """

    train: dict[str, tuple[str, float]] = field(default_factory=dict)
    eval: dict[str, str] = field(default_factory=dict)
    seq_len: int = 256
    batch_size: int = 8
    seed: int = 0
    mixture_block: int = 256  # sequences per block of the deterministic mixture
    eos_id: int | None = None  # None: read from the store manifest
    prefetch: int = 2  # steps whose batches are read ahead in a background thread (0: read in the step)
    bucket_reads: Literal["ranges", "copy"] = "ranges"  # bucket stores: byte ranges + chunk cache, or a whole copy

    def __post_init__(self) -> None:
        require(
            self.seq_len > 0 and self.batch_size > 0,
            f"data.seq_len and data.batch_size must be > 0, got {self.seq_len}, {self.batch_size}.",
        )
        require(self.mixture_block > 0, f"data.mixture_block must be > 0, got {self.mixture_block}.")
        require(
            self.prefetch >= 0, f"data.prefetch must be >= 0 (0 reads each batch in its step), got {self.prefetch}."
        )
        require(
            self.bucket_reads in ("ranges", "copy"),
            f"data.bucket_reads must be 'ranges' (fetch what each step needs) or 'copy' (a whole local copy), "
            f"got {self.bucket_reads!r}.",
        )
        for name, entry in self.train.items():
            require(
                isinstance(entry, tuple) and len(entry) == 2 and float(entry[1]) >= 0,
                f"data.train[{name!r}] must be (store path, weight >= 0), got {entry!r}; "
                f"in YAML write `{name}: [path/to/store, 1.0]`.",
            )
        if self.train:
            require(
                sum(float(w) for _, w in self.train.values()) > 0,
                f"data.train weights sum to 0: {self.train!r}; give at least one source a positive weight.",
            )


@dataclass(frozen=True)
class TrainConfig:
    """One training run: model, loss, optimizer, data, and the loop's bookkeeping."""

    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    steps: int = 100
    seed: int = 0
    compute_dtype: DType = "float32"
    param_dtype: DType = "float32"  # "float32" with compute_dtype "bfloat16" = f32 master weights
    output_dir: str = "runs/default"
    checkpoint_every: int | None = None
    keep_checkpoints: int = 2
    resume: bool = True
    eval_every: int | None = None
    eval_batches: int = 4
    eval_batch_size: int | None = None  # None: data.batch_size; fixed, runs of different batch sizes share an eval set
    log_every: int = 1
    data_parallel: int | None = None  # devices in the data mesh axis; None: all local devices
    peak_flops_per_device: float | None = None  # None: from a table of known devices, else measured
    progress: bool = True
    tensorboard: bool = False  # also write TensorBoard events to output_dir/tensorboard
    wandb_project: str | None = None  # also log to this Weights & Biases project (WANDB_MODE etc. apply)

    def __post_init__(self) -> None:
        require(self.steps > 0, f"steps must be > 0, got {self.steps}.")
        require(
            self.compute_dtype in ("float32", "bfloat16"),
            f"compute_dtype must be 'float32' or 'bfloat16', got {self.compute_dtype!r}.",
        )
        require(
            self.param_dtype in ("float32", "bfloat16"),
            f"param_dtype must be 'float32' or 'bfloat16', got {self.param_dtype!r}.",
        )
        for name in ("checkpoint_every", "eval_every"):
            value = getattr(self, name)
            require(value is None or value > 0, f"{name} must be > 0 or null (never), got {value}.")
        require(self.keep_checkpoints >= 1, f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}.")
        require(
            self.eval_batch_size is None or self.eval_batch_size > 0,
            f"eval_batch_size must be > 0 or null (data.batch_size), got {self.eval_batch_size}.",
        )
        require(self.log_every >= 1, f"log_every must be >= 1, got {self.log_every}.")
        require(
            self.data.seq_len <= self.model.max_seq_len,
            f"data.seq_len ({self.data.seq_len}) exceeds model.max_seq_len ({self.model.max_seq_len}); raise "
            "model.max_seq_len or shorten data.seq_len.",
        )
        for name, size in (("data.batch_size", self.data.batch_size), ("eval_batch_size", self.eval_batch_size)):
            require(
                self.data_parallel is None or size is None or size % self.data_parallel == 0,
                f"{name} ({size}) must be divisible by data_parallel ({self.data_parallel}) so each device gets "
                "whole sequences.",
            )


# ----------------------------------------------------------------------------- YAML and overrides


def config_from_dict(data: dict[str, Any], cls: type = TrainConfig, *, where: str = "config") -> Any:
    """Build ``cls`` (a config dataclass, default `TrainConfig`) from nested plain data (`zephyr.config.from_dict`)."""
    return from_dict(cls, data, where)


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (tuples become lists) suitable for YAML/JSON."""
    return to_dict(config)


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Read a YAML training config and apply ``key=value`` overrides."""
    data = load_yaml(path, "training config")
    try:
        data = apply_overrides(data, list(overrides))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return from_dict(TrainConfig, data, str(path))
