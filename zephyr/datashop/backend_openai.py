"""Labeling through any OpenAI-compatible server (`vllm serve`, SGLang, llama.cpp, a hosted API).

Uses the legacy completions endpoint (`POST {url}/completions`), the one that takes raw prompt
text and returns `logprobs.top_logprobs` for the first generated token: one request per batch,
prompts sent as a list. Label probabilities are read from the top log-probabilities by token text
(a token counts for a label when its text, stripped of spaces, equals the label), so only labels
within the server's top `top_logprobs` tokens get mass. Only the standard library is used.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from zephyr.datashop.config import LabelerConfig
from zephyr.datashop.prompts import ApproxCodec, HFCodec, TextCodec

__all__ = ["OpenAIBackend", "completions_url", "post_json"]


def completions_url(url: str) -> str:
    """`http://host:port`, `.../v1` or `.../v1/completions` -> the completions endpoint."""
    url = url.rstrip("/")
    if url.endswith("/completions"):
        return url
    if not url.endswith("/v1"):
        url += "/v1"
    return url + "/completions"


def post_json(url: str, body: dict[str, Any], *, timeout_s: float, api_key: str | None = None, retries: int = 3) -> Any:
    """POST JSON and decode the JSON answer, retrying connection errors and 5xx/429 with backoff."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    last: Exception | None = None
    for attempt in range(retries + 1):
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            if exc.code not in (429, 500, 502, 503, 504) or attempt == retries:
                raise RuntimeError(f"OpenAI-compatible server at {url} answered HTTP {exc.code}: {detail}") from exc
            last = exc
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            if attempt == retries:
                raise ConnectionError(
                    f"Could not reach the OpenAI-compatible server at {url} after {retries + 1} attempts: {exc}. "
                    "Check labeler.url and that the server is running (e.g. `vllm serve MODEL --port 8000`)."
                ) from exc
            last = exc
        time.sleep(min(8.0, 0.5 * 2**attempt))
    raise RuntimeError(f"unreachable: {last}")


class OpenAIBackend:
    """Client of an OpenAI-compatible completions endpoint."""

    def __init__(self, config: LabelerConfig) -> None:
        assert config.url is not None
        self.config = config
        self.url = completions_url(config.url)
        self.model_id = f"openai:{config.model}"
        self.api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if config.api_key_env and not self.api_key:
            raise ValueError(f"labeler.api_key_env names ${config.api_key_env}, which is not set in the environment")
        self.codec: TextCodec = ApproxCodec()
        if config.tokenizer:
            from transformers import AutoTokenizer

            from zephyr.datashop.models import resolve_causal_lm

            self.codec = HFCodec(AutoTokenizer.from_pretrained(str(resolve_causal_lm(config.tokenizer))))
        self.context_tokens = config.max_context_tokens

    def close(self) -> None:
        pass

    def _complete(self, prompts: Sequence[str], max_tokens: int, logprobs: int | None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "prompt": list(prompts),
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        if logprobs is not None:
            body["logprobs"] = logprobs
        answer = post_json(self.url, body, timeout_s=self.config.timeout_s, api_key=self.api_key)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise RuntimeError(
                f"Expected {len(prompts)} choices from {self.url} (one per prompt), got "
                f"{len(choices) if isinstance(choices, list) else type(choices).__name__}: {str(answer)[:300]}"
            )
        return sorted(choices, key=lambda c: c.get("index", 0))

    def label_probs(self, prompts: Sequence[str], labels: Sequence[str]) -> list[dict[str, float]]:
        results = []
        for choice in self._complete(prompts, 1, self.config.top_logprobs):
            tops = (choice.get("logprobs") or {}).get("top_logprobs") or [{}]
            first = tops[0] or {}
            probs = {label: 0.0 for label in labels}
            for token, logprob in first.items():
                text = token.strip()
                if text in probs and logprob is not None and math.isfinite(logprob):
                    probs[text] += math.exp(logprob)
            results.append(probs)
        return results

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return [c.get("text", "") for c in self._complete(prompts, max_new_tokens, None)]
