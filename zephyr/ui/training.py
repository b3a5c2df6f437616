"""Ablations and training: curves from `metrics.jsonl`, verdicts and paired differences from `report.json`,
scaling-ladder fits and predictions from `ladder.json`.

A training run is a folder with `metrics.jsonl` (zephyr/train/trainer.py: one JSON object per step with
`loss`, `eval/<set>/loss`, `eval/<set>/bpb`, plus start/end events). An ablation report is a
`report.json` written by `zephyr.ablate.report.write_report` (rows with per-seed values and paired
differences with t intervals, verdicts, and per-run curves). A ladder report is a `ladder.json` written
by `zephyr.ablate.ladder_report.write_ladder_report` (per mixture the runs, the fitted law, the
prediction at the target with its interval and, once verified, the measured loss).
"""

from __future__ import annotations

import json
import math
import posixpath
from typing import Any

from zephyr.fs import open_url
from zephyr.ui.source import Root

__all__ = [
    "list_training",
    "training_view",
    "training_budgets",
    "list_reports",
    "report_view",
    "list_ladders",
    "ladder_view",
]


def list_training(root: Root) -> list[str]:
    """The folders under the root holding a training run (a `metrics.jsonl`)."""
    return [posixpath.dirname(rel) for rel in sorted(root.files()) if posixpath.basename(rel) == "metrics.jsonl"]


def _metrics(root: Root, rel: str) -> list[dict]:
    out = []
    with open_url(root.abs(rel), "rb", compression=None) as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash mid-write
            if isinstance(record, dict):
                out.append(record)
    return out


def training_view(root: Root, path: str) -> dict:
    """Series {name: [[step, value], ...]}: train loss and every eval set's loss and bits per byte."""
    rel = posixpath.join(path, "metrics.jsonl") if path not in ("", ".") else "metrics.jsonl"
    if rel not in root.files():
        raise KeyError(f"no metrics.jsonl in {path!r} under {root.url}")
    series: dict[str, dict[int, float]] = {}
    start = end = None
    for record in _metrics(root, rel):
        if record.get("event") == "start":
            start = {k: record.get(k) for k in ("params", "devices", "config")}
            continue
        if record.get("event") == "end":
            end = {k: record.get(k) for k in ("step", "final_loss", "tokens_per_s", "mfu", "eval")}
            continue
        step = record.get("step")
        if not isinstance(step, int):
            continue
        for key, value in record.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if key == "loss" or (key.startswith("eval/") and key.rsplit("/", 1)[-1] in ("loss", "bpb")):
                series.setdefault(key, {})[step] = float(value)
    curves = {name: sorted(points.items()) for name, points in sorted(series.items())}
    return {
        "path": path,
        "start": start,
        "end": end,
        "series": {k: [[s, v] for s, v in pts] for k, pts in curves.items()},
    }


def training_budgets(root: Root) -> list[dict]:
    """Token budgets of the training runs under the root: {path, tokens, stores} from each run's start event
    (steps x batch_size x seq_len, and the store paths it trained on)."""
    out = []
    for path in list_training(root):
        rel = posixpath.join(path, "metrics.jsonl") if path else "metrics.jsonl"
        with open_url(root.abs(rel), "rb", compression=None) as handle:
            first = handle.readline()
        try:
            start = json.loads(first)
            config = start["config"]
            data = config["data"]
            tokens = int(config["steps"]) * int(data["batch_size"]) * int(data["seq_len"])
            stores = [str(spec[0]).rstrip("/") for spec in (data.get("train") or {}).values()]
        except (ValueError, KeyError, TypeError, IndexError):
            continue  # not a start event of zephyr.train (an ablation's per-run log, a cut line)
        out.append({"path": path, "tokens": tokens, "stores": stores})
    return out


def _folders_with(root: Root, name: str, keys: tuple[str, ...]) -> list[str]:
    """Folders holding a JSON file `name` that is an object with every one of `keys` (an unreadable one is skipped)."""
    out = []
    for rel in root.json_files(name):
        try:
            data = root.read_json(rel)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and all(k in data for k in keys):
            out.append(posixpath.dirname(rel))
    return out


def list_reports(root: Root) -> list[str]:
    """The folders under the root holding an ablation report (a `report.json` with verdicts and rows)."""
    return _folders_with(root, "report.json", ("verdicts", "rows"))


def report_view(root: Root, path: str) -> dict:
    """The ablation report, plus curves averaged over seeds per (mixture, eval set, metric)."""
    rel = posixpath.join(path, "report.json") if path not in ("", ".") else "report.json"
    data = root.read_json(rel)
    mean_curves: dict[str, list[list[float]]] = {}
    for mixture, seeds in (data.get("curves") or {}).items():
        by_key: dict[str, dict[int, list[float]]] = {}
        for _seed, sets in seeds.items():
            for eval_set, metrics in sets.items():
                for metric, points in metrics.items():
                    for step, value in points:
                        if value is not None:
                            by_key.setdefault(f"{eval_set}/{metric}/{mixture}", {}).setdefault(int(step), []).append(
                                float(value)
                            )
        for key, points in by_key.items():
            mean_curves[key] = [[s, sum(v) / len(v)] for s, v in sorted(points.items())]
    differences = []
    for row in data.get("rows") or []:
        d = row.get("vs_baseline")
        if d:
            differences.append(
                {
                    "mixture": row["mixture"],
                    "eval_set": row["eval_set"],
                    "metric": row["metric"],
                    "mean": d.get("mean"),
                    "low": d.get("low"),
                    "high": d.get("high"),
                    "p_value": d.get("p_value"),
                    "verdict": d.get("verdict"),
                }
            )
    out: dict[str, Any] = {
        "path": path,
        "baseline": data.get("baseline"),
        "metric": data.get("metric"),
        "confidence": data.get("confidence"),
        "seeds": data.get("seeds"),
        "mixtures": data.get("mixtures"),
        "verdicts": data.get("verdicts") or [],
        "differences": differences,
        "curves": mean_curves,
        "notes": data.get("notes") or [],
    }
    return out


def list_ladders(root: Root) -> list[str]:
    """Folders holding a scaling-ladder report (`ladder.json` with mixtures and a target)."""
    return _folders_with(root, "ladder.json", ("mixtures", "target"))


def ladder_view(root: Root, path: str) -> dict:
    """The ladder report, plus chart series on a log10-FLOPs axis: per mixture its runs, its fitted law along
    the recipe from the smallest run to the target (the report's `curve`), the predicted point and (once
    verified) the measured one."""
    rel = posixpath.join(path, "ladder.json") if path not in ("", ".") else "ladder.json"
    data = root.read_json(rel)
    target = data.get("target") or {}
    hi = math.log10(target["flops"]) if target.get("flops") else 0.0
    series: dict[str, list[list[float]]] = {}
    for m in data.get("mixtures") or []:
        name = m["mixture"]
        series[f"{name} runs"] = sorted([math.log10(p["flops"]), p["mean"]] for p in m.get("points") or [])
        series[f"{name} fit"] = [[math.log10(c), v] for c, v in m.get("curve") or [] if c and c > 0]
        series[f"{name} predicted"] = [[hi, m["predicted"]]] if m.get("predicted") is not None else []
        if m.get("measured_mean") is not None:
            series[f"{name} measured"] = [[hi, m["measured_mean"]]]
    return {"path": path, **data, "chart": series}
