"""Datashop: LM labeling docs/s per backend, score agreement, label quality, classifiers, and the recipe's result.

    .venv/bin/python benchmarks/datashop.py [--quick]

Labeling (SmolLM2-135M-Instruct, packaged Q4_1 GGUF, CPU) on real pages (../shared/data when present)
and Python reference sections, every backend on the same documents with the same prompt (the default
recipe's, recipes/datashop_edu.py) and each document cut to the same first N tokens (the recipe's
default, 128; --max-example-tokens). Wall docs/s depends on what else runs on the cores, so docs per
CPU-second (the backend's process and its helper processes) is printed beside it: about what one idle
core delivers, so twice that is the 2-core figure on an idle machine:
  - ours: `llamacpp`, llama.cpp on the GGUF, expected score from next-token probabilities;
  - peer: `transformers` in process (the previous default), the same scoring; Spearman between the two;
  - label quality of ours (probability vs generate mode, paraphrased prompt; zephyr.datashop.quality);
  - full run only: `transformers` generate + parse, the `openai` backend against Zephyr's own
    OpenAI-compatible server on 127.0.0.1, and `vllm` in process when vLLM is importable (.venv-vllm).
Classifiers (trained on the labels) scoring a corpus of real documents replicated with fresh ids:
  - ours: `map_batches` on the engine (processes backend), model loaded once per worker;
  - peer: a plain single-process loop calling the same model.
The default recipe end to end (its offline corpus, default settings; a smaller pool with --quick): its
classifier's held-out macro-F1 against the majority-class baseline.
Beside the figures it prints what they ran on, since labeling speed follows the machine and the build (the
same Makefile build labeled ~6 docs per CPU-second on an AMD EPYC core, 2.2 on an Intel Xeon with AMX): the
CPU (model, logical CPUs, threads per core), llama-cpp-python's version and the CMAKE_ARGS `make install`
recorded, llama.cpp's system info, the weights file and type, processes x threads, OpenMP settings and the
document cap. The last line is one JSON object with the figures and all of that.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(REPO / "recipes"))


def recipe_module():
    import datashop_edu

    return datashop_edu


def documents(n: int) -> list[dict]:
    """Real pages (when ../shared/data exists) interleaved with Python reference sections."""
    from pydoc_data.topics import topics

    pydoc = [
        {"id": f"pydoc-{k}", "text": v, "source": "python-reference"} for k, v in sorted(topics.items()) if len(v) > 600
    ]
    pages = []
    try:
        import resiliparse  # noqa: F401 - absent in .venv-vllm: Python reference sections only
    except ImportError:
        return pydoc[:n]
    if SHARED.is_dir():
        from resiliparse.extract.html2text import extract_plain_text

        for p in sorted((SHARED / "aeb-dev" / "html").glob("*.html.gz")) + sorted(
            (SHARED / "web-pages").glob("*.html.gz")
        ):
            text = extract_plain_text(gzip.decompress(p.read_bytes()).decode("utf-8", "replace"), main_content=True)
            if len(text) > 400:
                pages.append({"id": f"page-{p.name[:40]}", "text": text, "source": p.parent.name})
    out = []
    for i in range(max(len(pydoc), len(pages))):
        for group in (pages, pydoc):
            if i < len(group):
                out.append(group[i])
    return out[:n]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live child processes (backend helpers)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def cpu_description() -> dict:
    """The CPU the figures come from: labeling runs at ~6 docs per CPU-second on one AMD EPYC (Zen 5) core
    and ~2.2 on the Intel Xeon (AMX) machine of issue #31, with the same build flags: name it beside them."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    per_core = None
    with contextlib.suppress(OSError, ValueError):
        # "0-1" or "0,2": logical CPUs sharing cpu0's core (2 = SMT, two labeling processes then share one core)
        siblings = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").read_text().strip()
        per_core = sum(int(b or a) - int(a) + 1 for a, _, b in (part.partition("-") for part in siblings.split(",")))
    return {"model": model, "logical_cpus": os.cpu_count(), "threads_per_core": per_core}


