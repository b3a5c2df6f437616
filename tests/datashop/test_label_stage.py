"""Datashop labeling as an engine stage (zephyr.datashop.label_stage): what each labeler asks of a worker,
the same labels as labeling in the driver, the label cache kept, and a failed run resumed shard by shard.
The stage on a real multi-node Ray cluster with a GPU node is in test_label_stage_ray.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from zephyr import execution
from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.label_stage import label_dataset, label_on_engine, label_resources, worker_labeler
from zephyr.datashop.labeling import label_documents, make_backend
from zephyr.engine.context import ExecutionConfig, current_config
from zephyr.engine.plan import plan
from zephyr.engine.resources import Resources, stage_request

PROMPT = PromptConfig(
    template="Is the following text about computer programming? Answer Yes or No.\n\nText: {example}",
    labels=("No", "Yes"),
    values=(0, 1),
)
CONFIG = LabelerConfig(batch_size=4, max_example_tokens=64, quality_sample=0)


def test_each_labeler_asks_for_what_it_needs():
    assert label_resources(LabelerConfig(backend="vllm")) == {"gpus": 1}
    assert label_resources(LabelerConfig(backend="openai", url="http://127.0.0.1:1/v1")) is None
    assert label_resources(LabelerConfig()) is None  # llama.cpp: one single-threaded model per worker
    assert label_resources(LabelerConfig(backend="transformers", torch_threads=3)) == {"cpus": 3}
    # a local CPU backend in a worker of the processes/Ray backend: the worker's CPUs are its threads
    assert worker_labeler(LabelerConfig(), "processes", 1.0).torch_threads == 1
    assert worker_labeler(LabelerConfig(backend="transformers"), "ray", 2.0).torch_threads == 2
    assert worker_labeler(LabelerConfig(), "local", 1.0).torch_threads is None  # in process: its own helpers
    assert worker_labeler(LabelerConfig(torch_threads=4), "ray", 1.0).torch_threads == 4
    openai = LabelerConfig(backend="openai", url="http://127.0.0.1:1/v1")
    assert worker_labeler(openai, "processes", 1.0) == openai


def _docs(n: int) -> list[dict[str, Any]]:
    return [{"id": f"d{i}", "text": "def f(x): return x\n" * (i + 1)} for i in range(n)]


def test_the_lowered_labeling_stage_carries_the_request():
    """Nothing runs and vLLM need not be installed: the plan alone says what the stage asks for."""
    engine = ExecutionConfig(backend="ray", workers=4)
    cases = [
        (LabelerConfig(backend="vllm", batch_size=2), Resources(gpus=1.0)),
        (LabelerConfig(backend="openai", url="http://127.0.0.1:1/v1", batch_size=2), None),
        (LabelerConfig(torch_threads=2, batch_size=2), Resources(cpus=2.0)),
    ]
    for labeler, expected in cases:
        dataset = label_dataset(_docs(16), PROMPT, labeler, execution_config=engine)
        (stage,) = plan(dataset, engine).stages
        assert stage_request(stage) == expected, labeler.backend
        assert stage.num_shards == 4  # one per worker here; at most 4 batches each
        assert "map_shard(label)" in stage.name
    gpu = label_dataset(_docs(3), PROMPT, LabelerConfig(backend="vllm"), resources={"gpus": 2, "node_g": 1})
    assert stage_request(plan(gpu, engine).stages[0]) == Resources(gpus=2.0, custom=(("node_g", 1.0),))


def test_labels_on_processes_workers_match_the_driver_and_keep_the_cache(corpus_docs, tmp_path: Path, scratch: str):
    pytest.importorskip("llama_cpp")
    docs = corpus_docs[::6][:8]
    before = label_documents(docs, PROMPT, CONFIG)  # the previous way: the model in this process
    cache = tmp_path / "labels.jsonl"
    with execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False):
        assert plan(label_dataset(docs, PROMPT, CONFIG), current_config()).stages[0].num_shards == 2
        run = label_on_engine(docs, PROMPT, CONFIG, cache_path=cache)
        again = label_on_engine(docs, PROMPT, CONFIG, cache_path=cache)
    assert run.model_id == before.model_id == "llamacpp:smollm2-135m-instruct"
    assert (run.labeled_now, run.from_cache, run.failed) == (8, 0, 0)
    for ours, theirs in zip(run.results, before.results, strict=True):
        assert (ours.id, ours.key) == (theirs.id, theirs.key)  # same documents, same cache keys, input order
        assert ours.score == pytest.approx(theirs.score, abs=1e-3)
        assert ours.label_mass == pytest.approx(theirs.label_mass, abs=1e-3)
    assert len(cache.read_text().splitlines()) == 8 and not (tmp_path / "labels.parts").exists()
    assert (again.labeled_now, again.from_cache) == (0, 8) and again.results == run.results
    # the cache file stays the one label_documents reads: the previous way finds every label there
    assert label_documents(docs, PROMPT, CONFIG, cache_path=cache).labeled_now == 0


@dataclass(frozen=True)
class FailsOn:
    """A backend factory: the real backend, failing on any batch whose prompt contains `marker`."""

    marker: str

    def __call__(self, config: LabelerConfig) -> Any:
        return _Failing(make_backend(config), self.marker)


class _Failing:
    def __init__(self, inner: Any, marker: str) -> None:
        self.inner, self.marker = inner, marker
        self.model_id, self.codec, self.context_tokens = inner.model_id, inner.codec, inner.context_tokens

    def label_probs(self, prompts, labels):
        if any(self.marker in p for p in prompts):
            raise RuntimeError(f"injected failure on the document containing {self.marker!r}")
        return self.inner.label_probs(prompts, labels)

    def generate(self, prompts, max_new_tokens):
        return self.inner.generate(prompts, max_new_tokens)

    def close(self) -> None:
        self.inner.close()


def test_a_failed_run_resumes_without_relabeling_finished_shards(corpus_docs, tmp_path: Path, scratch: str):
    pytest.importorskip("llama_cpp")
    docs = corpus_docs[1::6][:7]
    longest = max(len(d["text"]) for d in docs)
    docs.append({"id": "poison", "text": "POISONED " + "x " * longest})  # the longest: in the last shard
    cache = tmp_path / "labels.jsonl"
    settings = dict(backend="processes", workers=1, scratch=scratch, progress=False, summary=False)
    with execution(**settings, max_user_retries=0), pytest.raises(Exception, match="injected failure"):
        label_on_engine(docs, PROMPT, CONFIG, cache_path=cache, shard_docs=2, backend_factory=FailsOn("POISONED"))
    finished = sorted(p.name for p in (tmp_path / "labels.parts").glob("part-*.jsonl"))
    assert finished == [f"part-{i:05d}-of-00004.jsonl" for i in range(3)]  # shards 0-2 kept, 3 failed
    assert not cache.exists()
    with execution(**settings):
        run = label_on_engine(docs, PROMPT, CONFIG, cache_path=cache, shard_docs=2)
    assert (run.labeled_now, run.from_cache, run.failed) == (2, 6, 0)  # only the failed shard relabeled
    assert [r.id for r in run.results] == [d["id"] for d in docs]
    assert len(cache.read_text().splitlines()) == 8 and not (tmp_path / "labels.parts").exists()


_KILLED_DRIVER = """
import json, sys
from zephyr import execution
from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.label_stage import label_on_engine

