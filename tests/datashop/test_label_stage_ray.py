"""The labeling stage on a real Ray cluster of three raylets on 127.0.0.1 (`ray start`): a head without
CPUs, node_a with a CPU, node_g with a CPU and one declared GPU (Ray lets a CPU machine declare GPUs).
A stage asking for a GPU, as vLLM labeling does, runs only on node_g, in a worker holding that GPU.

vLLM itself cannot run here (no GPU), so the labeler is the OpenAI-compatible backend against a real
completions server on 127.0.0.1 serving the local SmolLM2, with the vLLM stage's request {"gpus": 1}."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("transformers")

from ray_local import LocalNodes  # noqa: E402

from zephyr import execution  # noqa: E402
from zephyr.datashop.config import LabelerConfig, PromptConfig  # noqa: E402
from zephyr.datashop.label_stage import label_on_engine, label_resources  # noqa: E402
from zephyr.datashop.labeling import label_documents, make_backend  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]
PROMPT = PromptConfig(
    template="Is the following text about computer programming? Answer Yes or No.\n\nText: {example}",
    labels=("No", "Yes"),
    values=(0, 1),
)


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    nodes = LocalNodes(env={"PYTHONPATH": str(REPO)})
    try:
        nodes.start()
        nodes.add("node_a", cpus=1)
        nodes.add("node_g", cpus=1, gpus=1)
        ray.init(address=nodes.address, log_to_driver=False)
        yield nodes
    finally:
        ray.shutdown()
        nodes.stop()


@dataclass(frozen=True)
class RecordsPlacement:
    """A backend factory that notes where it runs (one line per worker that loads the labeler)."""

    path: str

    def __call__(self, config: LabelerConfig) -> Any:
        context = ray.get_runtime_context()
        seen = {
            "node_id": context.get_node_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "assigned": context.get_assigned_resources(),
            "cwd": os.path.basename(os.getcwd()),
        }
        with open(self.path, "a") as handle:
            handle.write(json.dumps(seen) + "\n")
        return make_backend(config)


def test_a_gpu_labeling_stage_runs_on_the_node_that_declares_the_gpu(cluster, corpus_docs, tmp_path, monkeypatch):
    from zephyr.datashop.server import start_server

    monkeypatch.setenv("ZEPHYR_SCRATCH_SHARED", "1")  # every node is this machine: the path is shared
    gpu_node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node_g" in n["Resources"])
    assert ray.cluster_resources().get("GPU") == 1
    docs = corpus_docs[::6][:8]
    placements = tmp_path / "placements.jsonl"
    with start_server("smollm2-135m-instruct", host="127.0.0.1", port=0) as server:
        labeler = LabelerConfig(
            backend="openai",
            url=server.url,
            model="smollm2-135m-instruct",
            tokenizer="smollm2-135m-instruct",
            batch_size=2,
            max_example_tokens=64,
        )
        in_driver = label_documents(docs, PROMPT, labeler)
        settings = dict(backend="ray", ray_address=cluster.address, workers=2, scratch=str(tmp_path / "scratch"))
        with execution(**settings, progress=False, summary=False):
            run = label_on_engine(
                docs,
                PROMPT,
                labeler,
                cache_path=tmp_path / "labels.jsonl",
                resources=label_resources(LabelerConfig(backend="vllm")),
                backend_factory=RecordsPlacement(str(placements)),
            )
    seen = [json.loads(line) for line in placements.read_text().splitlines()]
    print("\nlabeling workers:", seen)
    assert seen and all(s["node_id"] == gpu_node and s["cwd"] == "work-node_g" for s in seen)
    assert all(s["gpu_ids"] == ["0"] and s["cuda_visible_devices"] == "0" for s in seen)
    assert all(s["assigned"].get("GPU") == 1 for s in seen)
    assert (run.labeled_now, run.failed) == (8, 0) and len((tmp_path / "labels.jsonl").read_text().splitlines()) == 8
    for ours, theirs in zip(run.results, in_driver.results, strict=True):
        assert ours.key == theirs.key and theirs.score is not None  # the same cache key as in the driver
        assert ours.score == pytest.approx(theirs.score, abs=2e-3)  # the server batches differently
