"""Labeling with a local `transformers` causal LM on CPU (default: packaged SmolLM2-135M-Instruct).

Label probabilities come from one forward pass per batch, computing logits for the last position only.

Threads: PyTorch's OpenMP workers spin while waiting, so on cores other jobs also use, 2 threads can
be 10x slower than 1 (measured here: a 2-prompt forward pass took 5.9 s with 2 threads at load 11 on
2 cores, 0.4 s with 1). Unless `LabelerConfig.torch_threads` says otherwise, the backend uses the
cores left idle by the load average when it starts (at least 1), and sets that count only around its
own forward passes, restoring the process-wide setting afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zephyr.datashop.config import LabelerConfig
from zephyr.datashop.models import idle_cores, load_causal_lm, torch_threads
from zephyr.datashop.prompts import HFCodec

__all__ = ["TransformersBackend", "label_token_ids", "GeneratedText"]


def label_token_ids(tokenizer: Any, labels: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Token ids whose probability counts for each label.

    A label counts as itself and with a leading space whenever that spelling is one token ("3",
    " 3"); a label that is never a single token is represented by its first token. Two labels
    sharing a token would make their probabilities indistinguishable, so that is an error.
    """
    ids: dict[str, tuple[int, ...]] = {}
    for label in labels:
        variants = []
        for spelling in (label, " " + label):
            toks = tokenizer.encode(spelling, add_special_tokens=False)
            if len(toks) == 1:
                variants.append(toks[0])
        if not variants:
            toks = tokenizer.encode(label, add_special_tokens=False)
            if not toks:
                raise ValueError(f"Label {label!r} encodes to no tokens; choose non-empty labels")
            variants = [toks[0]]
        ids[label] = tuple(dict.fromkeys(variants))
    seen: dict[int, str] = {}
    for label, toks in ids.items():
        for t in toks:
            if t in seen:
                raise ValueError(
                    f"Labels {seen[t]!r} and {label!r} both start with token {t} ({tokenizer.decode([t])!r}), so "
                    "next-token probabilities cannot tell them apart. Use labels that differ in their first "
                    "token (digits, Yes/No), or mode: generate."
                )
            seen[t] = label
    return ids


@dataclass(frozen=True)
class GeneratedText:
    """A greedy continuation with the per-token top log-probabilities (what an OpenAI server returns)."""

    text: str
    tokens: tuple[str, ...]
    token_logprobs: tuple[float, ...]
    top_logprobs: tuple[dict[str, float], ...]
    stopped: bool  # ended on an end-of-sequence token rather than at max_new_tokens


class TransformersBackend:
    """In-process CPU labeling with a Hugging Face causal LM."""

    def __init__(self, config: LabelerConfig) -> None:
        import torch

        self._torch = torch
        self.threads = config.torch_threads or idle_cores()
        self.model, self.tokenizer = load_causal_lm(config.model)
        self.model_id = f"transformers:{config.model}"
        self.codec = HFCodec(self.tokenizer)
        limit = getattr(self.model.config, "max_position_embeddings", None) or config.max_context_tokens
        self.context_tokens = min(config.max_context_tokens, int(limit))
        self._label_ids: dict[tuple[str, ...], dict[str, tuple[int, ...]]] = {}

    def close(self) -> None:
        # The model stays in the per-process cache (models.load_causal_lm) for the next stage or run.
        pass

    def _encode(self, prompts: Sequence[str], side: str) -> dict[str, Any]:
        self.tokenizer.padding_side = side
        return self.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)

    def next_token_logprobs(self, prompts: Sequence[str]) -> Any:
        """[B, V] log-probabilities of the token following each prompt."""
        torch = self._torch
        enc = self._encode(prompts, "left")
        mask = enc["attention_mask"]
        # Left padding puts every prompt's last token in the last column, so only that column's logits
        # are computed (the LM head over a 49k vocabulary is ~20% of SmolLM2's FLOPs per position).
        # Positions count real tokens only, so a padded row sees exactly what an unpadded run sees.
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # [B, S]
        with torch.inference_mode(), torch_threads(self.threads):
            logits = self.model(
                input_ids=enc["input_ids"], attention_mask=mask, position_ids=positions, logits_to_keep=1
            ).logits  # [B, 1, V]
        return torch.log_softmax(logits[:, -1].float(), dim=-1)  # [B, V]

    def label_probs(self, prompts: Sequence[str], labels: Sequence[str]) -> list[dict[str, float]]:
        key = tuple(labels)
        if key not in self._label_ids:
            self._label_ids[key] = label_token_ids(self.tokenizer, labels)
        ids = self._label_ids[key]
        probs = self.next_token_logprobs(prompts).exp()
        return [{label: float(sum(row[t] for t in toks)) for label, toks in ids.items()} for row in probs]

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return [g.text for g in self.generate_with_logprobs(prompts, max_new_tokens, top_k=0)]

    def generate_with_logprobs(self, prompts: Sequence[str], max_new_tokens: int, top_k: int) -> list[GeneratedText]:
        """Greedy generation; with top_k > 0 also the top-k log-probabilities at every generated token."""
        torch = self._torch
        enc = self._encode(prompts, "left")
        width = enc["input_ids"].shape[1]
        with torch.inference_mode(), torch_threads(self.threads):
            out = self.model.generate(
                input_ids=enc["input_ids"],
                attention_mask=enc["attention_mask"],
                max_new_tokens=max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
                output_scores=top_k > 0,
                return_dict_in_generate=True,
            )
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        results = []
        for row in range(len(prompts)):
            new_ids = out.sequences[row, width:].tolist()
            n, stopped = len(new_ids), False
            for j, t in enumerate(new_ids):
                if t in eos:
                    n, stopped = j, True
                    break
            keep = new_ids[:n]
            tokens, token_lps, tops = [], [], []
            if top_k > 0:
                for j, t in enumerate(keep):
                    lp = torch.log_softmax(out.scores[j][row].float(), dim=-1)
                    values, indices = lp.topk(top_k)
                    tokens.append(self.tokenizer.decode([t]))
                    token_lps.append(float(lp[t]))
                    top: dict[str, float] = {}
                    for v, i in zip(values.tolist(), indices.tolist(), strict=False):
                        s = self.tokenizer.decode([i])
                        top[s] = max(top.get(s, float("-inf")), v)  # distinct ids can decode alike
                    tops.append(top)
            results.append(
                GeneratedText(
                    self.tokenizer.decode(keep, skip_special_tokens=True),
                    tuple(tokens),
                    tuple(token_lps),
                    tuple(tops),
                    stopped,
                )
            )
        return results
