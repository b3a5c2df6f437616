"""The llama.cpp labeling backend on the packaged SmolLM2 GGUF: the transformers backend's scores, faster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.labeling import label_documents
from zephyr.datashop.metrics import spearman

# The default recipe's kind of prompt: plain few-shot completion, answer put in the model's mouth.
FEW_SHOT = PromptConfig(
    template="Rate how educational a text is, from 0 to 5.\n\nText: Home | About | Contact. Accept all cookies?\n"
    "Score: 0\n\nText: Photosynthesis is how plants turn light, water and CO2 into sugar.\nScore: 5\n\n"
    "Text: {example}",
    answer_prefix="Score: ",
    use_chat_template=False,
)
# A chat-formatted prompt (the model's own template), as the datashop pipeline uses by default.
CHAT = PromptConfig(
    template="Below is an extract from a web page. Evaluate whether it could be useful for teaching, from 0 "
    "(no educational value) to 5 (excellent teaching material).\n\nExtract: {example}\n\n"
    "Answer with a single digit from 0 to 5.",
    answer_prefix="Educational score: ",
)
CONFIG = LabelerConfig(backend="llamacpp", batch_size=4, max_example_tokens=96)


@pytest.fixture(scope="module")
def llama_backend():
    pytest.importorskip("llama_cpp")
    from zephyr.datashop.labeling import make_backend

    return make_backend(CONFIG)


@pytest.mark.parametrize("prompt", [FEW_SHOT, pytest.param(CHAT, marks=pytest.mark.slow)], ids=["few-shot", "chat"])
def test_scores_agree_with_transformers_on_real_pages(prompt, llama_backend, smol_backend, corpus_docs) -> None:
    docs = corpus_docs[::8][:6]  # news, web pages and Python reference sections
    ours = label_documents(docs, prompt, CONFIG, backend=llama_backend)
    peer = label_documents(
        docs, prompt, LabelerConfig(backend="transformers", batch_size=4, max_example_tokens=96), backend=smol_backend
    )
    a = np.array([r.score for r in ours.results])
    b = np.array([r.score for r in peer.results])
    assert ours.failed == peer.failed == 0 and ours.model_id == "llamacpp:smollm2-135m-instruct"
    print(f"\nllamacpp {np.round(a, 3).tolist()}\ntransformers {np.round(b, 3).tolist()}")
    # Same prompt tokens, same label set, same softmax, the same dequantized weights (as float16): only the
    # order of floating-point operations differs. (Running the Q4_1 file as shipped differed by up to 0.10.)
    assert np.max(np.abs(a - b)) < 0.02, np.abs(a - b)
    assert spearman(a, b) >= 0.99
    for x, y in zip(ours.results, peer.results, strict=True):
        assert x.probs.keys() == y.probs.keys() and x.truncated == y.truncated
        assert abs(x.label_mass - y.label_mass) < 0.05


def test_prefix_reuse_keeps_documents_independent(llama_backend, corpus_docs) -> None:
    """The shared prompt prefix stays in the KV cache; a document's logits never depend on the one before."""
    from zephyr.datashop.prompts import render_prompt

    def text(doc):
        return render_prompt(
            FEW_SHOT,
            doc["text"],
            llama_backend.codec,
            context_tokens=llama_backend.context_tokens,
            answer_tokens=1,
            max_example_tokens=64,
        ).text

    a, b = text(corpus_docs[0]), text(corpus_docs[-1])
    first = llama_backend.next_token_logprobs([a])[0]
    llama_backend.next_token_logprobs([b, "An unrelated prompt that shares nothing"])
    again = llama_backend.next_token_logprobs([a])[0]
    np.testing.assert_allclose(again, first, atol=1e-3)
    top = int(np.argmax(first))
    generated = llama_backend.generate([a], max_new_tokens=3)[0]
    assert generated.startswith(llama_backend.tokenizer.decode([top], skip_special_tokens=True))  # greedy = argmax


def test_packaged_model_runs_in_bfloat16_where_the_cpu_has_bfloat16_dot_products() -> None:
    """bfloat16 weights evaluate prompts ~1.4x faster per CPU-second than float16 here (AVX512_BF16)."""
    pytest.importorskip("llama_cpp")
    from gguf import GGUFReader

    from zephyr.datashop.backend_llamacpp import cpu_has_bf16_dot, gguf_path
    from zephyr.datashop.models import SMOLLM2_ALIAS

    expected = "BF16" if cpu_has_bf16_dot() else "F16"
    path = gguf_path(SMOLLM2_ALIAS)
    assert f"-{expected.lower()}-" in path.name
    matrices = {t.name: t.tensor_type.name for t in GGUFReader(path).tensors if len(t.shape) == 2}
    assert len(matrices) > 100 and set(matrices.values()) == {expected}, matrices


def test_missing_gguf_names_what_it_needs() -> None:
    from zephyr.datashop.backend_llamacpp import gguf_path

    with pytest.raises(FileNotFoundError, match="needs a GGUF file"):
        gguf_path("/nonexistent/model-dir")


def test_helper_processes_label_exactly_as_one_process(llama_backend, corpus_docs) -> None:
    """Idle cores become single-threaded helper processes, each scoring a share of every batch: same scores."""
    from zephyr.datashop.backend_llamacpp import LlamaCppBackend

    two = LlamaCppBackend(CONFIG)
    two.processes = 2  # what idle_cores() gives on an idle 2-core machine
    docs = corpus_docs[::8][:6]
    try:
        split = label_documents(docs, FEW_SHOT, CONFIG, backend=two)
    finally:
        two.close()
    one = label_documents(docs, FEW_SHOT, CONFIG, backend=llama_backend)
    assert [r.score for r in split.results] == pytest.approx([r.score for r in one.results], abs=1e-6)
    assert two._pool is None  # close() ended the helpers


def test_describe_names_the_build_weights_and_threads(llama_backend) -> None:
    """benchmarks/datashop.py prints this beside its figures: labeling speed depends on all of it (issue #31)."""
    from zephyr.datashop.backend_llamacpp import cpu_has_bf16_dot

    info = llama_backend.describe()
    assert "OPENMP" in info["system_info"] and "AVX" in info["system_info"]
    dtype = "BF16" if cpu_has_bf16_dot() else "F16"
    assert dtype.lower() in info["weights"] and dtype in info["model"], info
    assert (info["threads"], info["processes"]) == (1, os.cpu_count() or 1)


_OMP_POLICY = """
import os
from zephyr.datashop.backend_llamacpp import LlamaCppBackend
from zephyr.datashop.config import LabelerConfig
backend = LlamaCppBackend(LabelerConfig(backend="llamacpp", torch_threads={threads}))
print(os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.parametrize(("threads", "policy"), [(2, "passive"), (1, "None")])
def test_a_process_running_llama_cpp_on_several_threads_waits_passively(threads, policy) -> None:
    """OpenMP's threads spun at llama.cpp's barriers: one process with 2 threads labeled 0.69 documents per
    CPU-second at load ~7.7 on 2 cores, 6.06 with OMP_WAIT_POLICY=passive (a single thread uses no OpenMP)."""
    pytest.importorskip("llama_cpp")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _OMP_POLICY.format(threads=threads)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == policy
