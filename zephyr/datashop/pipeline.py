"""`run_datashop(config)`: from a prompt to a filtered dataset, one cascade stage after another.

Each stage, on its input (the corpus, then the previous stage's survivors):
  1. samples an annotation pool (hash of seed and id),
  2. labels it with the LM on the engine, as a stage that asks for what the labeler needs (a GPU for
     vLLM; `zephyr.datashop.label_stage`), cached in `labels.jsonl` so a rerun resumes, and measures the labels'
     quality (probability vs generate mode, paraphrased prompt; `zephyr.datashop.quality`), warning
     plainly when they are too noisy to train on,
  3. trains a classifier on part of the labels and measures agreement on the rest,
  4. scores every input document on the engine (`scored/`, every record plus the score field),
  5. keeps those above a threshold or the best fraction (`kept/`), the next stage's input.
Everything a stage produced stays in `output_dir/<stage>/` with a `report.json`; the run's report is
`output_dir/report.json`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zephyr.datashop.apply import (
    KeepAtLeast,
    KeepFractionError,
    keep_fraction_shortfall,
    score_dataset,
    score_histogram,
    threshold_for_keep_fraction,
)
from zephyr.datashop.classifiers import nearest_bin, train_classifier
from zephyr.datashop.config import DatashopConfig, StageConfig
from zephyr.datashop.label_stage import label_on_engine, release_labelers
from zephyr.datashop.labeling import LabelBackend, LabelingRun, label_documents
from zephyr.datashop.metrics import Agreement, agreement
from zephyr.datashop.quality import LabelQuality, classifier_beats_majority, measure_label_quality
from zephyr.datashop.sample import sample_pool_dataset, split_holdout
from zephyr.text_table import text_table

__all__ = ["StageReport", "DatashopReport", "run_datashop", "run_stage"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageReport:
    """What one stage did, with the paths of everything it kept."""

    name: str
    stage_dir: str
    input_docs: int
    pool_size: int
    labeled_now: int
    labels_from_cache: int
    label_failures: int
    label_truncated: int
    label_seconds: float
    label_docs_per_s: float
    label_model: str
    label_histogram: dict[str, int]
    lm_mean_score: float | None
    label_quality: LabelQuality
    classifier_kind: str
    classifier_dir: str
    train_size: int
    holdout_size: int
    holdout_agreement: Agreement
    train_agreement: Agreement
    vs_majority: dict[str, Any]  # held-out macro-F1 against the majority-class baseline's
    classifier_docs_per_s: float
    threshold: float
    kept_docs: int
    kept_fraction: float
    filter_note: str | None  # why the filter kept more than keep_fraction asked (on_ties: keep), else None
    scored_files: tuple[str, ...]
    kept_files: tuple[str, ...]
    labels_path: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DatashopReport:
    """The run: one report per stage; `output_files` is the final dataset (last stage's kept files)."""

    stages: tuple[StageReport, ...]
    output_dir: str
    seconds: float
    output_files: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_dir": self.output_dir,
            "seconds": self.seconds,
            "output_files": list(self.output_files),
            "stages": [s.to_dict() for s in self.stages],
        }

    def summary(self) -> str:
        """A readable table of the stages."""

        def row(s: StageReport) -> tuple[Any, ...]:
            a = s.holdout_agreement
            labels = (s.name, s.input_docs, s.pool_size, s.label_failures, s.label_docs_per_s)
            holdout = (s.classifier_kind, a.accuracy, a.majority_accuracy, a.macro_f1, a.spearman)
            return labels + holdout + (s.threshold, s.kept_docs, s.kept_fraction)

        head, *lines = text_table(
            "stage<12|in>8|pool>6|fail>5|LM doc/s>9.2f|clf<9|acc>5.2f|maj>5.2f|F1>5.2f|rho>6.3f|thresh>7.3f|kept>8"
            "|frac>6.3f",
            map(row, self.stages),
            sep=" ",
        )
        lines[:0] = [head, "-" * len(head)]
        for s in self.stages:
            if s.filter_note:
                lines.append(
                    f"{s.name}: KEPT {s.kept_docs:,} of {s.input_docs:,} ({s.kept_fraction:.0%}), more than "
                    f"keep_fraction asked, because {s.filter_note} (on_ties: keep)"
                )
            lines.append(f"{s.name}: {s.label_quality.summary()}")
            v = s.vs_majority
            if v.get("gain") is not None:
                lines.append(
                    f"{s.name}: held-out macro-F1 {v['macro_f1']:.2f} vs majority class {v['majority_macro_f1']:.2f}"
                    f" (gain {v['gain']:+.2f}"
                    f"{'' if v['beats_majority'] else ', NOT clearly better than the majority class'})"
                )
        lines.append(f"final dataset: {len(self.output_files)} file(s) under {self.output_dir}  ({self.seconds:.1f} s)")
        return "\n".join(lines)


def _execution(config: DatashopConfig) -> Any:
    from zephyr import execution

    overrides = {"backend": config.engine_backend, "workers": config.workers}
    return execution(**{k: v for k, v in overrides.items() if v is not None})


