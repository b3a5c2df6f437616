"""Scoring a corpus on the engine (model loaded once per worker), keep-fraction thresholds, drop reasons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from zephyr import Dataset, execution
from zephyr.datashop.apply import (
    DROP_REASON,
    KeepAtLeast,
    ScoreHistogram,
    score_dataset,
    score_histogram,
    threshold_for_keep_fraction,
)
from zephyr.datashop.classifiers import train_classifier
from zephyr.datashop.config import ClassifierConfig

VALUES = (0.0, 1.0)


@pytest.fixture(scope="module")
def classifier_dir(corpus_docs, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("clf") / "fasttext"
    texts = [d["text"] for d in corpus_docs]
    scores = [1.0 if d["source"] == "python-reference" else 0.0 for d in corpus_docs]
    train_classifier(texts, scores, ClassifierConfig(kind="fasttext"), out, bin_values=VALUES)
    return str(out)


def test_threshold_for_keep_fraction_from_histogram() -> None:
    scores = np.linspace(0, 1, 1001)
    counts = np.bincount(np.minimum((scores * 100).astype(int), 99), minlength=100)
    hist = ScoreHistogram(0.0, 1.0, tuple(int(c) for c in counts))
    t = threshold_for_keep_fraction(hist, 0.25)
    assert 0.74 <= t <= 0.76 and abs(np.mean(scores >= t) - 0.25) < 0.011
    assert threshold_for_keep_fraction(hist, 1.0) == float("-inf")


def test_scores_whole_corpus_on_worker_processes(corpus_docs, classifier_dir: str, scratch: str) -> None:
    from zephyr.datashop.classifiers import load_classifier

    expected = {
        d["id"]: s
        for d, s in zip(
            corpus_docs, load_classifier(classifier_dir).predict([d["text"] for d in corpus_docs]), strict=False
        )
    }
    ds = score_dataset(Dataset.from_list(corpus_docs, num_shards=6), classifier_dir, score_field="datashop_prog")
    with execution(backend="processes", workers=2, scratch=scratch):
        result = ds.map_batches(lambda b: b, batch_size=4).execute()
    records = result.outputs
    assert [r["id"] for r in records] == [d["id"] for d in corpus_docs]
    for r in records:
        assert r["datashop_prog"] == pytest.approx(expected[r["id"]], abs=1e-9)
        assert r["metadata"] and r["source"]  # every original field kept
    assert result.counters["datashop/scored"] == len(corpus_docs)
    # 6 shards over 2 worker processes: the model is loaded by each worker once, not per shard or batch
    assert 1 <= result.counters["datashop/classifier_loads"] <= 2


def test_keep_fraction_filter_records_drop_reason(
    corpus_docs, classifier_dir: str, tmp_path: Path, scratch: str
) -> None:
    with execution(backend="local", scratch=scratch):
        files = score_dataset(
            Dataset.from_list(corpus_docs, num_shards=3), classifier_dir, score_field="s"
        ).write_jsonl(str(tmp_path / "scored" / "part-{shard:05d}.jsonl.zst"))
        scored = Dataset.from_files(files)
        hist = score_histogram(scored, "s", lo=0.0, hi=1.0)
        assert hist.total == len(corpus_docs) and hist.missing == 0
        threshold = threshold_for_keep_fraction(hist, 0.25)
        result = scored.filter(KeepAtLeast("s", threshold, counter_prefix="datashop/prog")).execute()
    kept = result.outputs
    assert len(kept) >= round(0.25 * len(corpus_docs)) and len(kept) <= round(0.25 * len(corpus_docs)) + 2
    assert all(r["s"] >= threshold for r in kept)
    assert result.counters["datashop/prog/kept"] == len(kept)
    assert result.counters[f"datashop/prog/dropped/{DROP_REASON}"] == len(corpus_docs) - len(kept)
    share = np.mean([r["source"] == "python-reference" for r in kept])
    assert share > 0.8  # the classifier trained on these labels keeps the reference sections
