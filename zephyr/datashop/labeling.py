"""LM labeling behind one interface: prompts in, scores out, cached so an interrupted run resumes.

Every backend (llama.cpp or `transformers` in process, an OpenAI-compatible server, in-process vLLM) implements
`LabelBackend`: next-token probabilities of the label strings, and greedy generation. The scoring is
shared: in `logprobs` mode the score is the expected label value under the next-token distribution
renormalised over the labels (small models rarely answer with a clean digit, but their distribution
over digits still ranks documents); in `generate` mode the prompt's `parse_regex` reads the score
from the generated text.

Each labeled document is appended to a JSON-lines cache keyed by a hash of (prompt, model, labeling
settings, document id, text), flushed after every batch, so a rerun skips what is already there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.prompts import RenderedPrompt, TextCodec, render_prompt

__all__ = [
    "LabelBackend",
    "LabelResult",
    "LabelingRun",
    "LabelCache",
    "make_backend",
    "label_key",
    "score_from_probs",
    "score_from_text",
    "label_documents",
]

log = logging.getLogger(__name__)


class LabelBackend(Protocol):
    """What a labeling backend provides. `model_id` identifies it in cache keys."""

    model_id: str
    codec: TextCodec
    context_tokens: int

    def label_probs(self, prompts: Sequence[str], labels: Sequence[str]) -> list[dict[str, float]]:
        """Probability (not renormalised) that the next token is each label, per prompt."""
        ...

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuation of each prompt."""
        ...

    def close(self) -> None: ...


def make_backend(config: LabelerConfig) -> LabelBackend:
    """Build the backend `config.backend` names (imports its heavy dependencies only then)."""
    if config.backend == "llamacpp":
        from zephyr.datashop.backend_llamacpp import LlamaCppBackend

        return LlamaCppBackend(config)
    if config.backend == "transformers":
        from zephyr.datashop.backend_transformers import TransformersBackend

        return TransformersBackend(config)
    if config.backend == "openai":
        from zephyr.datashop.backend_openai import OpenAIBackend

        return OpenAIBackend(config)
    if config.backend == "vllm":
        from zephyr.datashop.backend_vllm import VLLMBackend

        return VLLMBackend(config)
    raise ValueError(f"Unknown labeler backend {config.backend!r}; expected llamacpp, transformers, openai or vllm")


