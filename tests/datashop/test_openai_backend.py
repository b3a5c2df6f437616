"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 serving the local model."""

from __future__ import annotations

import json
import urllib.request

import pytest

from zephyr.datashop.backend_openai import OpenAIBackend, completions_url
from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.labeling import label_documents

PROG = PromptConfig(
    template="Is the following text about computer programming? Answer Yes or No.\n\nText: {example}",
    labels=("No", "Yes"),
    values=(0, 1),
)


@pytest.fixture(scope="module")
def server(smol_backend):
    from zephyr.datashop.server import start_server

    srv = start_server("smollm2-135m-instruct", host="127.0.0.1", port=0)
    yield srv
    srv.stop()


def test_url_normalisation() -> None:
    assert completions_url("http://h:1") == "http://h:1/v1/completions"
    assert completions_url("http://h:1/v1/") == "http://h:1/v1/completions"
    assert completions_url("http://h:1/v1/completions") == "http://h:1/v1/completions"


def test_server_speaks_the_completions_api(server) -> None:
    with urllib.request.urlopen(server.url + "/models", timeout=30) as r:
        assert json.loads(r.read())["data"][0]["id"] == "smollm2-135m-instruct"
    body = json.dumps(
        {
            "model": "x",
            "prompt": ["The capital of France is", "1, 2, 3,"],
            "max_tokens": 3,
            "logprobs": 5,
            "temperature": 0,
        }
    ).encode()
    req = urllib.request.Request(server.url + "/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        answer = json.loads(r.read())
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    for choice in answer["choices"]:
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) <= 3
        assert "".join(lp["tokens"]) == choice["text"]
        assert all(len(top) <= 5 and max(top.values()) <= 0 for top in lp["top_logprobs"])
        # greedy: the chosen token is the most likely one
        assert lp["token_logprobs"][0] == pytest.approx(max(lp["top_logprobs"][0].values()))


def test_openai_backend_matches_in_process_labels(server, smol_backend, corpus_docs) -> None:
    docs = corpus_docs[::8][:6]
    base = dict(max_example_tokens=96, batch_size=3)
    local = label_documents(docs, PROG, LabelerConfig(backend="transformers", **base), backend=smol_backend)
    remote = label_documents(
        docs,
        PROG,
        LabelerConfig(
            backend="openai", url=server.url, model="smollm2-135m-instruct", tokenizer="smollm2-135m-instruct", **base
        ),
    )
    assert remote.model_id == "openai:smollm2-135m-instruct" and remote.failed == 0
    for a, b in zip(local.results, remote.results, strict=True):
        assert a.id == b.id
        # same model and prompt; only the batching (left vs right padding) differs
        assert b.score == pytest.approx(a.score, abs=2e-3)
        assert b.label_mass == pytest.approx(a.label_mass, abs=2e-3)
    print(
        "\nremote vs local:",
        [(round(a.score, 4), round(b.score, 4)) for a, b in zip(local.results, remote.results, strict=False)],
    )


def test_openai_generate_mode_and_errors(server) -> None:
    backend = OpenAIBackend(LabelerConfig(backend="openai", url=server.url, model="m"))
    texts = backend.generate(["Count: 1, 2, 3, 4,"], 4)
    assert len(texts) == 1 and any(ch.isdigit() for ch in texts[0])
    with pytest.raises(RuntimeError, match="HTTP 400"):
        backend._complete(["x"], 1, 50)  # logprobs above the API limit
    dead = OpenAIBackend(LabelerConfig(backend="openai", url="http://127.0.0.1:9", model="m", timeout_s=2))
    with pytest.raises(ConnectionError, match="Could not reach"):
        dead.label_probs(["x"], ["0", "1"])
