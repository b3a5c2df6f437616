"""End to end: real pages -> SmolLM2 labels -> classifiers -> filtered dataset, as a two-stage cascade."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from datashop_corpus import write_corpus

from zephyr import Dataset, execution
from zephyr.datashop.config import (
    ClassifierConfig,
    DatashopConfig,
    FilterConfig,
    LabelerConfig,
    PoolConfig,
    PromptConfig,
    StageConfig,
)
from zephyr.datashop.pipeline import run_datashop

# Fast settings for CPU tests: short examples, the default (llama.cpp) backend.
LABELER = LabelerConfig(batch_size=8, max_example_tokens=64, quality_sample=8)
CHEAP = StageConfig(
    name="cheap",
    prompt=PromptConfig(
        template="Is the following text about computer programming? Answer Yes or No.\n\nText: {example}",
        labels=("No", "Yes"),
        values=(0, 1),
    ),
    labeler=LABELER,
    pool=PoolConfig(size=20, seed=0),
    classifier=ClassifierConfig(kind="fasttext", holdout_fraction=0.25),
    filter=FilterConfig(keep_fraction=0.5),
)
STRONG = StageConfig(
    name="strong",
    prompt=PromptConfig(
        template="How much is the following text about computer programming, from 0 (not at all) to 5 "
        "(entirely)?\n\nText: {example}\n\nAnswer with one digit.",
        answer_prefix="Score: ",
    ),
    labeler=LABELER,
    pool=PoolConfig(size=12, seed=1),
    classifier=ClassifierConfig(kind="embedding", holdout_fraction=0.25),
    filter=FilterConfig(keep_fraction=0.5),
)


def test_cascade_end_to_end_then_cli_resumes_from_cached_labels(
    corpus_docs, tmp_path: Path, scratch: str, capsys
) -> None:
    pytest.importorskip("llama_cpp")
    pattern = write_corpus(corpus_docs, tmp_path / "corpus", shards=2)
    out = tmp_path / "shop"
    config = DatashopConfig(input=pattern, output_dir=str(out), stages=(CHEAP, STRONG), engine_backend="local")
    with execution(scratch=scratch):
        report = run_datashop(config)
    cheap, strong = report.stages

    # stage 1 labeled its pool with the LM and trained fastText
    assert cheap.input_docs == len(corpus_docs) and cheap.pool_size == 20
    assert (
        cheap.labeled_now == 20 and cheap.label_failures == 0 and cheap.label_model == "llamacpp:smollm2-135m-instruct"
    )
    assert sum(cheap.label_histogram.values()) == 20
    # ... measured its labels' quality on a sample (no paraphrase given: that check says it did not run)
    q = cheap.label_quality
    assert q.n == 8 and q.generate_parsed is not None and q.skipped == ("no prompt.paraphrase given",)
    assert (Path(cheap.stage_dir) / "quality" / "generate.jsonl").exists()
    assert set(cheap.vs_majority) == {"macro_f1", "majority_macro_f1", "gain", "beats_majority"}
    assert len(Path(cheap.labels_path).read_text().splitlines()) == 20
    assert cheap.train_size + cheap.holdout_size == 20 and cheap.holdout_size >= 1
    assert (Path(cheap.classifier_dir) / "model.bin").exists()
    # ... scored every document and kept the better half
    scored = Dataset.from_files(list(cheap.scored_files))
    with execution(backend="local", scratch=scratch):
        scored_records = scored.collect()
        kept1 = Dataset.from_files(list(cheap.kept_files)).collect()
    assert len(scored_records) == len(corpus_docs)
    assert all(0.0 <= r["datashop_cheap"] <= 1.0 and r["metadata"] for r in scored_records)
    assert len(kept1) == cheap.kept_docs and 0.5 <= cheap.kept_fraction <= 0.6
    assert all(r["datashop_cheap"] >= cheap.threshold for r in kept1)

    # stage 2 ran on stage 1's survivors only: relabeled with another prompt, embedding classifier
    assert strong.input_docs == cheap.kept_docs and strong.pool_size == 12 and strong.classifier_kind == "embedding"
    with execution(backend="local", scratch=scratch):
        final = Dataset.from_files(list(report.output_files)).collect()
    assert final and len(final) == strong.kept_docs <= cheap.kept_docs
    assert {r["id"] for r in final} <= {r["id"] for r in kept1}
    assert all("datashop_cheap" in r and 0.0 <= r["datashop_strong"] <= 5.0 for r in final)
    saved = json.loads((out / "report.json").read_text())
    assert [s["name"] for s in saved["stages"]] == ["cheap", "strong"] and (out / "strong" / "report.json").exists()
    for s in report.stages:
        assert s.holdout_agreement.n == s.holdout_size and s.holdout_agreement.accuracy is not None
    share = {
        name: sum(r["source"] == "python-reference" for r in recs) / max(1, len(recs))
        for name, recs in (("corpus", corpus_docs), ("stage1", kept1), ("final", final))
    }
    print("\n" + report.summary())
    print("agreement (held out):", {s.name: s.holdout_agreement.to_dict() for s in report.stages})
    print("share of Python reference sections:", share)

    # The CLI on the same output directory: every label comes from the cache (an interrupted run resumes).
    from zephyr.cli import main

    cfg_path = tmp_path / "shop.yaml"
    cfg_path.write_text(
        yaml.safe_dump(
            {
                "input": pattern,
                "output_dir": str(out),
                "engine_backend": "local",
                "stages": [
                    {
                        "name": s.name,
                        "prompt": {
                            "template": s.prompt.template,
                            "labels": list(s.prompt.labels),
                            "values": list(s.prompt.values),
                            "answer_prefix": s.prompt.answer_prefix,
                        },
                        "labeler": {"batch_size": 8, "max_example_tokens": 64, "quality_sample": 8},
                        "pool": {"size": s.pool.size, "seed": s.pool.seed},
                        "classifier": {"kind": s.classifier.kind, "holdout_fraction": 0.25},
                        "filter": {"keep_fraction": 0.5},
                    }
                    for s in (CHEAP, STRONG)
                ],
            }
        )
    )
    capsys.readouterr()
    with execution(scratch=scratch):
        assert main(["datashop", str(cfg_path)]) == 0
    printed = capsys.readouterr().out
    assert "cheap" in printed and "strong" in printed and "final dataset" in printed
    assert "cheap: label quality (n=8)" in printed and "vs majority class" in printed
    rerun = json.loads((out / "report.json").read_text())
    assert [s["labeled_now"] for s in rerun["stages"]] == [0, 0]
    assert rerun["stages"][0]["labels_from_cache"] == 20


def test_bad_input_field_is_reported(tmp_path: Path, scratch: str) -> None:
    pattern = write_corpus([{"id": str(i), "body": "x"} for i in range(4)], tmp_path / "c", shards=1)
    config = DatashopConfig(input=pattern, output_dir=str(tmp_path / "o"), stages=(CHEAP,), engine_backend="local")
    with execution(scratch=scratch), pytest.raises(ValueError, match="string 'text' field"):
        run_datashop(config)


@pytest.mark.slow
def test_bigger_single_stage_run_on_all_pages(shared_data: Path, tmp_path: Path, scratch: str) -> None:
    """~170 real documents, a 96-document pool, both classifier kinds compared on the same labels."""
    from datashop_corpus import page_documents, pydoc_documents

    docs = page_documents(shared_data, 60, 110) + pydoc_documents(40)
    pattern = write_corpus(docs, tmp_path / "corpus", shards=4)
    reports = {}
    for kind in ("fasttext", "embedding"):
        stage = StageConfig(
            name=f"prog_{kind}",
            prompt=CHEAP.prompt,
            labeler=LabelerConfig(batch_size=8, max_example_tokens=256),
            pool=PoolConfig(size=96, seed=0),
            classifier=ClassifierConfig(kind=kind),
            filter=FilterConfig(keep_fraction=0.3),
        )
        config = DatashopConfig(
            input=pattern, output_dir=str(tmp_path / "shop"), stages=(stage,), engine_backend="processes", workers=2
        )
        if kind == "embedding":  # same prompt and model: reuse the labels (the cache key matches)
            (tmp_path / "shop" / stage.name).mkdir(parents=True)
            shutil.copy(reports["fasttext"].labels_path, tmp_path / "shop" / stage.name / "labels.jsonl")
        with execution(scratch=scratch):
            reports[kind] = run_datashop(config).stages[0]
    assert reports["embedding"].labeled_now == 0 and reports["embedding"].labels_from_cache == 96
    for kind, s in reports.items():
        assert s.input_docs == len(docs) and s.pool_size == 96 and s.label_failures == 0
        assert s.holdout_agreement.n == s.holdout_size >= 10
        assert abs(s.kept_fraction - 0.3) < 0.05
        print(f"\n{kind}: LM {s.label_docs_per_s:.2f} docs/s, held-out {s.holdout_agreement.to_dict()}")


def test_engine_backend_follows_the_surrounding_execution(tmp_path):
    """Unset, the engine settings are those of `zephyr run --backend ...` / `execution(...)`; set, they win."""
    import dataclasses

    from zephyr import execution
    from zephyr.datashop.pipeline import _execution

    config = DatashopConfig(input=str(tmp_path / "*.jsonl"), output_dir=str(tmp_path / "o"), stages=(CHEAP,))
    with execution(backend="local", workers=1):
        with _execution(config) as inherited:
            assert (inherited.backend, inherited.workers) == ("local", 1)
        with _execution(dataclasses.replace(config, engine_backend="processes", workers=2)) as explicit:
            assert (explicit.backend, explicit.workers) == ("processes", 2)
