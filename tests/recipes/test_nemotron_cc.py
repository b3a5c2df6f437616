"""recipes/nemotron_cc.py end to end on a small embedded sample: every step, a summary, cached reruns."""

from __future__ import annotations

import json

import pytest

from zephyr import execution


@pytest.mark.timeout(600)
def test_nemotron_recipe_on_small_sample(load_recipe, tmp_path, capsys):
    recipe = load_recipe("nemotron_cc")
    argv = [
        "--output",
        str(tmp_path / "out"),
        "--sample-docs-per-split",
        "80",
        "--train-steps",
        "4",
        "--num-shards",
        "2",
    ]
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
        outputs = recipe.run(recipe.parse_args(argv))
        lines = recipe.summary_lines(outputs)
    assert "Nemotron-CC recipe summary" in lines and any("final loss" in line for line in lines)
    assert max(len(line) for line in lines) <= 80  # an 80-column terminal shows it unwrapped

    normalize, exact, fuzzy = (outputs[k].summary for k in ("normalize", "exact_dedup", "fuzzy_dedup"))
    planted = json.loads((tmp_path / "out" / "sample-80" / "planted.json").read_text())
    assert (
        normalize["documents_in"] == normalize["documents_out"] == 80 * 7 + len(planted["exact"]) + len(planted["near"])
    )
    assert exact["documents_in"] == normalize["documents_out"]
    # every planted exact copy is removed (some sources may themselves be copies: at least most)
    assert exact["duplicates_removed"] >= 0.8 * len(planted["exact"])
    assert fuzzy["documents_in"] == exact["documents_out"] and fuzzy["duplicates_removed"] > 0

    stores = outputs["tokenize"].summary
    assert set(stores) == set(normalize["splits"])
    # every surviving document is tokenized exactly once, into its split's train or validation store
    assert sum(s["documents"] + s["validation_documents"] for s in stores.values()) == fuzzy["documents_out"]
    from zephyr.tokenize import verify_store

    for info in stores.values():
        assert verify_store(info["store"]).ok
    weights = {k: v[1] for k, v in outputs["mixture"].summary["mixture"].items()}
    assert abs(sum(weights.values()) - 1) < 1e-9
    assert max(weights, key=weights.get) == max(stores, key=lambda s: stores[s]["tokens"])
    assert outputs["train"].summary["steps"] == 4

    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
        again = recipe.run(recipe.parse_args(argv))
    assert all(step.skipped for step in again.values())
