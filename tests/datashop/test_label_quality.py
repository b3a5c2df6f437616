"""Label-quality metrics (modes, paraphrase, spread), the noisy-label verdict, calibration, majority baseline."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from zephyr.datashop.classifiers import nearest_bin
from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.labeling import label_documents
from zephyr.datashop.metrics import macro_f1
from zephyr.datashop.quality import (
    LabelQuality,
    assess,
    classifier_beats_majority,
    measure_label_quality,
    rank_calibrate,
)

VALUES = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
PROMPT = PromptConfig(
    template="Rate how educational a text is, from 0 to 5.\n\nText: Home | About | Contact. Accept all cookies?\n"
    "Score: 0\n\nText: Photosynthesis is how plants turn light, water and CO2 into sugar.\nScore: 5\n\n"
    "Text: {example}",
    paraphrase="How much could a student learn from this text? Answer 0 (nothing) to 5 (a lot).\n\nText: Buy now! "
    "Free shipping. Log in | Cart (0)\nScore: 0\n\nText: The French Revolution began in 1789 and spread the "
    "ideas of liberty across Europe.\nScore: 5\n\nText: {example}",
    answer_prefix="Score: ",
    use_chat_template=False,
)
CONFIG = LabelerConfig(backend="llamacpp", batch_size=8, max_example_tokens=64, quality_sample=10)


def test_rank_calibration_keeps_the_order_and_spreads_the_classes() -> None:
    bunched = [2.1, 2.3, 1.9, 2.2, 2.25, 2.0, 1.95, 2.4, 2.05, 2.15, 2.35]  # what SmolLM2's expected scores look like
    calibrated = rank_calibrate(bunched, VALUES)
    assert list(np.argsort(calibrated)) == list(np.argsort(bunched))
    assert calibrated.min() == 0.0 and calibrated.max() == 5.0
    assert len(set(nearest_bin(bunched, VALUES))) == 1  # raw: one class, nothing to learn
    assert len(set(nearest_bin(calibrated, VALUES))) == 6
    assert list(rank_calibrate([1.0, 1.0, 3.0], VALUES)) == [1.25, 1.25, 5.0]  # ties share their mean rank
    assert list(rank_calibrate([2.0, 2.0], VALUES)) == [2.5, 2.5]


def test_majority_baseline_is_the_macro_f1_of_always_predicting_the_majority() -> None:
    true = [1, 1, 1, 0, 2]
    result = classifier_beats_majority(true, [1, 1, 1, 0, 2])
    assert result["majority_macro_f1"] == pytest.approx(macro_f1(true, [1] * 5)) == pytest.approx((2 * 3 / 8) / 3)
    assert result["macro_f1"] == 1.0 and result["beats_majority"]
    assert not classifier_beats_majority(true, [1, 1, 1, 1, 1])["beats_majority"]


def test_assess_calls_inconsistent_labels_noisy_and_names_the_fix() -> None:
    measured = functools.partial(
        LabelQuality, n=32, generate_parsed=1.0, modes_label_agreement=0.5, paraphrase_label_agreement=0.3
    )
    run = dict(model_id="llamacpp:smollm2-135m-instruct", pool_size=64)
    good = assess(measured(modes_spearman=0.8, paraphrase_spearman=0.7, score_spread=0.1), **run)
    assert not good.noisy and good.advice is None and "-> ok" in good.summary()
    bad = assess(measured(modes_spearman=0.2, paraphrase_spearman=0.1, score_spread=0.01), **run)
    assert bad.modes_spearman == 0.2 and bad.n == 32  # the figures pass through; only the verdict is added
    assert bad.noisy and len(bad.reasons) == 3
    text = bad.summary()
    assert "NOISY" in text and "WARNING" in text and "too noisy for this criterion" in text
    assert "pool size 256" in bad.advice and "vllm" in bad.advice and "openai" in bad.advice


@pytest.fixture(scope="module")
def llama_backend():
    pytest.importorskip("llama_cpp")
    from zephyr.datashop.labeling import make_backend

    return make_backend(CONFIG)


def test_label_quality_metrics_on_real_pages(llama_backend, corpus_docs, tmp_path) -> None:
    docs = corpus_docs[::4][:12]
    run = label_documents(docs, PROMPT, CONFIG, backend=llama_backend)
    quality = measure_label_quality(docs, run.results, PROMPT, CONFIG, llama_backend, cache_path=tmp_path / "q")
    print("\n" + quality.summary())
    assert quality.n == 10 and quality.skipped == ()
    assert quality.generate_parsed is not None and quality.generate_parsed >= 0.9  # "Score: " -> a digit
    for value in (quality.modes_spearman, quality.paraphrase_spearman):
        assert value is not None and -1.0 <= value <= 1.0
    assert 0.0 <= quality.modes_label_agreement <= 1.0 and 0.0 <= quality.paraphrase_label_agreement <= 1.0
    assert quality.score_spread is not None and quality.score_spread > 0
    # the extra labels are cached like the run's own: measuring again labels nothing
    assert len((tmp_path / "q" / "generate.jsonl").read_text().splitlines()) == 10
    again = measure_label_quality(docs, run.results, PROMPT, CONFIG, llama_backend, cache_path=tmp_path / "q")
    assert again == quality


def test_a_question_the_wording_decides_is_called_noisy(llama_backend, corpus_docs) -> None:
    """The paraphrase asks the opposite question: labels that follow the wording are flagged with the fix."""
    inverted = dataclasses.replace(
        PROMPT,
        paraphrase=(
            "Rate how useless for learning a text is, from 0 (very useful) to 5 (useless).\n\n"
            "Text: The heart pumps blood through the body.\nScore: 0\n\n"
            "Text: Sign in | Cart | Accept cookies\nScore: 5\n\nText: {example}"
        ),
    )
    docs = corpus_docs[::4][:12]
    run = label_documents(docs, inverted, CONFIG, backend=llama_backend)
    quality = measure_label_quality(docs, run.results, inverted, CONFIG, llama_backend)
    print("\n" + quality.summary())
    assert quality.noisy and any("paraphrased prompt" in r for r in quality.reasons)
    assert "WARNING" in quality.summary() and "larger pool" in quality.advice


def test_no_paraphrase_says_what_was_not_measured(llama_backend, corpus_docs) -> None:
    prompt = dataclasses.replace(PROMPT, paraphrase=None)
    config = dataclasses.replace(CONFIG, quality_sample=4)
    docs = corpus_docs[:4]
    run = label_documents(docs, prompt, config, backend=llama_backend)
    quality = measure_label_quality(docs, run.results, prompt, config, llama_backend)
    assert quality.paraphrase_spearman is None and quality.skipped == ("no prompt.paraphrase given",)
    assert "not measured: no prompt.paraphrase given" in quality.summary()
    off = measure_label_quality(docs, run.results, prompt, dataclasses.replace(config, quality_sample=0), llama_backend)
    assert off.n == 0 and off.modes_spearman is None and off.skipped == ("quality_sample is 0",)
