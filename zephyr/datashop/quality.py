"""Label quality: are an LM's labels consistent enough to train a classifier on?

A classifier can only learn what the labels say about the documents, so every run measures, on a
sample of its pool, whether the labels say the same thing when asked differently:

- modes: the probability-mode score against the generate-mode answer to the same prompt (Spearman,
  and how often the written answer is the label with the highest probability). A model that
  "means" its probabilities writes the answer it ranks highest.
- paraphrase: the scores under a second wording of the question (`PromptConfig.paraphrase`):
  Spearman, and how often both wordings put a document in the same label after each wording's
  scores are rank-calibrated. Labels that move with the wording measure the wording, not the text.
- spread: the standard deviation of the pool's scores; near-constant scores rank nothing.

When a check falls below its threshold the verdict is "noisy" and `LabelQuality.advice` says what to
do: a larger pool (the classifier averages label noise out), a bigger model through the vLLM or
OpenAI-compatible backend, or a question the model can judge.

`rank_calibrate` is the score calibration used for binning: a small model's expected scores bunch
in a narrow band (SmolLM2-135M: 1.5-2.5 of 0-5), so nearest-label bins put nearly every document in
one class and a classifier learns "always 2". Mapping scores to their pool quantiles on the label
scale keeps the model's ranking (which is what it knows) and spreads the classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.metrics import average_ranks, macro_f1, spearman

__all__ = [
    "LabelQuality",
    "QualityThresholds",
    "measure_label_quality",
    "assess",
    "rank_calibrate",
    "classifier_beats_majority",
]


@dataclass(frozen=True)
class QualityThresholds:
    """Below these, labels are called noisy. Chosen on SmolLM2-135M against real pages (see the run reports):
    a prompt it can judge reaches modes rho ~0.8 and paraphrase rho ~0.7; an unanswerable one < 0.4."""

    min_modes_spearman: float = 0.5
    min_paraphrase_spearman: float = 0.5
    min_generate_parsed: float = 0.5
    min_spread: float = 0.05  # std of scores as a fraction of the label range
    min_f1_gain: float = 0.15  # classifier macro-F1 over the majority class's, on held-out labels


@dataclass(frozen=True)
class LabelQuality:
    """Label-quality metrics for one run; None where a check did not run (and `skipped` says why).

    `measure_label_quality` fills in the figures and `assess` the verdict (`noisy`, `reasons`, `advice`)."""

    n: int
    modes_spearman: float | None = None
    modes_label_agreement: float | None = None
    generate_parsed: float | None = None
    paraphrase_spearman: float | None = None
    paraphrase_label_agreement: float | None = None
    score_spread: float | None = None
    noisy: bool = False
    reasons: tuple[str, ...] = ()
    advice: str | None = None
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        line = (
            f"label quality (n={self.n}): probability vs generate Spearman {f(self.modes_spearman)}, same label "
            f"{f(self.modes_label_agreement)}, generate parsed {f(self.generate_parsed)}; paraphrase Spearman "
            f"{f(self.paraphrase_spearman)}, same label {f(self.paraphrase_label_agreement)}; score spread "
            f"{f(self.score_spread)} -> {'NOISY' if self.noisy else 'ok'}"
        )
        if self.skipped:
            line += " (not measured: " + "; ".join(self.skipped) + ")"
        if self.noisy and self.advice:
            line += "\n  WARNING: " + self.advice
        return line


def rank_calibrate(scores: Sequence[float], values: Sequence[float]) -> np.ndarray:
    """Each score's pool quantile mapped onto [min(values), max(values)] (ties share their mean rank).

    Monotone, so every ranking and threshold-by-fraction is unchanged; only the nearest-label classes
    change, from one crowded class to classes of comparable size.
    """
    s = np.asarray(scores, dtype=np.float64)
    lo, hi = float(min(values)), float(max(values))
    if len(s) == 0:
        return s
    if len(s) == 1 or np.ptp(s) == 0:
        return np.full(len(s), (lo + hi) / 2)
    ranks = average_ranks(s)  # 1..n
    return lo + (hi - lo) * (ranks - 1) / (len(s) - 1)


def classifier_beats_majority(
    true_bins: Sequence[int], pred_bins: Sequence[int], min_gain: float = QualityThresholds.min_f1_gain
) -> dict[str, Any]:
    """Held-out macro-F1 of the classifier vs the majority-class baseline's, and whether the gain is >= `min_gain`."""
    t = np.asarray(true_bins)
    if len(t) == 0:
        return {"macro_f1": None, "majority_macro_f1": None, "gain": None, "beats_majority": False}
    majority = int(np.bincount(t).argmax())
    base = macro_f1(t, np.full(len(t), majority))
    ours = macro_f1(t, np.asarray(pred_bins))
    gain = ours - base
    return {"macro_f1": ours, "majority_macro_f1": base, "gain": gain, "beats_majority": bool(gain >= min_gain)}


