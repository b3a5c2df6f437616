"""recipes/common_crawl.py end to end on the WARC it builds from the real pages in ../shared/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zephyr import Dataset, execution
from zephyr.tokenize import open_store, verify_store


def _docs(step_path: str, sub: str = "docs") -> list[dict]:
    with execution(backend="local"):
        return Dataset.from_files(str(Path(step_path) / sub / "*.jsonl.zst")).collect()


def test_common_crawl_recipe_end_to_end_and_rerun_skips(load_recipe, shared_data, tmp_path, capsys):
    recipe = load_recipe("common_crawl")
    output = tmp_path / "out"
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
        result = recipe.run_recipe(recipe.RecipeConfig(output=str(output), data_dir=str(shared_data)))
    steps = result.steps
    assert list(steps) == ["sample", "extract", "langid", "quality", "pii", "exact_dedup", "fuzzy_dedup", "tokenize"]
    assert not any(step.skipped for step in steps.values())

    # The sample: a gzip-per-record WARC that the reader walks with the planted skips counted.
    sample = steps["sample"].summary
    warc = steps["extract"].summary["counters"]
    assert sample["warc_records"] == warc["warc/records"] > 0
    assert warc["warc/skipped_status"] == sample["planted_non_200"] > 0
    assert warc["warc/skipped_non_html"] == sample["planted_non_html"] > 0
    assert warc.get("warc/malformed", 0) == 0
    assert warc["warc/documents"] == steps["extract"].summary["documents_in"]

    # Documents in/out chain from step to step, and every drop has a recorded reason.
    previous_out = None
    for name in ("extract", "langid", "quality", "pii", "exact_dedup", "fuzzy_dedup", "tokenize"):
        s = steps[name].summary
        assert s["documents_in"] >= s["documents_out"], name
        assert s["documents_in"] - s["documents_out"] == sum(s["dropped"].values()), name
        if previous_out is not None:
            assert s["documents_in"] == previous_out, name
        previous_out = s["documents_out"]
    reasons = {reason for step in steps.values() for reason in step.summary.get("dropped", {})}
    assert {"lang_not_allowed", "exact_duplicate", "fuzzy_duplicate"} <= reasons
    assert any(r.startswith(("gopher_", "c4_", "fineweb_")) for r in reasons), reasons
    assert steps["langid"].summary["languages"]["en"] >= steps["langid"].summary["documents_out"]
    assert "de" in steps["langid"].summary["languages"]  # web-pages is German-heavy

    # Dedup found at least what was planted, and each planted copy shares its original's cluster.
    exact_removed = steps["exact_dedup"].summary["dropped"]["exact_duplicate"]
    fuzzy_removed = steps["fuzzy_dedup"].summary["dropped"]["fuzzy_duplicate"]
    assert exact_removed >= sample["planted_exact_duplicates"] > 0
    assert fuzzy_removed >= sample["planted_near_duplicates"] > 0
    planted = json.loads((Path(steps["sample"].path) / "planted.json").read_text())
    for step, kind in (("exact_dedup", "exact_duplicates"), ("fuzzy_dedup", "near_duplicates")):
        cluster = {doc["url"]: doc["dup_cluster"] for doc in _docs(steps[step].path) if "dup_cluster" in doc}
        for pair in planted[kind]:
            assert cluster[pair["url"]] == cluster[pair["original"]], (step, pair)

    # The final corpus and its token store.
    final = _docs(steps["tokenize"].path, "documents")
    assert len(final) == steps["fuzzy_dedup"].summary["documents_out"]
    assert all(doc["lang"] == "en" and not doc.get("filter_reason") for doc in final)
    assert len({doc["id"] for doc in final}) == len(final)
    report = verify_store(result.store)
    assert report.ok, report.problems
    store = open_store(result.store)
    tokens = steps["tokenize"].summary
    assert store.manifest["documents"] == tokens["tokenized_documents"] == len(final)
    assert store.manifest["tokens"] == tokens["tokens"] > 10_000

    summary = recipe.format_summary(result)
    assert f"exact {exact_removed:,}, fuzzy {fuzzy_removed:,}" in summary
    assert f"tokens: {tokens['tokens']:,}" in summary

    # A rerun through the command-line entry point skips every step and prints the same figures.
    capsys.readouterr()
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
        assert recipe.main(["--output", str(output), "--data-dir", str(shared_data)]) == 0
    printed = capsys.readouterr().out
    step_lines = [line for line in printed.splitlines() if line.split(" ", 1)[0] in steps]
    assert len(step_lines) == len(steps) and all(" skipped " in line for line in step_lines), printed
    assert f"exact {exact_removed:,}, fuzzy {fuzzy_removed:,}" in printed
    assert f"tokens: {tokens['tokens']:,}" in printed


def test_missing_pages_without_input_asks_for_input(load_recipe, tmp_path):
    recipe = load_recipe("common_crawl")
    with pytest.raises(FileNotFoundError, match="--input"):
        recipe.run_recipe(recipe.RecipeConfig(output=str(tmp_path / "out"), data_dir=str(tmp_path / "nowhere")))


def test_remote_input_and_output_through_the_fs_layer(load_recipe, shared_data, tmp_path):
    """WARC input and step outputs on a non-local filesystem (memory://); the token store stays local."""
    import fsspec

    recipe = load_recipe("common_crawl")
    fs = fsspec.filesystem("memory")
    root = f"memory://cc-recipe-{tmp_path.name}"
    try:
        sample_config = recipe.SampleConfig.from_data_dir(shared_data, max_pages=24)
        built = recipe.build_sample_warc(f"{root}/crawl", config=sample_config)
        with pytest.raises(ValueError, match="--store"):
            recipe.run_recipe(recipe.RecipeConfig(input=(f"{root}/crawl/*.warc.gz",), output=f"{root}/out"))
        with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
            result = recipe.run_recipe(
                recipe.RecipeConfig(
                    input=(f"{root}/crawl/*.warc.gz",), output=f"{root}/out", store=str(tmp_path / "store")
                )
            )
        steps = result.steps
        assert "sample" not in steps
        assert steps["extract"].summary["counters"]["warc/records"] == built["warc_records"]
        assert steps["extract"].path.startswith(f"{root}/out/extract-")
        assert fs.glob(f"{root}/out/tokenize-*/documents/*.jsonl.zst")
        assert steps["exact_dedup"].summary["dropped"]["exact_duplicate"] >= built["planted_exact_duplicates"]
        assert verify_store(result.store).ok
        assert result.store.startswith(str(tmp_path / "store"))
    finally:
        fs.rm(root.removeprefix("memory://"), recursive=True)