if __name__ == "__main__":
    docs = json.load(open(sys.argv[1]))
    prompt = PromptConfig(template={template!r}, labels=("No", "Yes"), values=(0, 1))
    with execution(backend="processes", workers=1, scratch=sys.argv[3], progress=False, summary=False):
        label_on_engine(docs, prompt, LabelerConfig(batch_size=4, max_example_tokens=64), cache_path=sys.argv[2],
                        shard_docs=4)
"""


@pytest.mark.slow
def test_a_killed_run_resumes_without_relabeling_finished_shards(corpus_docs, tmp_path: Path):
    """The driver and its workers killed (SIGKILL) mid-labeling: the rerun takes over the dead run's locks and
    labels only the shards that had no file yet."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("llama_cpp")
    docs = corpus_docs[2::3][:16]
    (tmp_path / "docs.json").write_text(json.dumps(docs))
    (tmp_path / "driver.py").write_text(_KILLED_DRIVER.format(template=PROMPT.template))
    cache, parts, scratch = tmp_path / "labels.jsonl", tmp_path / "labels.parts", str(tmp_path / "scratch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "docs.json"), str(cache), scratch]
    driver = subprocess.Popen(args, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(list(parts.glob("part-*.jsonl"))) < 2:
            assert driver.poll() is None, driver.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no two shards finished in 300 s"
            time.sleep(0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its worker processes, mid-shard
        driver.wait()
    finished = len(list(parts.glob("part-*.jsonl")))
    assert 2 <= finished < 4 and not cache.exists()
    with execution(backend="processes", workers=1, scratch=scratch, progress=False, summary=False):
        run = label_on_engine(docs, PROMPT, CONFIG, cache_path=cache, shard_docs=4)
    assert (run.labeled_now, run.from_cache, run.failed) == (16 - 4 * finished, 4 * finished, 0)
    assert len(cache.read_text().splitlines()) == 16 and not parts.exists()


@dataclass(frozen=True)
class RecordsWorker:
    """A backend factory for a vLLM-configured stage that notes the worker it runs in, then labels with the
    real llama.cpp backend (vLLM cannot run here): the stage, its resources and the worker are vLLM's."""

    path: str

    def __call__(self, config: LabelerConfig) -> Any:
        import dataclasses
        import json
        import multiprocessing
        import os

        seen = {
            "daemon": multiprocessing.current_process().daemon,
            "vllm_multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        with open(self.path, "a") as handle:
            handle.write(json.dumps(seen) + "\n")
        return make_backend(dataclasses.replace(config, backend="llamacpp", torch_threads=1))


def test_a_vllm_stage_on_processes_gets_a_device_and_keeps_the_engine_core_in_process(
    corpus_docs, tmp_path: Path, scratch: str, monkeypatch
):
    """A processes-backend worker is a daemon, which may not start vLLM's engine-core process."""
    import json

    pytest.importorskip("llama_cpp")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one device, as a GPU machine's scheduler hands it out
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    seen = tmp_path / "seen.jsonl"
    vllm = LabelerConfig(backend="vllm", batch_size=4, max_example_tokens=64, quality_sample=0)
    with execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False):
        run = label_on_engine(corpus_docs[:4], PROMPT, vllm, backend_factory=RecordsWorker(str(seen)))
    assert run.failed == 0 and len(run.results) == 4
    workers = [json.loads(line) for line in seen.read_text().splitlines()]
    assert workers == [{"daemon": True, "vllm_multiprocessing": "0", "cuda_visible_devices": "0"}]
