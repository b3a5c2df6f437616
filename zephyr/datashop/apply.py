"""Scoring a whole corpus with a trained classifier on the engine, and keeping the best documents.

The scoring step is a picklable frozen dataclass holding only the classifier's path; each worker
loads the model on its first batch and keeps it (`load_classifier` caches per process), so a model
crosses the network once per worker, never once per batch. A keep-fraction becomes a threshold
through a global score histogram computed on the engine: each shard sends a fixed-size histogram,
so the driver's memory does not grow with the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from zephyr import counters
from zephyr.datashop.classifiers import is_loaded, load_classifier
from zephyr.errors import ZephyrError

__all__ = [
    "ScoreBatch",
    "score_dataset",
    "ScoreHistogram",
    "score_histogram",
    "threshold_for_keep_fraction",
    "keep_fraction_shortfall",
    "KeepFractionError",
    "KeepAtLeast",
    "DROP_REASON",
]

DROP_REASON = "below_threshold"
counters.internal("datashop/classifier_loads")  # once per worker process: how the work ran
HISTOGRAM_BINS = 16384


@dataclass(frozen=True)
class ScoreBatch:
    """map_batches step: add `score_field` = classifier score of `text_field` to every record."""

    classifier_dir: str
    text_field: str
    score_field: str
    threads: int | None = None  # PyTorch threads per worker (embedding classifier), set at its first batch

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.text_field not in batch.schema.names:
            raise KeyError(
                f"Cannot score: records have no {self.text_field!r} field (fields: {batch.schema.names}). "
                "Set text_field in the Datashop config to the field holding the document text."
            )
        if not is_loaded(self.classifier_dir):
            counters.increment("datashop/classifier_loads")  # once per worker process, not per batch
        classifier = load_classifier(self.classifier_dir, threads=self.threads)
        texts = [t if isinstance(t, str) else "" for t in batch.column(self.text_field).to_pylist()]
        scores = pa.array(classifier.predict(texts), pa.float64())
        counters.increment("datashop/scored", len(texts))
        names = batch.schema.names
        if self.score_field in names:  # rescoring (e.g. a rerun over scored output) replaces the field
            return batch.set_column(names.index(self.score_field), self.score_field, scores)
        return batch.append_column(self.score_field, scores)


def score_dataset(
    dataset: Any,
    classifier_dir: str,
    *,
    text_field: str = "text",
    score_field: str,
    batch_size: int = 256,
    threads: int | None = None,
) -> Any:
    """`dataset` with `score_field` added to every record (lazy: nothing runs until a terminal call).

    `threads`: PyTorch threads in each worker; default: this machine's cores shared among the current
    execution's workers (so two workers on two cores use one thread each instead of oversubscribing).
    """
    if threads is None:
        import os

        from zephyr.engine.context import current_config

        threads = max(1, (os.cpu_count() or 1) // max(1, current_config().num_workers))
    return dataset.map_batches(ScoreBatch(str(classifier_dir), text_field, score_field, threads), batch_size=batch_size)


@dataclass(frozen=True)
class ScoreHistogram:
    """Counts of scores in equal-width bins over [lo, hi] (outside values clamp to the end bins)."""

    lo: float
    hi: float
    counts: tuple[int, ...]
    missing: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts)

    def edges(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, len(self.counts) + 1)


@dataclass(frozen=True)
class _ShardHistogram:
    field: str
    lo: float
    hi: float
    bins: int

    def __call__(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        counts = np.zeros(self.bins, dtype=np.int64)
        missing = 0
        chunk: list[float] = []

        def flush() -> None:
            if chunk:
                idx = _bin_index(np.asarray(chunk, dtype=np.float64), self.lo, self.hi, self.bins)
                counts[:] += np.bincount(idx, minlength=self.bins)
                chunk.clear()

        for record in records:
            value = record.get(self.field)
            if value is None or not np.isfinite(value):
                missing += 1
                continue
            chunk.append(float(value))
            if len(chunk) >= 65536:
                flush()
        flush()
        yield {"counts": counts.tolist(), "missing": missing}


def _bin_index(values: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    width = (hi - lo) or 1.0
    return np.clip(((values - lo) / width * bins).astype(np.int64), 0, bins - 1)


def score_histogram(dataset: Any, field: str, *, lo: float, hi: float, bins: int = HISTOGRAM_BINS) -> ScoreHistogram:
    """The global histogram of `field` over a dataset, one fixed-size partial per shard."""
    if not hi > lo:
        raise ValueError(f"score_histogram needs hi > lo, got lo={lo}, hi={hi}")
    counts = np.zeros(bins, dtype=np.int64)
    missing = 0
    for part in dataset.select(field).map_shard(_ShardHistogram(field, float(lo), float(hi), bins)).collect():
        counts += np.asarray(part["counts"], dtype=np.int64)
        missing += int(part["missing"])
    return ScoreHistogram(float(lo), float(hi), tuple(int(c) for c in counts), missing)


def threshold_for_keep_fraction(hist: ScoreHistogram, keep_fraction: float) -> float:
    """The score threshold that keeps (at least, to one bin's resolution) `keep_fraction` of the documents.

    Walks bins from the top until the kept count reaches the target; the threshold is the lower edge
    of the last bin taken, so ties within a bin are kept together (the kept fraction can exceed the
    target by at most one bin's count; the report gives the exact figure).
    """
    total = hist.total
    if total == 0:
        return hist.hi
    target = keep_fraction * total
    edges = hist.edges()
    kept = 0
    for i in range(len(hist.counts) - 1, -1, -1):
        kept += hist.counts[i]
        if kept >= target - 1e-9:
            return float(edges[i]) if i > 0 else float("-inf")
    return float("-inf")


class KeepFractionError(ZephyrError, ValueError):
    """A `keep_fraction` filter that would keep far more than asked, because too many documents share
    the score at the threshold (a classifier that gives every document the same score keeps all)."""


def keep_fraction_shortfall(hist: ScoreHistogram, keep_fraction: float, threshold: float) -> str | None:
    """Why `threshold` cannot keep about `keep_fraction` of the documents, or None when it does.

    A threshold keeps whole histogram bins, so it overshoots by the documents tied with the last one
    kept. Keeping up to half again the fraction asked (at least 5 points more), and less than halfway
    from it to everything, is within what was asked (0.3 keeps at most 0.45; 0.9 at most 0.95); beyond
    that, the reason names how many documents share which score.
    """
    total = hist.total
    if total == 0:
        return None
    edges = hist.edges()
    first = 0 if threshold == float("-inf") else int(np.searchsorted(edges, threshold, side="left"))
    kept = sum(hist.counts[first:])
    if kept / total <= min(max(1.5 * keep_fraction, keep_fraction + 0.05), (1 + keep_fraction) / 2) + 1e-9:
        return None
    nonzero = [i for i, c in enumerate(hist.counts) if c]
    tied = hist.counts[first]
    width = (hist.hi - hist.lo) / len(hist.counts)
    if len(nonzero) == 1:
        return (
            f"the classifier gave all {total:,} documents the same score ({edges[first]:.4g} to "
            f"{edges[first] + width:.4g}), so no threshold keeps {keep_fraction:.0%} of them: it would keep "
            f"{kept:,} ({kept / total:.0%})"
        )
    return (
        f"{tied:,} documents ({tied / total:.0%}) share the score {edges[first]:.4g} to {edges[first] + width:.4g} "
        f"at the threshold, so the best {keep_fraction:.0%} cannot be told apart from the rest: the threshold "
        f"keeps {kept:,} of {total:,} ({kept / total:.0%})"
    )


@dataclass(frozen=True)
class KeepAtLeast:
    """filter step: keep records with `field >= threshold`; the others are counted under a stable reason."""

    field: str
    threshold: float
    counter_prefix: str = "datashop"

    def __call__(self, record: dict[str, Any]) -> bool:
        value = record.get(self.field)
        keep = value is not None and value >= self.threshold
        counters.increment(f"{self.counter_prefix}/kept" if keep else f"{self.counter_prefix}/dropped/{DROP_REASON}")
        return keep
