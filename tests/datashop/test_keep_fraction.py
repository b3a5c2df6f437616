"""A keep_fraction the scores cannot honour fails with the reason, or (told so) keeps the ties and says it.

A user's `zephyr datashop` with `keep_fraction: 0.3` kept 12,500 of 12,500 documents: its classifier gave
every document the same score, so the threshold kept them all, and the run printed a warning about noisy
labels and "succeeded" with exit code 0. Reproduced here with the real labeler: a prompt SmolLM2 answers
the same way for every page gives one-class labels and a classifier that scores every document alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from datashop_corpus import write_corpus

from zephyr import execution
from zephyr.datashop.apply import (
    KeepFractionError,
    ScoreHistogram,
    keep_fraction_shortfall,
    threshold_for_keep_fraction,
)
from zephyr.datashop.config import (
    ClassifierConfig,
    DatashopConfig,
    FilterConfig,
    LabelerConfig,
    PoolConfig,
    PromptConfig,
    StageConfig,
)
from zephyr.datashop.pipeline import run_datashop

ONE_ANSWER = StageConfig(
    name="yes",
    prompt=PromptConfig(template="Reply with the word Yes.\n\nText: {example}", labels=("No", "Yes"), values=(0, 1)),
    labeler=LabelerConfig(batch_size=8, max_example_tokens=64, quality_sample=8),
    pool=PoolConfig(size=12, seed=0),
    classifier=ClassifierConfig(kind="fasttext", holdout_fraction=0.25),
    filter=FilterConfig(keep_fraction=0.3),
)


def _hist(counts: list[int]) -> ScoreHistogram:
    return ScoreHistogram(0.0, 1.0, tuple(counts))


@pytest.mark.parametrize(
    "counts, fraction, unmet",
    [
        ([0, 0, 0, 100], 0.3, "all 100 documents the same score"),  # one score for everything
        ([50, 0, 40, 10], 0.3, "40 documents (40%) share the score"),  # ties at the threshold: 50% kept
        ([55, 0, 35, 10], 0.3, None),  # 45% kept: half again what was asked, the most that passes
        ([0, 5, 90, 5], 0.9, None),  # 95% kept of 90% asked: halfway to everything, the most that passes
        ([0, 5, 95, 0], 0.8, "95 documents (95%) share the score"),  # 95% kept of 80% asked
        ([25, 25, 25, 25], 0.5, None),  # exactly what was asked
        ([0, 70, 1, 29], 0.3, None),  # 30% exactly from the top two bins
        ([0, 0, 0, 100], 1.0, None),  # everything asked
    ],
)
def test_shortfall_from_the_histogram(counts, fraction, unmet):
    hist = _hist(counts)
    note = keep_fraction_shortfall(hist, fraction, threshold_for_keep_fraction(hist, fraction))
    assert (note is None) if unmet is None else (unmet in note), note


def test_filter_config_checks_on_ties():
    from zephyr.config import ConfigError

    with pytest.raises(ConfigError, match="on_ties must be 'fail' or 'keep'"):
        FilterConfig(keep_fraction=0.3, on_ties="sometimes")


@pytest.mark.slow  # about a minute on 2 cores: labels, classifier and scoring, three times
def test_a_keep_fraction_the_scores_cannot_honour(corpus_docs, tmp_path: Path, scratch: str, capsys) -> None:
    pytest.importorskip("llama_cpp")
    pattern = write_corpus(corpus_docs, tmp_path / "corpus", shards=2)
    out = tmp_path / "shop"
    config = DatashopConfig(input=pattern, output_dir=str(out), stages=(ONE_ANSWER,), engine_backend="local")
    with execution(scratch=scratch), pytest.raises(KeepFractionError) as failed:
        run_datashop(config)
    message = str(failed.value)
    assert f"keep_fraction=0.3 cannot be honoured: the classifier gave all {len(corpus_docs)} documents" in message
    assert "on_ties: keep" in message and not (out / "yes" / "kept").exists()

    # the command line: one line naming the reason, exit code 1 (labels come from the first run's cache)
    from zephyr.cli import main

    config_path = tmp_path / "datashop.yaml"
    stage = {
        "name": "yes",
        "prompt": {"template": ONE_ANSWER.prompt.template, "labels": ["No", "Yes"], "values": [0, 1]},
        "labeler": {"batch_size": 8, "max_example_tokens": 64, "quality_sample": 8},
        "pool": {"size": 12, "seed": 0},
        "classifier": {"kind": "fasttext", "holdout_fraction": 0.25},
        "filter": {"keep_fraction": 0.3},
    }
    body = {"input": pattern, "output_dir": str(out), "engine_backend": "local", "stages": [stage]}
    config_path.write_text(yaml.safe_dump(body))
    capsys.readouterr()
    with execution(scratch=scratch):
        assert main(["datashop", str(config_path)]) == 1
    err = capsys.readouterr().err
    assert "KeepFractionError" in err and "cannot be honoured" in err

    # told otherwise: the tied documents are kept and the summary line says how many and why
    stage["filter"]["on_ties"] = "keep"
    config_path.write_text(yaml.safe_dump(body))
    with execution(scratch=scratch):
        assert main(["datashop", str(config_path)]) == 0
    summary = capsys.readouterr().out
    line = next(x for x in summary.splitlines() if x.startswith("yes: KEPT"))
    assert f"KEPT {len(corpus_docs)} of {len(corpus_docs)} (100%)" in line and "same score" in line
