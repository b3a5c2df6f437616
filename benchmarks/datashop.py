"""Datashop speed: LM-labeled docs/s per backend, and classifier docs/s over a corpus.

    .venv/bin/python benchmarks/datashop.py [--quick]

Labeling (SmolLM2-135M-Instruct, packaged GGUF, CPU) on real pages (../shared/data when present)
and Python reference sections, each backend on the same documents and prompt:
  - ours: `transformers` in process, expected score from next-token probabilities (one forward pass);
  - peer: the usual recipe (FineWeb-Edu's annotation style): generate the answer greedily, parse it;
  - `openai` backend against Zephyr's OpenAI-compatible server on 127.0.0.1 (HTTP + JSON overhead);
  - `vllm` in process, only when vLLM is importable (it lives in .venv-vllm).
Classifiers (trained on the labels) scoring a corpus of real documents replicated with fresh ids:
  - ours: `map_batches` on the engine (processes backend), model loaded once per worker;
  - peer: a plain single-process loop calling the same model.
The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPT_TEMPLATE = ("Below is an extract from a web page. Evaluate whether it has high educational value and could "
                   "be useful in a school or university course, on a scale from 0 (no educational value) to 5 "
                   "(excellent teaching material).\n\nExtract: {example}\n\nAnswer with a single digit from 0 to 5.")


def documents(n: int) -> list[dict]:
    """Real pages (when ../shared/data exists) interleaved with Python reference sections."""
    from pydoc_data.topics import topics

    pydoc = [{"id": f"pydoc-{k}", "text": v, "source": "python-reference"} for k, v in sorted(topics.items()) if len(v) > 600]
    pages = []
    try:
        import resiliparse  # noqa: F401 - absent in .venv-vllm: Python reference sections only
    except ImportError:
        return pydoc[:n]
    if SHARED.is_dir():
        from resiliparse.extract.html2text import extract_plain_text

        for p in sorted((SHARED / "aeb-dev" / "html").glob("*.html.gz")) + sorted((SHARED / "web-pages").glob("*.html.gz")):
            text = extract_plain_text(gzip.decompress(p.read_bytes()).decode("utf-8", "replace"), main_content=True)
            if len(text) > 400:
                pages.append({"id": f"page-{p.name[:40]}", "text": text, "source": p.parent.name})
    out = []
    for i in range(max(len(pydoc), len(pages))):
        for group in (pages, pydoc):
            if i < len(group):
                out.append(group[i])
    return out[:n]


def label_bench(docs: list[dict], max_example_tokens: int, model: str) -> tuple[dict, dict]:
    from zephyr.datashop.config import LabelerConfig, PromptConfig
    from zephyr.datashop.labeling import label_documents, make_backend
    from zephyr.datashop.metrics import spearman
    from zephyr.datashop.server import start_server

    prompt = PromptConfig(template=PROMPT_TEMPLATE, answer_prefix="Educational score: ")
    base = dict(batch_size=8, max_example_tokens=max_example_tokens, model=model)
    local = make_backend(LabelerConfig(**base))
    local.label_probs(["warm-up"], prompt.labels)  # first call pays one-off allocation costs
    rows, runs = {}, {}

    def record(name: str, run) -> None:
        runs[name] = run
        rows[name] = {"docs_s": run.docs_per_s, "failed": run.failed, "n": len(run.results)}

    record("transformers_logprobs", label_documents(docs, prompt, LabelerConfig(**base), backend=local))
    record("transformers_generate", label_documents(docs, prompt, LabelerConfig(mode="generate", max_new_tokens=8, **base),
                                                    backend=local))
    with start_server(model) as server:
        record("openai_http_logprobs", label_documents(docs, prompt, LabelerConfig(
            backend="openai", url=server.url, tokenizer=model, **base)))
    try:
        import vllm  # noqa: F401

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from zephyr.datashop.backend_vllm import VLLMBackend

        vllm_config = LabelerConfig(backend="vllm", max_context_tokens=512, **base)
        engine = VLLMBackend(vllm_config)
        engine.label_probs(["warm-up"], prompt.labels)
        record("vllm_logprobs", label_documents(docs, prompt, vllm_config, backend=engine))
    except ImportError:
        pass
    a, b = runs["transformers_logprobs"].results, runs["transformers_generate"].results
    both = [(x.score, y.score) for x, y in zip(a, b) if x.score is not None and y.score is not None]
    agree = {"modes_spearman": spearman([x for x, _ in both], [y for _, y in both]) if len(both) > 2 else None,
             "threads": getattr(local, "threads", None)}
    return rows, {"runs": runs, **agree}


def classifier_bench(docs: list[dict], scores: dict[str, float], n_fasttext: int, n_embedding: int, workers: int) -> dict:
    import zstandard

    from zephyr import Dataset, execution
    from zephyr.datashop.apply import score_dataset
    from zephyr.datashop.classifiers import load_classifier, train_classifier
    from zephyr.datashop.config import ClassifierConfig

    labeled = [d for d in docs if d["id"] in scores]
    results = {}
    with tempfile.TemporaryDirectory(prefix="zephyr-bench-datashop-") as tmp:
        tmp_path = Path(tmp)
        for kind, n in (("fasttext", n_fasttext), ("embedding", n_embedding)):
            clf_dir = tmp_path / f"clf-{kind}"
            train_classifier([d["text"] for d in labeled], [scores[d["id"]] for d in labeled], ClassifierConfig(kind=kind),
                             clf_dir, bin_values=(0, 1, 2, 3, 4, 5))
            corpus = [{"id": f"{i}-{docs[i % len(docs)]['id']}", "text": docs[i % len(docs)]["text"]} for i in range(n)]
            shards = 4
            corpus_dir = tmp_path / f"corpus-{kind}"
            corpus_dir.mkdir()
            for s in range(shards):
                data = "".join(json.dumps(r) + "\n" for r in corpus[s::shards]).encode()
                (corpus_dir / f"part-{s}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
            t0 = time.perf_counter()
            with execution(backend="processes", workers=workers, scratch=str(tmp_path / "scratch"), summary=False):
                ds = score_dataset(Dataset.from_files(str(corpus_dir / "*.jsonl.zst")), str(clf_dir), score_field="s")
                n_scored = ds.select("s").count()
            engine_s = time.perf_counter() - t0
            assert n_scored == n, (n_scored, n)
            clf = load_classifier(clf_dir)
            t0 = time.perf_counter()
            for start in range(0, n, 256):
                clf.predict([r["text"] for r in corpus[start : start + 256]])
            loop_s = time.perf_counter() - t0
            results[kind] = {"n": n, "engine_docs_s": n / engine_s, "loop_docs_s": n / loop_s}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (~16 labeled docs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default=os.environ.get("ZEPHYR_VLLM_MODEL", "smollm2-135m-instruct"),
                        help="local model dir or alias (default: packaged SmolLM2; $ZEPHYR_VLLM_MODEL in .venv-vllm)")
    parser.add_argument("--label-only", action="store_true",
                        help="skip the classifier part (e.g. in .venv-vllm, which lacks fastText/sentence-transformers)")
    args = parser.parse_args()
    n_label = 16 if args.quick else 48
    max_example_tokens = 128 if args.quick else 256
    docs = documents(200)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    label_rows, extra = label_bench(docs[:n_label], max_example_tokens, args.model)
    scores = extra["runs"]["transformers_logprobs"].scores()
    clf = {} if args.label_only else classifier_bench(docs, scores, 2000 if args.quick else 20000,
                                                      200 if args.quick else 1000, args.workers)
    load_after = os.getloadavg()[0]

    print(f"\nDatashop benchmark ({'quick' if args.quick else 'full'}): {n_label} docs labeled, example <= "
          f"{max_example_tokens} tokens, SmolLM2-135M-Instruct on CPU, torch threads {extra['threads']}; "
          f"load avg {load_before:.1f} -> {load_after:.1f} on {os.cpu_count()} cores")
    print(f"{'labeling backend':<28} {'docs/s':>8} {'failed':>7}")
    for name, row in label_rows.items():
        tag = "  (ours)" if name == "transformers_logprobs" else "  (peer: generate + parse)" if name == "transformers_generate" else ""
        print(f"{name:<28} {row['docs_s']:>8.2f} {row['failed']:>4}/{row['n']}{tag}")
    ratio = label_rows["transformers_logprobs"]["docs_s"] / max(1e-9, label_rows["transformers_generate"]["docs_s"])
    print(f"logprobs vs generate: {ratio:.2f}x faster; Spearman between the two modes' scores: "
          f"{extra['modes_spearman'] if extra['modes_spearman'] is None else round(extra['modes_spearman'], 3)}")
    if clf:
        print(f"\n{'classifier':<12} {'docs':>7} {'engine docs/s (ours)':>21} {'loop docs/s (peer)':>19}")
        for kind, row in clf.items():
            print(f"{kind:<12} {row['n']:>7} {row['engine_docs_s']:>21.0f} {row['loop_docs_s']:>19.0f}")
    figures = {
        "bench": "datashop",
        "quick": args.quick,
        "label_docs_s": {k: round(v["docs_s"], 3) for k, v in label_rows.items()},
        "label_failed": {k: v["failed"] for k, v in label_rows.items()},
        "ours_vs_generate_ratio": round(ratio, 3),
        "modes_spearman": extra["modes_spearman"],
        "classifier_engine_docs_s": {k: round(v["engine_docs_s"], 1) for k, v in clf.items()},
        "classifier_loop_docs_s": {k: round(v["loop_docs_s"], 1) for k, v in clf.items()},
        "torch_threads": extra["threads"],
        "load_avg": [round(load_before, 2), round(load_after, 2)],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