def llama_build_flags() -> str:
    """The CMAKE_ARGS llama-cpp-python was compiled with, as `make install` records them beside the install."""
    import llama_cpp

    for folder in (Path(llama_cpp.__file__).resolve().parents[1], Path(sys.prefix)):
        recorded = folder / "llama-cpp-cmake-args.txt"
        if recorded.is_file():
            return recorded.read_text().strip()
    return "not recorded (llama-cpp-python was not installed by `make install`)"


def label_bench(docs: list[dict], max_example_tokens: int, model: str, full: bool) -> tuple[dict, dict]:
    from zephyr.datashop.config import LabelerConfig
    from zephyr.datashop.labeling import label_documents, make_backend
    from zephyr.datashop.metrics import spearman
    from zephyr.datashop.quality import measure_label_quality

    recipe = recipe_module()
    prompt = recipe.RecipeConfig().prompt_config()
    base = dict(batch_size=8, max_example_tokens=max_example_tokens, model=model)
    rows, runs = {}, {}

    def record(name: str, run, cpu_s: float | None = None) -> None:
        runs[name] = run
        rows[name] = {
            "docs_s": run.docs_per_s,
            "failed": run.failed,
            "n": len(run.results),
            "docs_per_cpu_s": len(run.results) / cpu_s if cpu_s else None,
        }

    configs = {
        "llamacpp": LabelerConfig(backend="llamacpp", **base),
        "transformers": LabelerConfig(backend="transformers", **base),
    }
    backends = {}
    for name, config in configs.items():
        backends[name] = make_backend(config)
        # The first call pays one-off allocation costs; two prompts, so that a backend labeling in helper
        # processes (llamacpp: one per core) has them started and their model loaded before the timing.
        backends[name].label_probs(["warm-up", "and a second warm-up prompt"], prompt.labels)
        # CPU seconds (this process and its helpers) beside wall seconds: on cores shared with other jobs,
        # docs per CPU-second is what the backend costs, and about what one idle core delivers per second.
        cpu = cpu_seconds()
        run = label_documents(docs, prompt, config, backend=backends[name])
        record(f"{name}_logprobs", run, cpu_seconds() - cpu)
    ours, peer = runs["llamacpp_logprobs"].results, runs["transformers_logprobs"].results
    both = [(x.score, y.score) for x, y in zip(ours, peer, strict=False) if x.score is not None and y.score is not None]
    extra = {
        "backends_spearman": spearman([x for x, _ in both], [y for _, y in both]) if len(both) > 2 else None,
        "backends_max_abs_diff": max(abs(x - y) for x, y in both) if both else None,
        "threads": {name: getattr(b, "threads", None) for name, b in backends.items()},
        "llamacpp": {**backends["llamacpp"].describe(), "build_flags": llama_build_flags()},
    }
    t0 = time.perf_counter()
    quality = measure_label_quality(
        docs,
        runs["llamacpp_logprobs"].results,
        prompt,
        dataclasses.replace(configs["llamacpp"], quality_sample=len(docs)),
        backends["llamacpp"],
    )
    extra["quality"], extra["quality_seconds"] = quality, time.perf_counter() - t0
    if full:
        record(
            "transformers_generate",
            label_documents(
                docs,
                prompt,
                dataclasses.replace(configs["transformers"], mode="generate", max_new_tokens=4),
                backend=backends["transformers"],
            ),
        )
        from zephyr.datashop.server import start_server

        with start_server(model) as server:
            record(
                "openai_http_logprobs",
                label_documents(docs, prompt, LabelerConfig(backend="openai", url=server.url, tokenizer=model, **base)),
            )
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
    return rows, {"runs": runs, **extra}


