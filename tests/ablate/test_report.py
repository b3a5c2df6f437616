"""The report from known per-seed figures: rows, decision average, verdict lines, files, curves after a resume."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from zephyr.ablate.config import AblationConfig, Component, MixtureSpec, TrainSettings
from zephyr.ablate.report import build_report, format_report, write_report
from zephyr.ablate.runner import AblationPlan, ResolvedMixture, RunResult, read_eval_curves

LN2 = math.log(2)


def _plan(tmp_path: Path, *, primary: tuple[str, ...] | None) -> AblationPlan:
    base = MixtureSpec("baseline", {"web": Component("w", 1.0)})
    cand = MixtureSpec("plus_code", {"web": Component("w", 0.5), "code": Component("c", 0.5)}, "baseline + code at 50%")
    ctrl = MixtureSpec("control", {"web": Component("w", 1.0, shuffled=True)}, "baseline with web token-shuffled")
    cfg = AblationConfig(
        output_dir=str(tmp_path),
        baseline=base,
        candidates=(cand, ctrl),
        eval={"web": "w/validation", "code": "c/validation"},
        train=TrainSettings(steps=30),
        seeds=(0, 1, 2),
        primary_eval=primary,
    )
    mixtures = tuple(
        ResolvedMixture(
            m.name,
            m.derivation,
            {d: (c.store, c.weight) for d, c in m.components.items()},
            shuffled=tuple(d for d, c in m.components.items() if c.shuffled),
        )
        for m in cfg.mixtures
    )
    return AblationPlan(cfg, mixtures, (), "tok", 1024, 30, 30 * 256 * 8)


# eval loss per (mixture, seed): {"web": ..., "code": ...}; bytes per token 4.0 (web) and 3.0 (code).
LOSSES = {
    ("baseline", 0): (3.00, 4.00),
    ("baseline", 1): (3.10, 4.10),
    ("baseline", 2): (2.95, 3.90),
    ("plus_code", 0): (3.05, 3.50),
    ("plus_code", 1): (3.04, 3.62),
    ("plus_code", 2): (3.01, 3.41),
    ("control", 0): (3.60, 4.50),
    ("control", 1): (3.72, 4.65),
    ("control", 2): (3.55, 4.42),
}


def _results(tmp_path: Path) -> list[RunResult]:
    results = []
    for (mixture, seed), (web, code) in LOSSES.items():
        run_dir = tmp_path / "runs" / mixture / f"seed{seed}"
        run_dir.mkdir(parents=True)
        metrics = run_dir / "metrics.jsonl"
        lines = [
            {"event": "start"},
            {"step": 10, "loss": 5.0},
            {
                "step": 10,
                "eval/web/loss": web + 1.0,
                "eval/web/bpb": (web + 1.0) / LN2 / 4,
                "eval/code/loss": code + 1.0,
                "eval/code/bpb": (code + 1.0) / LN2 / 3,
            },
            {"step": 20, "eval/web/loss": 99.0, "eval/code/loss": 99.0},  # logged, then the run was killed
            {"event": "resume", "step": 10},
            {
                "step": 20,
                "eval/web/loss": web + 0.5,
                "eval/web/bpb": (web + 0.5) / LN2 / 4,
                "eval/code/loss": code + 0.5,
                "eval/code/bpb": (code + 0.5) / LN2 / 3,
            },
        ]
        metrics.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"step": 3')  # a line cut by a crash
        results.append(
            RunResult(
                mixture,
                seed,
                "trained",
                30,
                2.0,
                {"web": {"loss": web, "bpb": web / LN2 / 4}, "code": {"loss": code, "bpb": code / LN2 / 3}},
                str(metrics),
                None,
                1.0,
                1000.0,
                str(run_dir),
                "fp",
            )
        )
    return results


def test_report_rows_verdicts_and_files(tmp_path: Path) -> None:
    plan = _plan(tmp_path, primary=None)  # decide on the mean over both eval sets
    report = build_report(plan, _results(tmp_path))
    assert report.metric == "bpb"
    row = report.row("plus_code", "code", "loss")
    assert row.values == {0: 3.50, 1: 3.62, 2: 3.41}
    assert row.vs_baseline.differences == pytest.approx((-0.50, -0.48, -0.49))
    assert row.vs_baseline.verdict == "better"
    assert report.row("plus_code", "web", "bpb").vs_baseline.verdict == "inconclusive"  # +0.05, -0.06, +0.06 nats
    assert report.row("control", "web", "loss").vs_baseline.verdict == "worse"
    mean_row = report.row("plus_code", "mean(web,code)", "bpb")
    expected = [
        ((w - bw) / 4 + (c - bc) / 3) / 2 / LN2
        for (w, c), (bw, bc) in [(LOSSES[("plus_code", s)], LOSSES[("baseline", s)]) for s in range(3)]
    ]
    assert mean_row.vs_baseline.differences == pytest.approx(tuple(expected))
    verdict = report.verdict("plus_code")
    assert verdict.difference.verdict == "better" and verdict.decision_sets == ("web", "code")
    assert verdict.per_set == {"web": "inconclusive", "code": "better"}
    assert verdict.line.startswith("plus_code vs baseline: BETTER, bpb on mean(web,code): ")
    assert report.verdict("control").difference.verdict == "worse"
    assert "control" in report.mixtures and "(shuffled)" in report.mixtures["control"]

    # Curves: the value logged after the resume replaces the one logged before the kill; bpb comes from the log.
    curves = read_eval_curves(_results(tmp_path / "again")[0])
    assert curves["web"]["loss"] == [(10, 4.0), (20, 3.5)]
    assert [s for s, _ in curves["web"]["bpb"]] == [10, 20]
    assert [v for _, v in curves["web"]["bpb"]] == pytest.approx([4.0 / LN2 / 4, 3.5 / LN2 / 4])

    files = write_report(report, tmp_path / "report")
    with open(files["csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 3 * 2  # mixtures x (web, code, mean) x (loss, bpb)
    control_code = next(r for r in rows if (r["mixture"], r["eval_set"], r["metric"]) == ("control", "code", "loss"))
    assert control_code["verdict"] == "worse" and control_code["values_by_seed"] == "0:4.5;1:4.65;2:4.42"
    assert float(control_code["diff_mean"]) == pytest.approx((0.5 + 0.55 + 0.52) / 3)
    data = json.loads(Path(files["json"]).read_text())
    assert [v["verdict"] for v in data["verdicts"]] == ["better", "worse"]
    assert data["curves"]["baseline"]["0"]["code"]["loss"] == [[10, 5.0], [20, 4.5]]
    assert Path(files["plot"]).read_bytes()[:4] == b"\x89PNG"
    text = format_report(report)
    assert "plus_code vs baseline: BETTER" in text and "control vs baseline: WORSE" in text
    assert Path(files["text"]).read_text().strip() == text.strip()


def test_primary_eval_decides_and_bpb_falls_back_to_loss(tmp_path: Path) -> None:
    plan = _plan(tmp_path, primary=("web",))
    results = _results(tmp_path)
    report = build_report(plan, results)
    assert report.verdict("plus_code").difference.verdict == "inconclusive"  # decided on web alone
    assert report.verdict("plus_code").line.startswith("plus_code vs baseline: INCONCLUSIVE, bpb on web: ")
    assert not any(r.eval_set.startswith("mean(") for r in report.rows)
    no_bytes = [
        RunResult(**{**r.__dict__, "eval": {k: {"loss": v["loss"], "bpb": None} for k, v in r.eval.items()}})
        for r in results
    ]
    report = build_report(plan, no_bytes)
    assert report.metric == "loss" and any("verdicts use loss" in n for n in report.notes)
    assert {r.metric for r in report.rows} == {"loss"}
    assert report.verdict("control").line.startswith("control vs baseline: WORSE, loss on web: +0.6067")
    write_report(report, tmp_path / "loss-only")  # the table and plot work without bits per byte


def test_a_failed_report_write_leaves_the_previous_report_whole(tmp_path: Path) -> None:
    plan = _plan(tmp_path, primary=None)
    results = _results(tmp_path)
    out = tmp_path / "report"
    files = write_report(build_report(plan, results), out)
    before = {kind: Path(files[kind]).read_text() for kind in ("csv", "json", "text")}
    # The next report cannot be put in place: report.png is now a directory (a real conflict, no fake).
    Path(files["plot"]).unlink()
    Path(files["plot"]).mkdir()
    (Path(files["plot"]) / "keep").write_text("x")
    no_bytes = [
        RunResult(**{**r.__dict__, "eval": {k: {"loss": v["loss"], "bpb": None} for k, v in r.eval.items()}})
        for r in results
    ]
    with pytest.raises(OSError):
        write_report(build_report(plan, no_bytes), out)
    assert {kind: Path(files[kind]).read_text() for kind in ("csv", "json", "text")} == before
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "report.json", "report.png", "report.txt"]