def assess(
    measured: LabelQuality, *, model_id: str, pool_size: int, thresholds: QualityThresholds = QualityThresholds()
) -> LabelQuality:
    """The verdict on measured figures: `measured` with the checks that fail and the advice for the run's report."""
    reasons = []
    if measured.generate_parsed is not None and measured.generate_parsed < thresholds.min_generate_parsed:
        reasons.append(f"only {measured.generate_parsed:.0%} of generated answers contain a label")
    if measured.modes_spearman is None and measured.generate_parsed:
        reasons.append("generate-mode answers do not vary")
    if measured.modes_spearman is not None and measured.modes_spearman < thresholds.min_modes_spearman:
        reasons.append(
            f"probability and generate modes disagree (Spearman {measured.modes_spearman:.2f} < "
            f"{thresholds.min_modes_spearman})"
        )
    if measured.paraphrase_spearman is not None and measured.paraphrase_spearman < thresholds.min_paraphrase_spearman:
        reasons.append(
            f"a paraphrased prompt ranks documents differently (Spearman {measured.paraphrase_spearman:.2f} < "
            f"{thresholds.min_paraphrase_spearman})"
        )
    if measured.score_spread is not None and measured.score_spread < thresholds.min_spread:
        reasons.append(f"scores barely vary (spread {measured.score_spread:.3f} of the label range)")
    advice = None
    if reasons:
        advice = (
            f"labels from {model_id} look too noisy for this criterion: " + "; ".join(reasons) + ". Fixes: "
            f"label a larger pool (pool size {max(2 * pool_size, 256)} or more) so the classifier averages the "
            "noise out; label with a bigger model (labeler backend: vllm with a local model directory, or "
            "backend: openai with url: http://HOST:PORT/v1 of an OpenAI-compatible server); or ask a "
            "question this model can judge (a Yes/No prompt with few-shot examples)."
        )
    return dataclasses.replace(measured, noisy=bool(reasons), reasons=tuple(reasons), advice=advice)


