"""Scaling ladders: config checks, the points a spec plans, the fits and verdicts on known synthetic losses,
and a ladder of tiny models trained end to end (with --verify, a rerun that trains nothing, an added mixture)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from zephyr.ablate.config import (
    AblationConfig,
    Component,
    MixtureSpec,
    TrainSettings,
    ablation_config_from_dict,
)
from zephyr.ablate.ladder import ladder_points
from zephyr.ablate.ladder_fit import build_ladder_report
from zephyr.ablate.ladder_report import format_ladder_report, ladder_json, write_ladder_report
from zephyr.ablate.ladder_spec import IsoflopSpec, LadderSpec, TransferSpec
from zephyr.ablate.runner import AblationPlan, ResolvedMixture, RunResult, RunSpec
from zephyr.cli import main as zephyr_main
from zephyr.config import ConfigError
from zephyr.train.scaling import ScalingRecipe

RECIPE = ScalingRecipe(seq_len=64, head_dim=8, aspect_ratio=16, base_batch_size=16, mlp_multiple=4, min_steps=5)


# ------------------------------------------------------------------------------------------------ config


def _raw(tmp_path: Path, **ladder) -> dict:
    return {
        "output_dir": str(tmp_path / "out"),
        "baseline": {"mixture": {"web": ["stores/web", 1.0]}},
        "candidates": [{"name": "more_code", "mixture": {"web": ["stores/web", 0.5], "code": ["stores/code", 0.5]}}],
        "eval": {"web": "stores/web/validation"},
        "ladder": {"widths": [16, 24, 32, 40], "target_width": 96, "recipe": {"head_dim": 8}, **ladder},
    }


def test_ladder_config_reads_and_refuses_what_the_recipe_sets(tmp_path: Path) -> None:
    cfg = ablation_config_from_dict(_raw(tmp_path, isoflop={"budgets": [1e11, 1e12], "widths": [16, 24, 32]}))
    assert cfg.ladder is not None and cfg.ladder.widths == (16, 24, 32, 40) and cfg.ladder.target_width == 96
    assert cfg.ladder.recipe.head_dim == 8 and cfg.ladder.isoflop == IsoflopSpec((1e11, 1e12), (16, 24, 32))
    assert cfg.model == {} and cfg.train.tokens is None  # the recipe sets both
    for extra, match in [
        ({"model": {"preset": "tiny"}}, "move model: settings into ladder.recipe"),
        ({"optimizer": {"learning_rate": 1e-3}}, "move optimizer: settings into ladder.recipe"),
        ({"train": {"tokens": 1000}}, r"recipe sets train.\['tokens'\]"),
        ({"matched_exposure": {"web": {"production_epochs": 2}}}, "matched_exposure caps a dataset"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ablation_config_from_dict({**_raw(tmp_path), **extra})
    for ladder, match in [
        ({"widths": [16, 24]}, "3 or more widths"),
        ({"target_width": 32}, "must exceed every ladder width"),
        ({"target_flops": 1e13}, "exactly one of target_width or target_flops"),
        ({"widths": [16, 24, 33]}, "cannot be split into whole heads"),
        ({"law": "joint"}, "add ladder.isoflop"),
        ({"bootstrap": 10}, "at least 100"),
        ({"isoflop": {"budgets": [1e11], "widths": [16, 24]}}, "3 or more distinct widths"),
        ({"recipe": {"head_dim": 8, "tokens_per_parm": 20}}, "unknown key"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ablation_config_from_dict(_raw(tmp_path, **ladder))


def test_points_cost_what_the_recipe_says_and_the_target_is_larger() -> None:
    spec = LadderSpec(
        widths=(16, 20, 24), target_width=48, recipe=RECIPE, isoflop=IsoflopSpec((2e11,), (8, 16, 24, 32, 40))
    )
    recipe = dataclasses.replace(RECIPE, vocab_size=1024)
    points, notes = ladder_points(spec, recipe)
    names = [p.name for p, _ in points]
    assert names[:3] == ["w16", "w20", "w24"] and names[-1] == "target-w48"
    iso = [p for p, _ in points if p.kind == "isoflop"]
    assert {p.budget for p in iso} == {2e11} and all(p.name.startswith("iso2e+11-w") for p in iso)
    assert all(abs(p.flops / 2e11 - 1) < 0.05 for p in iso)  # whole steps: each run within a step of the budget
    for point, run in points:
        assert point.flops == run.flops == run.flops_per_token * run.tokens and point.params == run.params
    if len(iso) < 5:  # too many steps for width 8 or too few for 40 at this budget: said, not silent
        assert any("left out" in n for n in notes)
    with pytest.raises(ConfigError, match="does not cost more than the largest ladder run"):
        ladder_points(dataclasses.replace(spec, isoflop=IsoflopSpec((1e13,), (16, 24, 32))), recipe)


# ------------------------------------------------------------------------------ fits on synthetic losses


def _plan(tmp_path: Path, spec: LadderSpec, mixtures: list[str], seeds: tuple[int, ...]) -> AblationPlan:
    specs = [MixtureSpec(name, {"web": Component("w", 1.0)}) for name in mixtures]
    cfg = AblationConfig(
        output_dir=str(tmp_path),
        baseline=specs[0],
        candidates=tuple(specs[1:]),
        eval={"web": "w/validation"},
        train=TrainSettings(),
        seeds=seeds,
        metric="loss",
        ladder=spec,
    )
    recipe = dataclasses.replace(spec.recipe, vocab_size=1024)
    planned, notes = ladder_points(spec, recipe)
    points = tuple(p for p, _ in planned)
    runs = tuple(
        RunSpec(m, s, str(tmp_path / m / p.name / str(s)), "fp", {}, None, p.name)
        for m in mixtures
        for p in points
        for s in (seeds if p.kind != "target" else seeds[:1])
    )
    resolved = tuple(ResolvedMixture(m.name, m.derivation, {"web": ("w", 1.0)}) for m in specs)
    return AblationPlan(cfg, resolved, runs, "tok", 1024, None, None, tuple(notes), points, recipe)


def _results(plan: AblationPlan, loss, noise: float = 0.0, rng_seed: int = 0) -> list[RunResult]:
    """One result per planned run; ``loss(mixture, point)`` is the truth, times (1 + noise * N(0, 1))."""
    rng = np.random.default_rng(rng_seed)
    points = {p.name: p for p in plan.points}
    out = []
    for r in plan.runs:
        value = loss(r.mixture, points[r.point]) * (1 + noise * rng.standard_normal())
        out.append(
            RunResult(
                r.mixture,
                r.seed,
                "trained",
                1,
                value,
                {"web": {"loss": value, "bpb": None}},
                "",
                None,
                0,
                0,
                "",
                "",
                r.point,
            )
        )
    return out


LAWS = {"good": (2.0, 60.0, 0.2), "bad": (2.3, 60.0, 0.2)}  # E, A, alpha: "good" is lower everywhere


def _compute_loss(laws):
    return lambda mixture, point: laws[mixture][0] + laws[mixture][1] * point.flops ** -laws[mixture][2]


def test_prediction_interval_and_a_decided_ranking(tmp_path: Path) -> None:
    spec = LadderSpec(
        widths=(8, 10, 12, 16, 20), target_width=40, recipe=RECIPE, bootstrap=400, law="compute", axis="flops"
    )
    plan = _plan(tmp_path, spec, ["bad", "good"], (0, 1))
    truth = _compute_loss(LAWS)
    report = build_ladder_report(plan, _results(plan, truth, noise=0.002))
    target = plan.points[-1]
    assert report.extrapolation == pytest.approx(target.flops / max(p.flops for p in plan.points[:-1]))
    assert report.ladder_flops == pytest.approx(2 * 2 * sum(p.flops for p in plan.points[:-1]))  # mixtures x seeds
    assert report.ladder_flops_share == pytest.approx(report.ladder_flops / (2 * target.flops))
    for m in report.mixtures:  # 0.2% noise on runs spanning 10x in compute, 7x extrapolation: within 2%
        expected = truth(m.mixture, target)
        assert abs(m.predicted / expected - 1) < 0.02
        assert m.interval is not None and m.interval[0] < expected < m.interval[1]
        assert m.holdout is not None and abs(m.holdout.error) < 0.01
        assert m.error is not None and abs(m.error) < 0.025  # the target was "trained" (seed 0, same noise)
    assert report.ranking == ("good", "bad") and report.decided and "DECIDED" in report.verdict()
    assert report.ranking_measured == ("good", "bad") and report.ranking_ladder == ("good", "bad")
    text = format_ladder_report(report)
    assert "ranking at the target DECIDED: good < bad" in text and "agrees with the prediction" in text
    json.dumps(ladder_json(report), allow_nan=False)  # strict JSON: what the UI and the benchmark read
    files = write_ladder_report(report, tmp_path / "report")
    assert {Path(f).name for f in files.values()} == {"ladder.json", "ladder.txt", "ladder.png"}


def test_a_ranking_that_flips_past_the_ladder(tmp_path: Path) -> None:
    """ "steep" loses on every ladder run but wins at the target: what one size cannot tell."""
    laws = {"flat": (3.0, 6.3, 0.1), "steep": (2.0, 3391.0, 0.3)}  # they cross near 2e11 FLOPs
    spec = LadderSpec(widths=(12, 14, 16, 18, 20), target_width=48, recipe=RECIPE, bootstrap=300, axis="flops")
    plan = _plan(tmp_path, spec, ["flat", "steep"], (0,))
    truth = _compute_loss(laws)
    assert all(truth("flat", p) < truth("steep", p) for p in plan.points[:-1])
    assert truth("steep", plan.points[-1]) < truth("flat", plan.points[-1])
    report = build_ladder_report(plan, _results(plan, truth))
    assert report.ranking_ladder == ("flat", "steep") and report.ranking == ("steep", "flat")
    assert "the ranking changes between the ladder's largest run and the target" in format_ladder_report(report)


def test_the_law_is_fitted_on_non_embedding_parameters_by_default(tmp_path: Path) -> None:
    """Truth a power law in non-embedding parameters (Kaplan's count, across depths 2 to 4): recovered exactly,
    its compute exponent reported beside it, and its curve drawn along the recipe up to the target."""
    spec = LadderSpec(widths=(12, 16, 20, 24, 28), target_width=64, recipe=RECIPE, bootstrap=200)
    plan = _plan(tmp_path, spec, ["a", "b"], (0,))
    laws = {"a": 40.0, "b": 44.0}

    def truth(mixture, point):
        return laws[mixture] * point.non_embedding_params**-0.1

    report = build_ladder_report(plan, _results(plan, truth))
    target = plan.points[-1]
    assert report.axis == "non_embedding_params" and target.layers == 4 and plan.points[0].layers == 2
    for m in report.mixtures:
        assert m.predicted == pytest.approx(truth(m.mixture, target), rel=1e-6)
        assert not m.law.floor and m.law.alpha == pytest.approx(0.1, rel=1e-6)
        assert m.compute_law is not None and m.compute_law.alpha != pytest.approx(0.1, abs=0.005)
        assert m.curve[-1] == (target.flops, pytest.approx(m.predicted)) and len(m.curve) > 10
        assert all(a[0] < b[0] for a, b in zip(m.curve, m.curve[1:], strict=False))  # rising compute
    assert "L(N_ne) through the ladder widths" in format_ladder_report(report)


def test_the_transfer_check_finds_a_rate_that_does_not_transfer(tmp_path: Path) -> None:
    """x1 best at width 12, x2 best at width 20: the recipe's rule is too steep; the check says so, and its runs
    (baseline only) stay out of the ladder's compute."""
    spec = LadderSpec(
        widths=(12, 14, 16, 20), target_width=48, recipe=RECIPE, bootstrap=0, transfer=TransferSpec(widths=(12, 20))
    )
    plan = _plan(tmp_path, spec, ["bad", "good"], (0,))
    names = [p.name for p in plan.points]
    assert {"lr0.5-w12", "lr2-w12", "lr0.5-w20", "lr2-w20"} <= set(names) and "lr1-w12" not in names
    best = {12: 0.0, 20: 1.0}  # log2 of the best multiplier per width

    def truth(mixture, point):
        base = _compute_loss(LAWS)(mixture, point)
        return base * (1 + 0.01 * (math.log2(point.lr_multiplier) - best.get(point.width, 0.0)) ** 2)

    report = build_ladder_report(plan, _results(plan, truth))
    by_width = {t.width: t for t in report.transfer}
    assert by_width[12].best == 1.0 and by_width[12].holds
    assert (
        by_width[20].best == 2.0 and not by_width[20].holds and by_width[20].recipe_gap == pytest.approx(0.01, rel=0.05)
    )
    assert report.transfer_holds is False and "learning-rate transfer" in format_ladder_report(report)
    transfer_points = [p for p in plan.points if p.kind == "transfer"]
    assert report.transfer_flops == pytest.approx(sum(p.flops for p in transfer_points) * 2)  # _plan: both mixtures
    assert report.ladder_flops == pytest.approx(2 * sum(p.flops for p in plan.points if p.kind == "ladder"))


def test_noise_larger_than_the_gap_is_undecided(tmp_path: Path) -> None:
    laws = {"a": (2.0, 60.0, 0.2), "b": (2.001, 60.0, 0.2)}
    spec = LadderSpec(widths=(12, 14, 16, 18), target_width=48, recipe=RECIPE, bootstrap=300)
    plan = _plan(tmp_path, spec, ["a", "b"], (0, 1, 2))
    report = build_ladder_report(plan, _results(plan, _compute_loss(laws), noise=0.01, rng_seed=5))
    assert not report.decided and "UNDECIDED" in report.verdict()
    (pair,) = report.pairs
    assert pair.low < 0 < pair.high


def test_three_points_and_one_seed_give_no_interval(tmp_path: Path) -> None:
    spec = LadderSpec(widths=(12, 16, 20), target_width=48, recipe=RECIPE, bootstrap=200)
    plan = _plan(tmp_path, spec, ["bad", "good"], (0,))
    report = build_ladder_report(plan, _results(plan, _compute_loss(LAWS)))
    assert all(m.interval is None for m in report.mixtures) and report.bootstrap == 0
    assert any("nothing to resample" in n for n in report.notes) and not report.decided


def test_isoflop_sweep_finds_the_tokens_per_parameter_of_the_data(tmp_path: Path) -> None:
    """On a Chinchilla-shaped surface, the isoflop optima give its compute-optimal D/N, and L(N, D) predicts."""
    e, a, alpha, b, beta = 1.8, 30.0, 0.35, 85.0, 0.35  # equal exponents: optimal D/N = (B/A)^(1/0.35), about 20

    def surface(mixture, point):
        return e + a * point.params**-alpha + b * point.tokens**-beta

    spec = LadderSpec(
        isoflop=IsoflopSpec((1e11, 3e11, 1e12), tuple(range(12, 49, 4))),
        target_flops=1e13,
        recipe=RECIPE,
        bootstrap=200,
    )
    plan = _plan(tmp_path, spec, ["one", "two"], (0,))
    report = build_ladder_report(plan, _results(plan, surface))
    m = report.mixture("one")
    assert m.method == "joint" and m.joint is not None and m.law is None
    assert (m.joint.E, m.joint.alpha, m.joint.beta) == pytest.approx((e, alpha, beta), rel=1e-3)
    target = plan.points[-1]
    assert m.predicted == pytest.approx(surface("one", target), rel=1e-4)
    assert len(m.optima) == 3 and all(o.inside for o in m.optima)
    # The truth's compute-optimal ratio at the target's FLOPs, on the same FLOPs-per-parameter-token scale.
    k = target.flops / (target.params * target.tokens)
    n = np.geomspace(1e3, 1e7, 40001)
    d = 1e13 / (k * n)
    best = int(np.argmin(e + a * n**-alpha + b * d**-beta))
    assert m.tokens_per_param == pytest.approx(d[best] / n[best], rel=0.25)
    assert m.tokens_per_param_interval is not None
    assert m.optima_law is not None and m.params_fit is not None and 0.2 < m.params_fit.exponent < 0.8


# ------------------------------------------------------------------------------------- end to end


def _ladder_yaml(stores, out: Path, candidates: list[dict]) -> dict:
    return {
        "output_dir": str(out),
        "seeds": [0],
        "metric": "loss",
        "baseline": {"name": "prose_heavy", "mixture": {"prose": [stores.prose, 0.75], "code": [stores.code, 0.25]}},
        "candidates": candidates,
        "train": {"eval_batches": 2, "eval_batch_size": 8, "checkpoint_every": 10_000},
        "eval": {"code": stores.code + "/validation", "prose": stores.prose + "/validation"},
        "ladder": {
            "widths": [8, 10, 12, 14],
            "target_width": 28,
            "bootstrap": 200,
            "transfer": {"widths": [8, 14]},
            "recipe": {
                "seq_len": 16,
                "head_dim": 8,
                "base_batch_size": 8,
                "mlp_multiple": 4,
                "tokens_per_param": 2,
                "min_steps": 5,
                "base_lr": 0.01,
                "lr_width_exponent": 0,
                "lr_tokens_exponent": 0,
            },
        },
    }


def test_tiny_ladder_end_to_end(ablation_stores, tmp_path: Path, capsys) -> None:
    """`zephyr ablate --verify` on a ladder of tiny models; again (trains nothing); with one more mixture."""
    out = tmp_path / "ladder"
    code_heavy = {
        "name": "code_heavy",
        "mixture": {"prose": [ablation_stores.prose, 0.25], "code": [ablation_stores.code, 0.75]},
    }
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(_ladder_yaml(ablation_stores, out, [code_heavy])))
    assert zephyr_main(["ablate", str(path), "--verify"]) == 0
    printed = capsys.readouterr()
    assert "Scaling ladder: 2 mixtures x 4 points" in printed.out and "ranking measured at the target" in printed.out
    report = json.loads((out / "ladder.json").read_text())
    assert report["extrapolation"] > 1 and 0 < report["ladder_flops_share"] < 1
    for m in report["mixtures"]:
        assert m["law"]["alpha"] > 0 and m["interval"] is not None and m["measured_mean"] is not None
        assert math.isfinite(m["error"])
    assert (out / "ladder.png").stat().st_size > 10_000
    runs = sorted(p.name.split("-seed")[0] for p in (out / "runs" / "code_heavy").iterdir())
    assert runs == ["target-w28", "w10", "w12", "w14", "w8"]  # the transfer check runs on the baseline only
    base_runs = sorted(p.name.split("-seed")[0] for p in (out / "runs" / "prose_heavy").iterdir())
    assert [r for r in base_runs if r.startswith("lr")] == ["lr0.5-w14", "lr0.5-w8", "lr2-w14", "lr2-w8"]
    assert [t["width"] for t in report["transfer"]] == [8, 14]
    stamps = {str(p): p.stat().st_mtime_ns for p in (out / "runs").rglob("result.json")}

    assert zephyr_main(["ablate", str(path), "--verify"]) == 0  # every run finished: nothing trains
    assert "14 finished, 0 to run" in capsys.readouterr().err
    assert {str(p): p.stat().st_mtime_ns for p in (out / "runs").rglob("result.json")} == stamps

    balanced = {
        "name": "balanced",
        "mixture": {"prose": [ablation_stores.prose, 0.5], "code": [ablation_stores.code, 0.5]},
    }
    path.write_text(yaml.safe_dump(_ladder_yaml(ablation_stores, out, [code_heavy, balanced])))
    assert zephyr_main(["ablate", str(path)]) == 0  # no --verify: the new mixture's target is predicted, not trained
    err = capsys.readouterr().err
    assert "16 runs; 12 finished, 4 to run" in err  # without --verify the targets are not planned
    assert {str(p): p.stat().st_mtime_ns for p in (out / "runs").rglob("result.json") if str(p) in stamps} == stamps
    assert not any(p.name.startswith("target") for p in (out / "runs" / "balanced").iterdir())
    report = json.loads((out / "ladder.json").read_text())
    assert [m["mixture"] for m in report["mixtures"]] == ["prose_heavy", "code_heavy", "balanced"]
    assert report["ranking_measured"] is None  # the new mixture's target was not trained


