"""Runs: recipe steps and live engine jobs, from run records and step markers.

Two sources, both read as they are on disk:

- Run records (`<root>/_runs/<run_id>.json`, format "zephyr.run/1", docs/RUN_RECORD.md):
  every step with status/docs/removed/tokens/timing, and every engine job's stages (shards done,
  records/s, ETA, counters, retries with worker pid/host). Rewritten by the running process about
  once per second, so the live view is a re-read of the newest record.
- Step markers (`<root>/<step>-<version>/_STEP.json`, zephyr/steps.py through zephyr.versioning's done
  marker: the step's name, summary and seconds under "payload"; older markers have them at the top level):
  written when a step completes. Roots produced before run records existed (or by other tools) still
  show their steps; a step with a marker and no record is "done".

Docs in/out come from the record when present, else from the summary's `documents_in`/`documents_out`.
Removed counts by reason come from the lineage side output (`_removed/`) when the step has one, else
from the record, else from the summary (`removed`, `dropped`, `duplicates_removed`).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from zephyr.engine.run.record import observed_status
from zephyr.ui.source import Root

__all__ = ["RUN_FORMAT", "run_records", "latest_run", "steps_view", "runs_view"]

RUN_FORMAT = "zephyr.run/1"
_STEP_DIR = re.compile(r"^(?P<name>.+)-(?P<version>[0-9a-f]{10})$")


def run_records(root: Root) -> list[dict]:
    """Every readable run record under the root, newest first (by run id, which sorts by start time)."""
    records = []
    for rel in root.files():
        parts = rel.split("/")
        if len(parts) < 2 or parts[-2] != "_runs" or not parts[-1].endswith(".json"):
            continue
        if parts[-1].startswith((".", "_tmp")):
            continue
        try:
            record = root.read_json(rel)
        except (OSError, ValueError):
            continue  # replaced between listing and reading, or being written by a non-atomic tool
        if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
            continue
        record["_path"] = rel
        records.append(observed_status(record))  # "running" with its process gone reads "killed" / "lost"
    records.sort(key=lambda r: str(r.get("run_id") or ""), reverse=True)
    return records


def latest_run(root: Root, run_id: str | None = None) -> dict | None:
    """The newest run record (or the one with `run_id`), re-read from disk, with derived live figures."""
    root._cache.pop("files", None)  # a live view must see the file the running process just renamed
    records = run_records(root)
    if run_id:
        records = [r for r in records if r.get("run_id") == run_id]
        if not records:
            raise KeyError(f"no run record {run_id!r} under {root.url} (looked for _runs/{run_id}.json)")
    if not records:
        return None
    return _with_live_figures(records[0])


def _with_live_figures(record: dict) -> dict:
    record = dict(record)
    totals = {"shards": 0, "shards_done": 0, "retries": 0}
    for job in record.get("jobs") or []:
        for stage in job.get("stages") or []:
            totals["shards"] += int(stage.get("shards") or 0)
            totals["shards_done"] += int(stage.get("shards_done") or 0)
            totals["retries"] += len(stage.get("retries") or [])
    record["totals"] = totals
    return record


def _summary_counts(summary: dict) -> tuple[Any, Any, dict]:
    docs_in = summary.get("documents_in")
    docs_out = summary.get("documents_out")
    removed: dict[str, int] = {}
    for key in ("removed", "dropped"):  # "dropped": recipes/common_crawl.py's per-reason counts
        if isinstance(summary.get(key), dict) and all(isinstance(v, int) for v in summary[key].values()):
            removed = {str(k): int(v) for k, v in summary[key].items()}
            break
    return docs_in, docs_out, removed


def _tokens(summary: dict) -> int | None:
    if isinstance(summary.get("tokens"), int):
        return summary["tokens"]
    total = 0
    found = False
    for value in summary.values():
        if isinstance(value, dict) and isinstance(value.get("tokens"), int):
            total += value["tokens"] + int(value.get("validation_tokens") or 0)
            found = True
    return total if found else None


def steps_view(root: Root, removed_counts: dict[str, dict[str, int]] | None = None) -> list[dict]:
    """The steps of a recipe root in run order: markers merged with the newest run record.

    `removed_counts` maps a step directory to its lineage counts by reason (see `zephyr.ui.removed`).
    """
    removed_counts = removed_counts or {}
    steps: dict[str, dict] = {}
    files = root.files()
    for rel, info in files.items():
        parts = rel.split("/")
        if len(parts) != 2 or parts[1] != "_STEP.json":
            continue
        match = _STEP_DIR.match(parts[0])
        try:
            marker = root.read_json(rel)
        except (OSError, ValueError):
            continue
        if not isinstance(marker, dict):
            continue
        # zephyr.versioning's done marker keeps the step's record in "payload" (version: "fingerprint");
        # markers written before it held the same keys at the top level
        body = marker["payload"] if isinstance(marker.get("payload"), dict) else marker
        summary = body.get("summary") or {}
        docs_in, docs_out, removed = _summary_counts(summary)
        version = marker.get("fingerprint") or marker.get("version") or (match.group("version") if match else "")
        steps[parts[0]] = {
            "name": body.get("name") or (match.group("name") if match else parts[0]),
            "version": str(version)[:10],
            "path": parts[0],
            "status": "done",
            "seconds": body.get("seconds"),
            "finished": info["mtime"],
            "docs_in": docs_in,
            "docs_out": docs_out,
            "removed": removed,
            "tokens": _tokens(summary),
            "summary": summary,
        }
    records = run_records(root)
    if records:
        for position, step in enumerate(records[0].get("steps") or []):
            path = (
                posixpath.basename(str(step.get("path") or "").rstrip("/"))
                or f"{step.get('name')}-{step.get('version')}"
            )
            merged = steps.setdefault(path, {"name": step.get("name"), "path": path, "finished": None, "summary": {}})
            merged["order"] = position
            for key in ("version", "status", "seconds", "docs_in", "docs_out", "tokens", "summary"):
                if step.get(key) is not None:
                    merged[key] = step[key] if key != "version" else str(step[key])[:10]
            if step.get("removed"):
                merged["removed"] = {str(k): int(v) for k, v in step["removed"].items()}
    for path, step in steps.items():
        step.setdefault("removed", {})
        if removed_counts.get(path):  # the lineage side output has the exact reasons: it wins
            step["removed"] = dict(removed_counts[path])
        if not step["removed"] and step.get("summary", {}).get("duplicates_removed"):
            step["removed"] = {"duplicates": int(step["summary"]["duplicates_removed"])}
        if step.get("docs_in") is not None and step.get("docs_out") is not None:
            step["removed_total"] = int(step["docs_in"]) - int(step["docs_out"])
        else:
            step["removed_total"] = sum(step["removed"].values()) if step["removed"] else None
        step["lineage"] = path in removed_counts
    return sorted(steps.values(), key=lambda s: (s.get("order", 1 << 30), s.get("finished") or 0, s["path"]))


def runs_view(root: Root, removed_counts: dict[str, dict[str, int]] | None = None, run_id: str | None = None) -> dict:
    """Everything the Runs page shows, as JSON (`live`: the newest run, or the run `run_id`)."""
    records = run_records(root)
    return {
        "root": root.url,
        "steps": steps_view(root, removed_counts),
        "runs": [
            {
                k: r.get(k)
                for k in (
                    "run_id",
                    "status",
                    "command",
                    "host",
                    "pid",
                    "backend",
                    "workers",
                    "started_at",
                    "finished_at",
                    "seconds",
                    "error",
                    "status_note",
                    "_path",
                )
            }
            for r in records
        ],
        "live": latest_run(root, run_id),
    }
