"""LM labeling as an engine stage: the pool is a Dataset, each shard is labeled by a worker that asks for
what its labeler needs (`label_resources`), and every finished shard is kept, so a killed run relabels
only the shards that had not finished.

Why a stage and not a loop in the driver: the labeler decides where labeling can run. vLLM needs a GPU,
which on a Ray cluster lives on some worker node, not on the machine that runs the driver; the stage asks
for `{"gpus": 1}` and the Ray backend places it on a node that has one (the processes backend runs one
task per visible device). The OpenAI-compatible backend is I/O bound: an ordinary stage, one request in
flight per worker. The local CPU backends (llama.cpp, the default, and transformers) are fastest as
single-threaded processes, one per core (llama.cpp's threads meet at a spinning barrier after every
operation, see backend_llamacpp), which is what the engine's workers already are: on the processes and
Ray backends each worker loads the model once with `worker_cpus` threads (or `torch_threads`, which the
stage then asks for as its CPUs) and labels its own shards. On the local backend the one in-process task
leaves the backend its own multi-core scheme (llama.cpp: one single-threaded helper process per core).

Cache: `cache_path` (a stage's `labels.jsonl`) keeps the semantics of `label_documents`: a label is reused
when its key (prompt, model, settings, id, text) matches. The driver ships each document's cached
candidates with it; the worker, which knows the model id, keeps those whose key matches. Finished shards
are written atomically by the engine beside the cache (`labels.parts/`); a rerun reads them as cached
labels, and a finished run appends the new labels to `labels.jsonl` and removes the parts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zephyr.datashop.config import LabelerConfig, PromptConfig
from zephyr.datashop.labeling import (
    LabelBackend,
    LabelCache,
    LabelingRun,
    LabelResult,
    label_documents,
    label_key,
    make_backend,
)

__all__ = ["label_resources", "worker_labeler", "label_dataset", "label_on_engine", "release_labelers", "LabelShard"]

_LOCAL_CPU = ("llamacpp", "transformers")
_DOCS_PER_SHARD_BATCHES = 4  # a shard is this many batches at most: the unit of resume and of live progress
# Per process (a worker, or the driver on the local backend): one loaded backend per model, shared by every
# labeling run that differs only in how labels are asked for (mode, batch size, ...: not backend settings), as
# the driver shared one before. Two llama.cpp backend objects would share one llama context (cached per
# process) while each tracks its own KV-cache prefix.
_LOADED: dict[tuple[LabelerConfig, Any], LabelBackend] = {}


def label_resources(config: LabelerConfig) -> dict[str, float] | None:
    """What one labeling worker asks for (`resources=` of the stage): vLLM a GPU; a local CPU backend with
    `torch_threads` that many CPUs; the others (OpenAI-compatible server, local CPU at one thread per
    worker) an ordinary worker."""
    if config.backend == "vllm":
        return {"gpus": 1}
    if config.backend in _LOCAL_CPU and config.torch_threads:
        return {"cpus": config.torch_threads}
    return None


def worker_labeler(config: LabelerConfig, engine_backend: str, worker_cpus: float) -> LabelerConfig:
    """The labeler config a worker uses: a local CPU backend on the processes or Ray backend gets the
    worker's CPUs as its threads (one model per worker, no helper processes: the workers are the
    processes). `torch_threads` is not part of the label cache key, so labels stay reusable."""
    if config.backend in _LOCAL_CPU and config.torch_threads is None and engine_backend != "local":
        return dataclasses.replace(config, torch_threads=max(1, int(worker_cpus)))
    return config


@dataclass(frozen=True)
class LabelShard:
    """map_shard step: label a shard's documents (records {"i", "doc", "cached"}) chunk by chunk.

    Reads two batches of documents at a time, so the engine's live view (records read per running shard) moves
    as labeling does. Yields {"i", "result" (a LabelResult as a dict), "now" (labeled by this task),
    "model_id"} per document, in input order.
    """

    prompt: PromptConfig
    config: LabelerConfig
    text_field: str = "text"
    id_field: str = "id"
    display_name: str = "label"
    backend_factory: Callable[[LabelerConfig], LabelBackend] = make_backend

    def __call__(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        key = (_backend_settings(self.config), self.backend_factory)
        backend = _LOADED.get(key)
        if backend is None:
            if self.config.backend == "vllm" and multiprocessing.current_process().daemon:
                # A processes-backend worker is daemonic and may not start processes: vLLM's engine core
                # (its own process by default) runs in this one instead, as tests/datashop/test_vllm.py runs it.
                os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            backend = _LOADED[key] = self.backend_factory(self.config)
        chunk: list[dict[str, Any]] = []
        for record in records:
            chunk.append(record)
            if len(chunk) >= 2 * self.config.batch_size:
                yield from self._label(chunk, backend)
                chunk = []
        if chunk:
            yield from self._label(chunk, backend)

    def _label(self, chunk: list[dict[str, Any]], backend: LabelBackend) -> Iterator[dict[str, Any]]:
        model, docs = backend.model_id, [r["doc"] for r in chunk]
        keys = [label_key(self.prompt, self.config, model, str(d[self.id_field]), d[self.text_field]) for d in docs]
        found: dict[str, LabelResult] = {}
        for record, k in zip(chunk, keys, strict=True):
            for candidate in record["cached"]:
                if candidate.get("key") == k:
                    found[k] = LabelResult.from_dict(candidate)
        pending = [r["doc"] for r, k in zip(chunk, keys, strict=True) if k not in found]
        fresh: dict[str, LabelResult] = {}
        if pending:
            run = label_documents(
                pending, self.prompt, self.config, backend=backend, text_field=self.text_field, id_field=self.id_field
            )
            fresh = {r.key: r for r in run.results}
        for record, k in zip(chunk, keys, strict=True):
            result = found.get(k) or fresh[k]
            yield {"i": record["i"], "result": asdict(result), "now": k not in found, "model_id": backend.model_id}


def _shard_count(docs: int, batch_size: int, workers: int, shard_docs: int | None = None) -> int:
    """Enough shards for every worker (when there is a batch for each), none larger than a few batches."""
    if docs == 0:
        return 1
    if shard_docs is not None:
        return max(1, math.ceil(docs / shard_docs))
    by_size = math.ceil(docs / (_DOCS_PER_SHARD_BATCHES * batch_size))
    return max(1, min(docs, max(by_size, min(workers, math.ceil(docs / batch_size)))))


def label_dataset(
    docs: Sequence[dict[str, Any]],
    prompt: PromptConfig,
    config: LabelerConfig,
    *,
    text_field: str = "text",
    id_field: str = "id",
    cached: dict[str, list[dict[str, Any]]] | None = None,
    resources: Any = "auto",
    backend_factory: Callable[[LabelerConfig], LabelBackend] = make_backend,
    name: str = "label",
    execution_config: Any = None,
    shard_docs: int | None = None,
) -> Any:
    """The labeling stage as a lazy `zephyr.Dataset` (inspect its plan with `explain()` or
    `zephyr.engine.plan.plan`): the documents, shortest first (less padding per batch), in shards of a
    few batches, labeled by `LabelShard` with `resources` (default: `label_resources(config)`).

    `cached` maps a document id to cached label candidates (LabelResult dicts); `execution_config` (default:
    the current `execution(...)`) decides the shard count and the workers' threads; `shard_docs` sets the
    documents per shard (the unit of resume) instead.
    """
    from zephyr import Dataset
    from zephyr.engine.context import current_config

    _check_fields(docs, text_field, id_field)
    engine = execution_config or current_config()
    cached = cached or {}
    order = sorted(range(len(docs)), key=lambda i: len(docs[i][text_field]))
    records = [
        {
            "i": i,
            "doc": {id_field: docs[i][id_field], text_field: docs[i][text_field]},
            "cached": cached.get(str(docs[i][id_field]), []),
        }
        for i in order
    ]
    step = LabelShard(
        prompt,
        worker_labeler(config, engine.backend, engine.worker_cpus),
        text_field,
        id_field,
        display_name=name,
        backend_factory=backend_factory,
    )
    shards = _shard_count(len(records), config.batch_size, engine.num_workers, shard_docs)
    request = label_resources(config) if resources == "auto" else resources
    return Dataset.from_list(records, num_shards=shards).map_shard(step, resources=request)


def label_on_engine(
    docs: Iterable[dict[str, Any]],
    prompt: PromptConfig,
    config: LabelerConfig,
    *,
    cache_path: str | Path | None = None,
    text_field: str = "text",
    id_field: str = "id",
    progress: str | None = None,
    resources: Any = "auto",
    backend_factory: Callable[[LabelerConfig], LabelBackend] = make_backend,
    shard_docs: int | None = None,
) -> LabelingRun:
    """`label_documents` as an engine stage on the current `execution(...)`: same results (input order),
    same cache file and key semantics, and the same `LabelingRun` figures (`seconds` is the stage's wall time).

    `progress` names the stage in the live view. `resources` overrides what each labeling worker asks
    for (default `label_resources(config)`); `backend_factory` builds the backend in the worker; `shard_docs`
    sets the documents per shard (default: a few batches, at least one shard per worker).
    """
    docs = list(docs)
    _check_fields(docs, text_field, id_field)
    start = time.perf_counter()
    cache = LabelCache(cache_path) if cache_path is not None else None
    parts = _parts_dir(Path(cache_path)) if cache_path is not None else None
    in_file = cache.load() if cache is not None else {}
    candidates = dict(in_file)
    if parts is not None:
        candidates.update(_read_parts(parts))
    ids = {str(d[id_field]) for d in docs}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for result in candidates.values():
        if result.id in ids:
            by_id.setdefault(result.id, []).append(asdict(result))
    dataset = label_dataset(
        docs,
        prompt,
        config,
        text_field=text_field,
        id_field=id_field,
        cached=by_id,
        resources=resources,
        backend_factory=backend_factory,
        name=progress or "label",
        shard_docs=shard_docs,
    )
    if docs and parts is not None:
        paths = dataset.write_jsonl(str(parts / "part-{shard:05d}-of-{total:05d}.jsonl"))
        rows = [row for path in paths for row in _read_rows(Path(path))]
    else:
        rows = dataset.collect() if docs else []
    seconds = time.perf_counter() - start
    by_index = {row["i"]: row for row in rows}
    if len(by_index) != len(docs):
        missing = sorted(set(range(len(docs))) - set(by_index))[:5]
        raise RuntimeError(
            f"labeling stage returned labels for {len(by_index)} of {len(docs)} documents (missing input "
            f"positions {missing}...); its shard outputs are in {parts}"
        )
    results = tuple(LabelResult.from_dict(by_index[i]["result"]) for i in range(len(docs)))
    if cache is not None:
        new = {r.key: r for r in results if r.key not in in_file}
        if new:
            cache.append(new.values())
    if parts is not None:
        shutil.rmtree(parts, ignore_errors=True)
    labeled_now = sum(1 for row in rows if row["now"])
    return LabelingRun(
        results=results,
        labeled_now=labeled_now,
        from_cache=len(docs) - labeled_now,
        failed=sum(r.score is None for r in results),
        truncated=sum(bool(r.truncated) for r in results),
        seconds=seconds,
        model_id=rows[0]["model_id"] if rows else f"{config.backend}:{config.model}",
        cache_path=str(cache_path) if cache_path is not None else None,
    )


def release_labelers() -> None:
    """Close the labeling backends this process holds (the local backend's, e.g. llama.cpp helper processes);
    workers of the processes and Ray backends keep theirs until the pool ends."""
    while _LOADED:
        _, backend = _LOADED.popitem()
        backend.close()


def _backend_settings(config: LabelerConfig) -> LabelerConfig:
    """`config` without the fields that change how labels are asked for, not the backend (none reads them)."""
    return dataclasses.replace(
        config, mode="logprobs", batch_size=1, max_example_tokens=None, max_new_tokens=1, quality_sample=0
    )


def _check_fields(docs: Sequence[dict[str, Any]], text_field: str, id_field: str) -> None:
    for i, doc in enumerate(docs):
        if id_field not in doc or not isinstance(doc.get(text_field), str):
            raise ValueError(
                f"Document #{i} needs an {id_field!r} and a string {text_field!r} field to be labeled; "
                f"it has fields {sorted(doc)} (id={doc.get(id_field)!r}). Set id_field/text_field in the config."
            )


def _parts_dir(cache_path: Path) -> Path:
    """Where the labeling stage writes its finished shards: `labels.jsonl` -> `labels.parts/`."""
    return cache_path.with_name(cache_path.name.split(".", 1)[0] + ".parts")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _read_parts(parts: Path) -> dict[str, LabelResult]:
    """Labels of the shards a killed run finished (whole files: the engine writes a shard atomically)."""
    found: dict[str, LabelResult] = {}
    for path in sorted(parts.glob("part-*.jsonl")) if parts.is_dir() else ():
        for row in _read_rows(path):
            result = LabelResult.from_dict(row["result"])
            found[result.key] = result
    return found
