"""recipes/mixture_ablation.py --quick builds its two stores from offline text and reports a verdict each."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from zephyr import execution

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "mixture_ablation.py"


@pytest.mark.slow
def test_quick_recipe_end_to_end(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("mixture_ablation_recipe", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    with execution(backend="local", summary=False):
        assert recipe.main(["--output", str(tmp_path), "--quick"]) == 0
    config = yaml.safe_load((tmp_path / "ablation.yaml").read_text())
    assert config["primary_eval"] == "code" and config["seeds"] == [0, 1]
    report = json.loads((tmp_path / "ablation" / "report.json").read_text())
    assert [v["mixture"] for v in report["verdicts"]] == ["baseline+code75", "baseline+code75-shuffled-code"]
    assert len(report["runs"]) == 6 and {r["status"] for r in report["runs"]} == {"trained"}
    control = report["verdicts"][1]
    assert "worse" in control["per_set"].values()  # 60 steps x 2 seeds: decisive on some eval set only
    assert control["difference"]["seeds"] == [0, 1]
    assert (tmp_path / "ablation" / "report.png").is_file() and (tmp_path / "ablation" / "report.csv").is_file()


def test_ladder_flags_make_a_ladder_config(ablation_stores, tmp_path: Path) -> None:
    """--ladder replaces the one size (model, steps, optimizer) by a ladder with the recipe's shapes and rules."""
    from zephyr.ablate import ablation_config_from_dict

    spec = importlib.util.spec_from_file_location("mixture_ablation_recipe_flags", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    args = recipe.parse_args(
        ["--output", str(tmp_path), "--ladder", "10,12,16,20", "--target-width", "40", "--verify", "--transfer"]
    )
    args.backend = "local"
    raw = recipe.ablation_dict({"prose": ablation_stores.prose, "code": ablation_stores.code}, args)
    assert "model" not in raw and "optimizer" not in raw and "steps" not in raw["train"]
    config = ablation_config_from_dict(raw)
    ladder = config.ladder
    assert ladder is not None and ladder.widths == (10, 12, 16, 20) and ladder.target_width == 40 and ladder.verify
    assert ladder.transfer is not None and ladder.transfer.widths == (10, 20)
    assert ladder.recipe.seq_len == 64 and ladder.recipe.base_batch_size == 16 and ladder.recipe.head_dim == 8
    assert config.seeds == (0,)  # one seed per width unless asked for more
    assert len(config.candidates) == 3  # the sweep of the code share and the negative control, as in one size