def recipe_bench(pool_size: int, tmp: Path, output: str | None) -> dict:
    """The default recipe end to end on its offline corpus; its classifier's held-out figures.

    `output` (--recipe-output) keeps the recipe's steps, so a second benchmark run reuses its labels."""
    from zephyr import execution

    recipe = recipe_module()
    config, _ = recipe.parse_args(["--output", output or str(tmp / "recipe"), "--pool-size", str(pool_size)])
    with execution(backend="processes", workers=2, scratch=str(tmp / "recipe-scratch"), summary=False, progress=False):
        result = recipe.run_recipe(config)
    label, clf, flt = (result.steps[k].summary for k in ("label", "classifier", "filter"))
    print("\n" + recipe.format_summary(result))
    return {
        "pool": label["documents"],
        "label_docs_s": label["docs_per_s"],
        "quality": label["quality"],
        "holdout_n": clf["holdout_size"],
        "holdout_accuracy": clf["holdout"]["accuracy"],
        "majority_accuracy": clf["holdout"]["majority_accuracy"],
        "holdout_spearman": clf["holdout"]["spearman"],
        **clf["vs_majority"],
        "kept": flt["documents_out"],
        "documents": flt["documents_in"],
        "kept_by_source": {k: [v["kept"], v["documents"]] for k, v in flt["sources"].items()},
        "seconds": result.seconds,
    }