@dataclass(frozen=True)
class LabelResult:
    """One document's label. `score` is None when labeling failed; `error` then says why."""

    id: str
    key: str
    score: float | None
    label: str | None
    label_mass: float | None = None
    probs: dict[str, float] | None = None
    generated: str | None = None
    error: str | None = None
    truncated: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> LabelResult:
        return LabelResult(**{k: data.get(k) for k in LabelResult.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class LabelingRun:
    """The labels of a pool (input order) and how they were obtained."""

    results: tuple[LabelResult, ...]
    labeled_now: int
    from_cache: int
    failed: int
    truncated: int
    seconds: float
    model_id: str
    cache_path: str | None

    @property
    def docs_per_s(self) -> float:
        return self.labeled_now / self.seconds if self.seconds > 0 else 0.0

    def scores(self) -> dict[str, float]:
        return {r.id: r.score for r in self.results if r.score is not None}


def score_from_probs(
    probs: dict[str, float], prompt: PromptConfig
) -> tuple[float | None, str | None, float, dict[str, float], str | None]:
    """(score, argmax label, label mass, renormalised probs, error) from next-token label probabilities."""
    assert prompt.values is not None
    mass = float(sum(max(0.0, probs.get(label, 0.0)) for label in prompt.labels))
    if mass <= 0.0 or not math.isfinite(mass):
        return None, None, 0.0, {}, "no_label_in_top_logprobs"
    norm = {label: max(0.0, probs.get(label, 0.0)) / mass for label in prompt.labels}
    score = sum(norm[label] * value for label, value in zip(prompt.labels, prompt.values, strict=False))
    best = max(prompt.labels, key=lambda label: norm[label])
    return score, best, mass, norm, None


def score_from_text(text: str, prompt: PromptConfig) -> tuple[float | None, str | None, str | None]:
    """(score, label, error) read from generated text with the prompt's `parse_regex`."""
    assert prompt.values is not None
    match = re.search(prompt.parse_regex, text)
    if match is None:
        return None, None, "no_score_in_generated_text"
    found = match.group(1).strip()
    if found in prompt.labels:
        return prompt.values[prompt.labels.index(found)], found, None
    try:
        value = float(found)
    except ValueError:
        return None, None, "parsed_answer_not_a_label"
    lo, hi = prompt.score_range
    if not lo <= value <= hi:
        return None, None, "parsed_score_out_of_range"
    nearest = min(range(len(prompt.values)), key=lambda i: abs(prompt.values[i] - value))
    return value, prompt.labels[nearest], None


def label_key(prompt: PromptConfig, config: LabelerConfig, model_id: str, doc_id: str, text: str) -> str:
    """Cache key: everything that changes a document's label, hashed."""
    settings = [
        prompt.template,
        prompt.system,
        prompt.answer_prefix,
        prompt.use_chat_template,
        list(prompt.labels),
        list(prompt.values or ()),
        model_id,
        config.mode,
        config.max_context_tokens,
        config.max_example_tokens,
    ]
    if config.mode == "generate":
        settings += [prompt.parse_regex, config.max_new_tokens]
    text_hash = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    payload = json.dumps([settings, str(doc_id), text_hash], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class LabelCache:
    """Append-only JSON-lines label cache. Lines that do not parse (a crash mid-write) are skipped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.skipped_lines = 0

    def load(self) -> dict[str, LabelResult]:
        entries: dict[str, LabelResult] = {}
        if not self.path.exists():
            return entries
        with self.path.open("r", encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    result = LabelResult.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError):
                    self.skipped_lines += 1
                    continue
                entries[result.key] = result
        if self.skipped_lines:
            log.warning(
                "label cache %s: skipped %d unreadable line(s) (interrupted write?)", self.path, self.skipped_lines
            )
        return entries

    def append(self, results: Iterable[LabelResult]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+b") as f:
            # After a crash mid-line, start on a fresh line so the next record stays readable.
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write("".join(r.to_json() + "\n" for r in results).encode("utf-8", "surrogatepass"))
            f.flush()
            os.fsync(f.fileno())


def label_documents(
    docs: Iterable[dict[str, Any]],
    prompt: PromptConfig,
    config: LabelerConfig,
    *,
    cache_path: str | Path | None = None,
    backend: LabelBackend | None = None,
    text_field: str = "text",
    id_field: str = "id",
    on_batch: Callable[[int, int], None] | None = None,
    progress: str | None = None,
) -> LabelingRun:
    """Label every document (or reuse its cached label) and return results in input order.

    `backend` lets callers share one loaded model across calls; by default one is built from
    `config` (and closed afterwards). Documents are rendered, sorted by prompt length (less
    padding), labeled `config.batch_size` at a time, and each batch is appended to the cache before
    the next starts. `on_batch(done, total)` reports progress; `progress` names a progress row (a bar with
    rate and ETA on a terminal, a line every 10 s otherwise: `zephyr.progress.task_progress`).
    """
    docs = list(docs)
    for i, doc in enumerate(docs):
        if id_field not in doc or not isinstance(doc.get(text_field), str):
            raise ValueError(
                f"Document #{i} needs an {id_field!r} and a string {text_field!r} field to be labeled; "
                f"it has fields {sorted(doc)} (id={doc.get(id_field)!r}). Set id_field/text_field in the config."
            )
    own_backend = backend is None
    backend = backend or make_backend(config)
    start = time.perf_counter()
    try:
        cache = LabelCache(cache_path) if cache_path is not None else None
        cached = cache.load() if cache is not None else {}
        keys = [label_key(prompt, config, backend.model_id, str(d[id_field]), d[text_field]) for d in docs]
        by_key: dict[str, LabelResult] = {k: cached[k] for k in keys if k in cached}
        pending = [i for i, k in enumerate(keys) if k not in by_key]
        pending = list({keys[i]: i for i in pending}.values())  # duplicate documents are labeled once
        answer_tokens = 1 if config.mode == "logprobs" else config.max_new_tokens
        rendered: dict[int, RenderedPrompt] = {
            i: render_prompt(
                prompt,
                docs[i][text_field],
                backend.codec,
                context_tokens=backend.context_tokens,
                answer_tokens=answer_tokens,
                max_example_tokens=config.max_example_tokens,
            )
            for i in pending
        }
        pending.sort(key=lambda i: len(rendered[i].text))
        tracker = contextlib.ExitStack()
        if progress is not None and pending:
            from zephyr.progress import task_progress

            row = tracker.enter_context(task_progress(progress, total=len(pending), unit="docs"))
            on_batch = _both(on_batch, lambda done, total: row.set(done))
        with tracker:
            _label_pending(
                pending, docs, keys, rendered, prompt, config, backend, cache, by_key, text_field, id_field, on_batch
            )
        seconds = time.perf_counter() - start
    finally:
        if own_backend:
            backend.close()
    results = tuple(by_key[k] for k in keys)
    return LabelingRun(
        results=results,
        labeled_now=len(pending),
        from_cache=len(docs) - len(pending),
        failed=sum(r.score is None for r in results),
        truncated=sum(r.truncated for r in results),
        seconds=seconds,
        model_id=backend.model_id,
        cache_path=str(cache_path) if cache_path is not None else None,
    )


def _both(first: Callable[[int, int], None] | None, second: Callable[[int, int], None]) -> Callable[[int, int], None]:
    def call(done: int, total: int) -> None:
        if first is not None:
            first(done, total)
        second(done, total)

    return call


def _label_pending(
    pending: list[int],
    docs: list[dict[str, Any]],
    keys: list[str],
    rendered: dict[int, RenderedPrompt],
    prompt: PromptConfig,
    config: LabelerConfig,
    backend: LabelBackend,
    cache: LabelCache | None,
    by_key: dict[str, LabelResult],
    text_field: str,
    id_field: str,
    on_batch: Callable[[int, int], None] | None,
) -> int:
    """Label `pending` (indexes into docs) batch by batch, appending each batch to the cache; returns the count."""
    done = 0

    def labeled(i: int, score: Any, label: Any, error: Any, **answer: Any) -> LabelResult:
        """Document i's result: its id, cache key and truncation, and the backend's `answer` (probs or text)."""
        truncated = rendered[i].truncated
        return LabelResult(
            id=str(docs[i][id_field]), key=keys[i], score=score, label=label, error=error, truncated=truncated, **answer
        )

    for b in range(0, len(pending), config.batch_size):
        batch = pending[b : b + config.batch_size]
        texts = [rendered[i].text for i in batch]
        new: list[LabelResult] = []
        if config.mode == "logprobs":
            for i, probs in zip(batch, backend.label_probs(texts, prompt.labels), strict=True):
                score, label, mass, norm, error = score_from_probs(probs, prompt)
                new.append(labeled(i, score, label, error, label_mass=mass, probs=norm or None))
        else:
            for i, text in zip(batch, backend.generate(texts, config.max_new_tokens), strict=True):
                score, label, error = score_from_text(text, prompt)
                new.append(labeled(i, score, label, error, generated=text))
        if cache is not None:
            cache.append(new)
        by_key.update((r.key, r) for r in new)
        done += len(batch)
        if on_batch is not None:
            on_batch(done, len(pending))
    return done