def _write(dataset: Any, directory: Path, fmt: str) -> list[str]:
    ext = "jsonl.zst" if fmt == "jsonl" else "parquet"
    pattern = str(directory / f"part-{{shard:05d}}-of-{{total:05d}}.{ext}")
    return dataset.write_jsonl(pattern) if fmt == "jsonl" else dataset.write_parquet(pattern)


def run_stage(
    stage: StageConfig,
    inputs: tuple[str, ...],
    config: DatashopConfig,
    stage_dir: Path,
    *,
    backend: LabelBackend | None = None,
) -> StageReport:
    """Run one stage on the files `inputs`; artifacts go to `stage_dir`. The pool is labeled on the engine,
    unless `backend` (a loaded labeler) is given: then in this process, with that model."""
    from zephyr import Dataset

    start = time.perf_counter()
    stage_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("scored", "kept", "classifier"):  # outputs are rebuilt; labels.jsonl (the cache) is kept
        shutil.rmtree(stage_dir / stale, ignore_errors=True)
    corpus = Dataset.from_files(list(inputs))
    lo, hi = stage.prompt.score_range

    # 1-2. annotation pool and LM labels
    with _execution(config):
        pool = sample_pool_dataset(corpus, stage.pool.size, seed=stage.pool.seed, id_field=config.id_field)
    if len(pool) < 2:
        raise ValueError(
            f"Stage {stage.name!r}: its input {list(inputs)} holds {len(pool)} document(s); "
            "a stage needs at least 2 to train and evaluate a classifier"
        )
    labels_path = stage_dir / "labels.jsonl"
    labeling, quality = _label_pool(stage, pool, config, labels_path, backend)
    if quality.noisy:
        log.warning("stage %s: %s", stage.name, quality.advice)
    texts = {str(d[config.id_field]): d[config.text_field] for d in pool}
    scores = labeling.scores()
    if len(scores) < 2:
        errors = sorted({r.error for r in labeling.results if r.error})
        raise RuntimeError(
            f"Stage {stage.name!r}: only {len(scores)} of {len(pool)} pool documents got a usable label "
            f"(errors: {errors}; see {labels_path}). In logprobs mode, add an answer_prefix such as 'Score: ' or use "
            "a larger model; in generate mode, check parse_regex against the generated text."
        )
    assert stage.prompt.values is not None
    label_bins = nearest_bin(list(scores.values()), stage.prompt.values)
    histogram = {label: int(np.sum(label_bins == i)) for i, label in enumerate(stage.prompt.labels)}

    # 3. classifier on the labels, agreement on the held-out part
    train_ids, held_ids = split_holdout(sorted(scores), stage.classifier.holdout_fraction, seed=stage.classifier.seed)
    classifier_dir = stage_dir / "classifier"
    classifier = train_classifier(
        [texts[i] for i in train_ids],
        [scores[i] for i in train_ids],
        stage.classifier,
        classifier_dir,
        bin_values=stage.prompt.values,
    )
    t0 = time.perf_counter()
    held_pred = classifier.predict([texts[i] for i in held_ids])
    train_pred = classifier.predict([texts[i] for i in train_ids])
    clf_seconds = time.perf_counter() - t0
    held_agree = agreement([scores[i] for i in held_ids], held_pred, stage.prompt.values)
    vs_majority = classifier_beats_majority(
        nearest_bin([scores[i] for i in held_ids], stage.prompt.values), nearest_bin(held_pred, stage.prompt.values)
    )
    train_agree = agreement([scores[i] for i in train_ids], train_pred, stage.prompt.values)

    # 4-5. score everything on the engine, then keep the best
    field_name = stage.score_field
    with _execution(config):
        scored_files = _write(
            score_dataset(corpus, str(classifier_dir), text_field=config.text_field, score_field=field_name),
            stage_dir / "scored",
            config.output_format,
        )
        scored = Dataset.from_files(scored_files)
        hist = score_histogram(scored, field_name, lo=lo, hi=hi)
        filter_note = None
        if stage.filter.threshold is not None:
            threshold = float(stage.filter.threshold)
        else:
            assert stage.filter.keep_fraction is not None
            threshold = threshold_for_keep_fraction(hist, stage.filter.keep_fraction)
            filter_note = keep_fraction_shortfall(hist, stage.filter.keep_fraction, threshold)
            if filter_note and stage.filter.on_ties == "fail":
                raise KeepFractionError(_unmet_message(stage, filter_note, quality, vs_majority, stage_dir))
        keep = KeepAtLeast(field_name, threshold, counter_prefix=f"datashop/{stage.name}")
        kept_files = _write(scored.filter(keep), stage_dir / "kept", config.output_format)
        kept_docs = Dataset.from_files(kept_files).select(config.id_field).count() if kept_files else 0
    input_docs = hist.total + hist.missing
    report = StageReport(
        name=stage.name,
        stage_dir=str(stage_dir),
        input_docs=input_docs,
        pool_size=len(pool),
        labeled_now=labeling.labeled_now,
        labels_from_cache=labeling.from_cache,
        label_failures=labeling.failed,
        label_truncated=labeling.truncated,
        label_seconds=labeling.seconds,
        label_docs_per_s=labeling.docs_per_s,
        label_model=labeling.model_id,
        label_histogram=histogram,
        lm_mean_score=float(np.mean(list(scores.values()))),
        label_quality=quality,
        classifier_kind=stage.classifier.kind,
        classifier_dir=str(classifier_dir),
        train_size=len(train_ids),
        holdout_size=len(held_ids),
        holdout_agreement=held_agree,
        train_agreement=train_agree,
        vs_majority=vs_majority,
        classifier_docs_per_s=(len(held_ids) + len(train_ids)) / clf_seconds if clf_seconds > 0 else 0.0,
        threshold=threshold,
        kept_docs=kept_docs,
        kept_fraction=kept_docs / input_docs if input_docs else 0.0,
        filter_note=filter_note,
        scored_files=tuple(scored_files),
        kept_files=tuple(kept_files),
        labels_path=str(labels_path),
        seconds=time.perf_counter() - start,
    )
    _write_atomic(stage_dir / "report.json", json.dumps(report.to_dict(), indent=2, default=str))
    return report