def classifier_bench(
    docs: list[dict], scores: dict[str, float], n_fasttext: int, n_embedding: int, workers: int
) -> dict:
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
            train_classifier(
                [d["text"] for d in labeled],
                [scores[d["id"]] for d in labeled],
                ClassifierConfig(kind=kind),
                clf_dir,
                bin_values=(0, 1, 2, 3, 4, 5),
            )
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
            t0, cpu = time.perf_counter(), time.process_time()
            for start in range(0, n, 256):
                clf.predict([r["text"] for r in corpus[start : start + 256]])
            loop_s, loop_cpu = time.perf_counter() - t0, time.process_time() - cpu
            results[kind] = {
                "n": n,
                "engine_docs_s": n / engine_s,
                "loop_docs_s": n / loop_s,
                "loop_docs_per_cpu_s": n / loop_cpu if loop_cpu > 0 else None,
            }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (24 labeled docs, 2,000 docs per classifier)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="GGUF alias or file (default: packaged SmolLM2)"
    )
    parser.add_argument("--label-only", action="store_true", help="skip the classifier and recipe parts")
    parser.add_argument(
        "--max-example-tokens",
        type=int,
        default=None,
        help="each document is cut to this many tokens in the prompt (default: the recipe's default)",
    )
    parser.add_argument(
        "--recipe-output",
        default=None,
        help="keep the recipe's output here (a rerun skips its finished steps; default: a temp dir)",
    )
    args = parser.parse_args()
    n_label = 24 if args.quick else 64
    max_example_tokens = args.max_example_tokens or recipe_module().RecipeConfig().max_example_tokens
    docs = documents(200)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    label_rows, extra = label_bench(docs[:n_label], max_example_tokens, args.model, full=not args.quick)
    scores = extra["runs"]["llamacpp_logprobs"].scores()
    clf, recipe = {}, {}
    if not args.label_only:
        # The embedding classifier runs ~140 docs/s on 2 cores, and its engine figure includes starting the
        # workers and loading MiniLM in each (~5-10 s): 2,000 docs (quick) keep that start-up a minor share.
        clf = classifier_bench(docs, scores, 2000 if args.quick else 20000, 2000 if args.quick else 8000, args.workers)
        with tempfile.TemporaryDirectory(prefix="zephyr-bench-recipe-") as tmp:
            recipe = recipe_bench(256, Path(tmp), args.recipe_output)
    load_after = os.getloadavg()

    print(
        f"\nDatashop benchmark ({'quick' if args.quick else 'full'}): {n_label} docs labeled, example <= "
        f"{max_example_tokens} tokens, SmolLM2-135M-Instruct on CPU, threads {extra['threads']}; "
        f"load avg (1/5/15 min) {'/'.join(f'{x:.1f}' for x in load_before)} -> "
        f"{'/'.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} cores"
    )
    cpu, llama = cpu_description(), extra["llamacpp"]
    print(
        f"CPU: {cpu['model']}, {cpu['logical_cpus']} logical CPUs, {cpu['threads_per_core'] or '?'} per core; "
        f"llama-cpp-python {llama['llama_cpp_python']}, built with: {llama['build_flags']}\n"
        f"llama.cpp system info: {llama['system_info']}\n"
        f"llama.cpp weights: {llama['weights']} ({llama['model']}), {llama['processes']} process(es) x "
        f"{llama['threads']} thread(s), OpenMP settings {llama['omp'] or 'unset'}; documents cut to "
        f"{max_example_tokens} tokens; no label cache (every document labeled)"
    )
    print(f"{'labeling backend':<28} {'docs/s':>8} {'docs/CPU-s':>11} {'failed':>7}")
    tags = {
        "llamacpp_logprobs": "  (ours)",
        "transformers_logprobs": "  (peer: previous default)",
        "transformers_generate": "  (generate + parse)",
    }
    for name, row in label_rows.items():
        per_cpu = "-" if row["docs_per_cpu_s"] is None else f"{row['docs_per_cpu_s']:.2f}"
        print(f"{name:<28} {row['docs_s']:>8.2f} {per_cpu:>11} {row['failed']:>4}/{row['n']}{tags.get(name, '')}")
    ratio = label_rows["llamacpp_logprobs"]["docs_s"] / max(1e-9, label_rows["transformers_logprobs"]["docs_s"])
    rho = extra["backends_spearman"]
    print(
        f"llamacpp vs transformers: {ratio:.2f}x the docs/s; score Spearman "
        f"{'-' if rho is None else f'{rho:.4f}'}, "
        f"largest score difference {extra['backends_max_abs_diff']:.4f} (0-5 scale)"
    )
    print(extra["quality"].summary())
    if clf:
        print(
            f"\n{'classifier':<12} {'docs':>7} {'engine docs/s (ours)':>21} {'loop docs/s (peer)':>19} "
            f"{'loop docs/CPU-s':>16}"
        )
        for kind, row in clf.items():
            print(
                f"{kind:<12} {row['n']:>7} {row['engine_docs_s']:>21.0f} {row['loop_docs_s']:>19.0f} "
                f"{row['loop_docs_per_cpu_s'] or 0:>16.0f}"
            )
    if recipe:
        print(
            f"\nrecipe classifier, held out (n={recipe['holdout_n']}): macro-F1 {recipe['macro_f1']:.3f} vs majority "
            f"class {recipe['majority_macro_f1']:.3f} (gain {recipe['gain']:+.3f}; "
            f"accuracy {recipe['holdout_accuracy']:.3f} "
            f"vs {recipe['majority_accuracy']:.3f}); kept {recipe['kept']}/{recipe['documents']}"
        )
    q = extra["quality"]
    figures = {
        "bench": "datashop",
        "quick": args.quick,
        "label_docs_s": {k: round(v["docs_s"], 3) for k, v in label_rows.items()},
        "label_docs_per_cpu_s": {
            k: round(v["docs_per_cpu_s"], 3) for k, v in label_rows.items() if v["docs_per_cpu_s"]
        },
        "label_failed": {k: v["failed"] for k, v in label_rows.items()},
        "llamacpp_vs_transformers_ratio": round(ratio, 3),
        "backends_spearman": None if rho is None else round(rho, 5),
        "backends_max_abs_diff": round(extra["backends_max_abs_diff"], 5),
        "label_quality": {
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in q.to_dict().items()
            if k
            in (
                "n",
                "modes_spearman",
                "modes_label_agreement",
                "generate_parsed",
                "paraphrase_spearman",
                "paraphrase_label_agreement",
                "score_spread",
                "noisy",
            )
        },
        "classifier_engine_docs_s": {k: round(v["engine_docs_s"], 1) for k, v in clf.items()},
        "classifier_loop_docs_s": {k: round(v["loop_docs_s"], 1) for k, v in clf.items()},
        "classifier_loop_docs_per_cpu_s": {k: round(v["loop_docs_per_cpu_s"] or 0, 1) for k, v in clf.items()},
        "recipe": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in recipe.items() if k != "quality"},
        "threads": extra["threads"],
        "max_example_tokens": max_example_tokens,
        "cpu": cpu,
        "llamacpp": llama,
        "load_avg": [[round(x, 2) for x in load_before], [round(x, 2) for x in load_after]],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