def measure_label_quality(
    docs: Sequence[dict[str, Any]],
    results: Sequence[Any],
    prompt: PromptConfig,
    config: LabelerConfig,
    backend: Any,
    *,
    text_field: str = "text",
    id_field: str = "id",
    cache_path: Any = None,
    label: Any = None,
) -> LabelQuality:
    """Label-quality metrics for a labeled pool: `results` are the run's `LabelResult`s (probability mode).

    Labels the first `config.quality_sample` labeled documents again in generate mode and, when the prompt
    has a `paraphrase`, with the paraphrase (logprobs mode). `cache_path` (a directory) keeps those labels
    like the run's own, so a rerun costs nothing. `label` (default: `label_documents` with `backend`) is the
    labeling function, e.g. `zephyr.datashop.label_stage.label_on_engine` to label on the engine's workers.
    """
    import functools
    from pathlib import Path

    from zephyr.datashop.labeling import label_documents

    labeler = label or functools.partial(label_documents, backend=backend)

    assert prompt.values is not None
    lo, hi = prompt.score_range
    scores = {r.id: r.score for r in results if r.score is not None}
    values = list(scores.values())
    spread = float(np.std(values) / (hi - lo)) if len(values) > 1 and hi > lo else None
    sample = [d for d in docs if str(d[id_field]) in scores][: config.quality_sample]
    skipped: list[str] = []
    figures: dict[str, float | None] = {}  # LabelQuality's, of the checks that ran
    if config.quality_sample == 0 or len(sample) < 3:
        skipped.append("quality_sample is 0" if config.quality_sample == 0 else f"{len(sample)} labeled documents")
    else:
        cache_dir = Path(cache_path) if cache_path is not None else None

        def relabel(asked: PromptConfig, mode: LabelerConfig, name: str, progress: str) -> list[Any]:
            """The sample's `LabelResult`s under another wording or mode, cached as `name`.jsonl."""
            run = labeler(
                sample,
                asked,
                mode,
                text_field=text_field,
                id_field=id_field,
                progress=f"datashop label quality: {progress}",
                cache_path=cache_dir / f"{name}.jsonl" if cache_dir else None,
            )
            return run.results

        base = np.asarray([scores[str(d[id_field])] for d in sample])
        best = {r.id: r.label for r in results if r.score is not None}
        generate = dataclasses.replace(config, mode="generate", max_new_tokens=min(config.max_new_tokens, 4))
        figures |= _modes_agreement(base, best, relabel(prompt, generate, "generate", "generate mode"))
        if prompt.paraphrase is None:
            skipped.append("no prompt.paraphrase given")
        else:
            reworded = dataclasses.replace(prompt, template=prompt.paraphrase, paraphrase=None)
            paraphrased = relabel(reworded, dataclasses.replace(config, mode="logprobs"), "paraphrase", "paraphrase")
            figures |= _paraphrase_agreement(base, paraphrased, prompt.values)
    model_id = getattr(backend, "model_id", None) or f"{config.backend}:{config.model}"
    measured = LabelQuality(n=len(sample), score_spread=spread, skipped=tuple(skipped), **figures)
    return assess(measured, model_id=model_id, pool_size=len(docs))


def _modes_agreement(base: np.ndarray, best: dict[str, Any], generated: Sequence[Any]) -> dict[str, float | None]:
    """The modes check: how many generate-mode answers parse, and (3 or more parsed) their Spearman against the
    probability-mode scores `base` and how often the answer is the label with the highest probability (`best`)."""
    ok = [(b, r) for b, r in zip(base, generated, strict=True) if r.score is not None]
    figures: dict[str, float | None] = {"generate_parsed": len(ok) / len(base)}
    if len(ok) >= 3:
        figures["modes_spearman"] = spearman([b for b, _ in ok], [r.score for _, r in ok])
        figures["modes_label_agreement"] = float(np.mean([r.label == best[r.id] for _, r in ok]))
    return figures


def _paraphrase_agreement(
    base: np.ndarray, paraphrased: Sequence[Any], values: Sequence[float]
) -> dict[str, float | None]:
    """The paraphrase check (3 or more scored): Spearman of the reworded scores against `base`, and how often both
    wordings put a document in the same label after each wording's scores are rank-calibrated."""
    from zephyr.datashop.classifiers import nearest_bin

    pairs = [(b, r.score) for b, r in zip(base, paraphrased, strict=True) if r.score is not None]
    if len(pairs) < 3:
        return {}
    a, b = np.asarray([x for x, _ in pairs]), np.asarray([y for _, y in pairs])
    same = nearest_bin(rank_calibrate(a, values), values) == nearest_bin(rank_calibrate(b, values), values)
    return {"paraphrase_spearman": spearman(a, b), "paraphrase_label_agreement": float(np.mean(same))}