def _unmet_message(
    stage: StageConfig, note: str, quality: LabelQuality, vs_majority: dict[str, Any], stage_dir: Path
) -> str:
    """The error of a keep_fraction that cannot be honoured: what was asked, why not, what to change."""
    causes = []
    if quality.noisy:
        causes.append(f"its LM labels look too noisy ({quality.advice})")
    if vs_majority.get("beats_majority") is False:
        causes.append("its classifier is not clearly better than always predicting the majority label")
    cause = (" Likely cause: " + "; ".join(causes) + ".") if causes else ""
    return (
        f"Datashop stage {stage.name!r}: filter keep_fraction={stage.filter.keep_fraction} cannot be honoured: "
        f"{note}.{cause} Fixes: a larger annotation pool (pool.size), a prompt or labeler the LM follows, or a "
        f"threshold instead of keep_fraction; or set `on_ties: keep` in this stage's filter to keep the tied "
        f"documents (the summary then says so). Labels and scores are kept in {stage_dir} for the rerun."
    )


def _label_pool(
    stage: StageConfig,
    pool: list[dict[str, Any]],
    config: DatashopConfig,
    labels_path: Path,
    backend: LabelBackend | None,
) -> tuple[LabelingRun, LabelQuality]:
    """Label the pool and measure the labels' quality: on the engine (a stage asking for what the labeler
    needs, e.g. a GPU for vLLM: `zephyr.datashop.label_stage`), or in this process with `backend` when the
    caller passes a loaded one."""
    fields = {"text_field": config.text_field, "id_field": config.id_field}

    def label_and_measure(label: Callable[..., LabelingRun]) -> tuple[LabelingRun, LabelQuality]:
        labeling = label(
            pool, stage.prompt, stage.labeler, cache_path=labels_path, progress=f"datashop {stage.name} label", **fields
        )
        quality = measure_label_quality(
            pool,
            labeling.results,
            stage.prompt,
            stage.labeler,
            backend,
            cache_path=labels_path.parent / "quality",
            label=label,
            **fields,
        )
        return labeling, quality

    if backend is not None:
        return label_and_measure(functools.partial(label_documents, backend=backend))
    with _execution(config):
        try:
            return label_and_measure(label_on_engine)
        finally:
            release_labelers()  # the local backend's model and helper processes, loaded in this process


def run_datashop(config: DatashopConfig) -> DatashopReport:
    """Run every stage of `config` in order (a cascade: each stage reads the survivors of the last)."""
    start = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    reports: list[StageReport] = []
    inputs = config.input
    for stage in config.stages:
        report = run_stage(stage, inputs, config, out / stage.name)
        reports.append(report)
        log.info("stage %s: kept %d of %d documents", stage.name, report.kept_docs, report.input_docs)
        if (not report.kept_files or report.kept_docs < 2) and stage is not config.stages[-1]:
            raise RuntimeError(
                f"Stage {stage.name!r} kept {report.kept_docs} document(s), too few for the next stage "
                f"({config.stages[config.stages.index(stage) + 1].name!r}). "
                "Lower its threshold or raise keep_fraction."
            )
        inputs = report.kept_files
    result = DatashopReport(
        stages=tuple(reports),
        output_dir=str(out),
        seconds=time.perf_counter() - start,
        output_files=reports[-1].kept_files if reports else (),
    )
    _write_atomic(out / "report.json", json.dumps(result.to_dict(), indent=2, default=str))
    return result


def _write_atomic(path: Path, text: str) -> None:
    """Replace `path` only by a complete new file (a temporary name, then a rename): a run killed while
    writing leaves the previous report, never a truncated one."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    tmp.write_text(text)
    os.replace(tmp, path)
