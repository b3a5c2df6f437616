"""vLLM backends for real: `vllm.LLM` in process, and `vllm serve` on 127.0.0.1 through the OpenAI backend.

vLLM conflicts with the main environment, so these run only from `.venv-vllm` (`make test-vllm`,
which runs tests/datashop/vllm_venv.sh); everywhere else they skip. The model is SmolLM2-135M-Instruct
exported to safetensors (vLLM has no GGUF loader), named by $ZEPHYR_VLLM_MODEL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine core in this process
vllm = pytest.importorskip("vllm", reason="vLLM lives in its own venv: make test-vllm")

from datashop_corpus import pydoc_documents  # noqa: E402

from zephyr.datashop.config import LabelerConfig, PromptConfig  # noqa: E402
from zephyr.datashop.labeling import label_documents  # noqa: E402

pytestmark = pytest.mark.vllm

MODEL = os.environ.get("ZEPHYR_VLLM_MODEL", "smollm2-135m-instruct")
PROMPT = PromptConfig(
    template="How much is the following text about computer programming, from 0 (not at all) to 5 "
    "(entirely)?\n\nText: {example}\n\nAnswer with one digit.",
    answer_prefix="Score: ",
)
DOCS = pydoc_documents(4) + [
    {
        "id": "recipe",
        "text": "Preheat the oven to 180 C. Cream the butter and sugar, add the eggs one at a time, "
        "fold in the flour and bake for 25 minutes until golden.",
    },
    {
        "id": "football",
        "text": "The home side equalised in the 89th minute after a corner was only half cleared, "
        "sending the crowd into raptures before the final whistle.",
    },
]


@pytest.fixture(scope="module")
def inprocess():
    from zephyr.datashop.backend_vllm import VLLMBackend

    return VLLMBackend(LabelerConfig(backend="vllm", model=MODEL, max_context_tokens=512, max_example_tokens=128))


def test_vllm_in_process_labels(inprocess) -> None:
    config = LabelerConfig(backend="vllm", model=MODEL, max_context_tokens=512, max_example_tokens=128, batch_size=3)
    run = label_documents(DOCS, PROMPT, config, backend=inprocess)
    assert run.model_id == f"vllm:{MODEL}" and run.failed == 0
    for r in run.results:
        assert 0.0 <= r.score <= 5.0 and 0.0 < r.label_mass <= 1.0
    gen = label_documents(
        DOCS[:2],
        PROMPT,
        LabelerConfig(backend="vllm", model=MODEL, mode="generate", max_context_tokens=512, max_example_tokens=128),
        backend=inprocess,
    )
    assert all(isinstance(r.generated, str) for r in gen.results)
    print("\nvLLM in-process:", {r.id: round(r.score, 3) for r in run.results}, f"{run.docs_per_s:.1f} docs/s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_serve_through_openai_backend(inprocess) -> None:
    from zephyr.datashop.backend_vllm import vllm_model_dir

    path = str(vllm_model_dir(MODEL))
    port = _free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            path,
            "--served-model-name",
            "smol",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "512",
            "--enforce-eager",
            "--max-logprobs",
            "20",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    out = server.stdout.read() if server.poll() is not None else ""
                    pytest.fail(f"vllm serve did not come up on port {port}: {out[-3000:]}")
                time.sleep(2)
        base = dict(max_context_tokens=512, max_example_tokens=128, batch_size=3)
        remote = label_documents(
            DOCS,
            PROMPT,
            LabelerConfig(backend="openai", url=f"http://127.0.0.1:{port}/v1", model="smol", tokenizer=path, **base),
        )
        local = label_documents(DOCS, PROMPT, LabelerConfig(backend="vllm", model=MODEL, **base), backend=inprocess)
        assert remote.failed == 0
        for a, b in zip(local.results, remote.results, strict=True):
            assert b.score == pytest.approx(a.score, abs=0.1)  # same engine, bf16; top-20 vs exact label ids
        print("\nvllm serve:", {r.id: round(r.score, 3) for r in remote.results}, f"{remote.docs_per_s:.1f} docs/s")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
