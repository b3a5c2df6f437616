"""LM labeling with the packaged SmolLM2 on CPU: scores, truncation, generation parsing, resumable cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.labeling import LabelCache, label_documents, score_from_probs, score_from_text
from zephyr.datashop.prompts import HFCodec, render_prompt

EDU = PromptConfig(
    template="Below is an extract from a web page. Evaluate whether it could be useful for teaching, from 0 "
    "(no educational value) to 5 (excellent teaching material).\n\nExtract: {example}\n\n"
    "Answer with a single digit from 0 to 5.",
    answer_prefix="Educational score: ",
)
CONFIG = LabelerConfig(backend="transformers", batch_size=4, max_example_tokens=128)


def test_expected_score_and_text_parsing() -> None:
    score, label, mass, norm, error = score_from_probs(
        {"0": 0.1, "1": 0.0, "2": 0.0, "3": 0.1, "4": 0.0, "5": 0.2}, EDU
    )
    assert error is None and label == "5" and mass == pytest.approx(0.4)
    assert score == pytest.approx((0 * 0.1 + 3 * 0.1 + 5 * 0.2) / 0.4)
    assert sum(norm.values()) == pytest.approx(1.0)
    assert score_from_probs({}, EDU)[4] == "no_label_in_top_logprobs"
    # What SmolLM2 actually says when asked for a digit (ENVIRONMENT.md): a number is still read out of it.
    assert score_from_text("The text is 3.33% educational.", EDU)[:2] == (3.33, "3")
    assert score_from_text("I'd give it a 4.", EDU)[:2] == (4.0, "4")
    assert score_from_text("Score: 9.9", EDU)[2] == "parsed_score_out_of_range"
    assert score_from_text("no digits at all", EDU)[2] == "no_score_in_generated_text"
    yes_no = PromptConfig(template="{example}", labels=("No", "Yes"), values=(0, 1), parse_regex=r"\b(Yes|No)\b")
    assert score_from_text("Yes, it is.", yes_no)[:2] == (1.0, "Yes")


def test_truncates_the_example_never_the_instructions(smol_backend) -> None:
    codec = HFCodec(smol_backend.tokenizer)
    long_text = "The mitochondria is the powerhouse of the cell. " * 400
    rendered = render_prompt(EDU, long_text, codec, context_tokens=256, answer_tokens=1, max_example_tokens=None)
    assert rendered.truncated
    assert codec.count(rendered.text) <= 256 - 1
    assert "Answer with a single digit from 0 to 5." in rendered.text and rendered.text.endswith("Educational score: ")
    assert "<|im_start|>user" in rendered.text  # the model's own chat template
    short = render_prompt(EDU, "Short text.", codec, context_tokens=256, answer_tokens=1, max_example_tokens=None)
    assert not short.truncated and "Extract: Short text.\n" in short.text
    with pytest.raises(ValueError, match="instructions alone take"):
        render_prompt(EDU, "x", codec, context_tokens=40, answer_tokens=1, max_example_tokens=None)


def test_labels_real_pages_and_resumes_after_interruption(smol_backend, corpus_docs, tmp_path: Path) -> None:
    docs = corpus_docs[::6][:8]  # news, web pages and Python reference sections
    cache = tmp_path / "labels.jsonl"

    class Interrupted(Exception):
        pass

    class StopsAfterOneBatch:
        """The real backend, killed (as by Ctrl-C or a preempted VM) after its first batch."""

        def __init__(self, inner) -> None:
            self.inner, self.calls = inner, 0
            self.model_id, self.codec, self.context_tokens = inner.model_id, inner.codec, inner.context_tokens

        def label_probs(self, prompts, labels):
            self.calls += 1
            if self.calls > 1:
                raise Interrupted
            return self.inner.label_probs(prompts, labels)

        def close(self) -> None:
            pass

    with pytest.raises(Interrupted):
        label_documents(docs, EDU, CONFIG, cache_path=cache, backend=StopsAfterOneBatch(smol_backend))
    assert len(cache.read_text().splitlines()) == CONFIG.batch_size  # the finished batch is on disk
    with cache.open("a") as f:
        f.write('{"id": "half-written')  # a crash mid-line must not poison the cache

    run = label_documents(docs, EDU, CONFIG, cache_path=cache, backend=smol_backend)
    assert run.from_cache == CONFIG.batch_size and run.labeled_now == len(docs) - CONFIG.batch_size
    assert [r.id for r in run.results] == [d["id"] for d in docs]
    for r in run.results:
        assert r.error is None and 0.0 <= r.score <= 5.0 and r.label in EDU.labels
        assert 0.0 < r.label_mass <= 1.0 and sum(r.probs.values()) == pytest.approx(1.0)
    assert any(r.truncated for r in run.results)  # real pages exceed 128 example tokens
    assert len({round(r.score, 6) for r in run.results}) > 1  # the model tells documents apart
    entries = LabelCache(cache).load()
    assert len(entries) == len(docs)

    again = label_documents(docs, EDU, CONFIG, cache_path=cache, backend=smol_backend)
    assert again.labeled_now == 0 and again.results == run.results
    changed = label_documents(
        docs[:1], EDU, LabelerConfig(batch_size=4, max_example_tokens=64), cache_path=cache, backend=smol_backend
    )
    assert changed.labeled_now == 1  # other labeling settings -> other cache key
    print("\nSmolLM2 labels:", json.dumps({r.id: round(r.score, 3) for r in run.results}, indent=1))


def test_generate_mode_parses_generated_text(smol_backend, corpus_docs) -> None:
    docs = [d for d in corpus_docs if d["source"] == "python-reference"][:2]
    run = label_documents(
        docs, EDU, LabelerConfig(mode="generate", max_new_tokens=12, max_example_tokens=96), backend=smol_backend
    )
    for r in run.results:
        assert isinstance(r.generated, str) and r.generated
        assert (r.score is not None and 0 <= r.score <= 5) or r.error in (
            "no_score_in_generated_text",
            "parsed_score_out_of_range",
            "parsed_answer_not_a_label",
        )
        if r.score is not None:
            assert r.error is None and r.label in EDU.labels
    print("\ngenerated:", [r.generated for r in run.results])


def test_vllm_backend_without_vllm_says_where_it_lives() -> None:
    import importlib.util

    from zephyr.datashop.labeling import make_backend

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here; tests/datashop/test_vllm.py exercises it")
    with pytest.raises(ImportError, match="make test-vllm"):
        make_backend(LabelerConfig(backend="vllm"))