def test_the_ui_training_page_shows_a_ladder(tmp_path: Path) -> None:
    """`zephyr ui`: the ladder is listed on the training page and /training/ladder draws its fit and verdict."""
    from starlette.testclient import TestClient

    from zephyr.ui import create_app

    spec = LadderSpec(widths=(8, 10, 12, 16, 20), target_width=40, recipe=RECIPE, bootstrap=200)
    plan = _plan(tmp_path / "plan", spec, ["bad", "good"], (0,))
    write_ladder_report(build_ladder_report(plan, _results(plan, _compute_loss(LAWS))), tmp_path / "root" / "lad")
    client = TestClient(create_app(str(tmp_path / "root")))
    assert client.get("/api/training").json()["ladders"] == ["lad"]
    view = client.get("/api/training/ladder?path=lad").json()
    assert view["ranking"] == ["good", "bad"] and set(view["chart"]) == {
        f"{m} {k}" for m in ("bad", "good") for k in ("runs", "fit", "predicted", "measured")
    }
    fit = view["chart"]["good fit"]
    assert fit[-1][0] == pytest.approx(math.log10(plan.points[-1].flops))
    assert fit[-1][1] == pytest.approx(view["mixtures"][1]["predicted"], rel=1e-6)  # the curve ends on the prediction
    page = client.get("/training/ladder?path=lad")
    assert page.status_code == 200
    html = page.text
    assert "<svg" in html and "ranking at the target DECIDED: good &lt; bad" in html and 'id="ladder-mixtures"' in html
    assert "/training/ladder?path=lad" in client.get("/training").text


def test_a_joint_law_over_one_isoflop_budget_is_refused_at_plan_time_before_any_training() -> None:
    """One budget's runs trade size for tokens, so L(N, D) cannot be fitted; that used to surface as a ValueError
    from the report, after every run had trained."""
    recipe = dataclasses.replace(RECIPE, vocab_size=1000)
    one_budget = LadderSpec(
        target_width=96, recipe=recipe, law="joint", isoflop=IsoflopSpec((2e11,), (8, 16, 24, 32, 40))
    )
    with pytest.raises(
        ConfigError, match=r"ladder.law joint: the 5 runs \(iso2e\+11-w8, .*\) .* give ladder.isoflop a second budget"
    ):
        ladder_points(one_budget, recipe)
    auto = dataclasses.replace(one_budget, law="auto")  # no ladder widths: auto fits jointly too
    with pytest.raises(ConfigError, match="ladder.law auto"):
        ladder_points(auto, recipe)
    two_budgets = dataclasses.replace(one_budget, isoflop=IsoflopSpec((2e11, 1e12), (8, 16, 24, 32, 40)))
    points, _ = ladder_points(two_budgets, recipe)
    assert sum(p.kind == "isoflop" for p, _ in points) == 10
