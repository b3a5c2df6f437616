"""The runs pages: every run under the root, and one run live (steps, stages, shards, rates)."""

from __future__ import annotations

import json

from starlette.requests import Request

from zephyr.ui import removed, runs
from zephyr.ui.html import esc, fmt, link, table, url
from zephyr.ui.params import query_param
from zephyr.ui.source import Root

__all__ = ["runs_data", "live_data", "render_runs", "render_runs_page", "render_live"]


# ---------------------------------------------------------------------------------------------- runs
def runs_data(root: Root, request: Request) -> dict:
    """The runs page's data: every run under the root with its steps, or one run."""
    run_id = query_param(request, "run") or None
    return {**runs.runs_view(root, removed.removed_counts(root), run_id), "run_id": run_id}


def live_data(root: Root, request: Request) -> dict:
    """The live view's data: the latest (or the named) run's record as it is now."""
    return {"live": runs.latest_run(root, query_param(request, "run") or None)}


def _removed_cell(step: dict, folders: list[str]) -> str:
    """Removed counts by reason, each linked to where those documents can be seen: the lineage page, or
    (steps that mark documents and leave them in their output, as recipes/common_crawl.py does) the step's
    documents filtered by that reason."""
    if not step.get("removed"):
        return fmt(step.get("removed_total"))
    own = [f for f in folders if f == step["path"] or f.startswith(step["path"] + "/")]
    parts = []
    for reason, n in step["removed"].items():
        text = f"{esc(reason)} {fmt(n)}"
        if step.get("lineage"):
            parts.append(f'<a href="{esc(url("/removed", step=step["path"], reason=reason))}">{text}</a>')
        elif own:
            href = url("/documents", dataset=own[0], filter=f"filter_reason == {json.dumps(reason)}")
            parts.append(f'<a href="{esc(href)}">{text}</a>')
        else:
            parts.append(text)
    return "<br>".join(parts)


def render_runs(root: Root, data: dict) -> str:
    """The runs page: the steps with status, version, documents in and out, removed by reason, tokens, time."""
    folders = [d["path"] for d in root.datasets() if not d["lineage"]]
    rows = []
    for s in data["steps"]:
        rows.append(
            [
                esc(s.get("name")),
                f"<code>{esc(s.get('version'))}</code>",
                f'<span class="status {esc(s.get("status"))}">{esc(s.get("status"))}</span>',
                fmt(s.get("docs_in")),
                fmt(s.get("docs_out")),
                _removed_cell(s, folders),
                fmt(s.get("tokens")),
                fmt(s.get("seconds"), 1) + (" s" if s.get("seconds") is not None else ""),
                link(url("/documents", prefix=s["path"]), s["path"]),
            ]
        )
    steps_html = (
        table(
            ["step", "version", "status", "docs in", "docs out", "removed (why)", "tokens", "time", "output"],
            rows,
            id="steps",
        )
        if rows
        else "<p class=muted>No recipe steps here (no _STEP.json markers or run records).</p>"
    )
    history = [
        [
            link(url("/", run=r.get("run_id")), r.get("run_id")),
            f'<span class="status {esc(r.get("status"))}">{esc(r.get("status"))}</span>',
            esc(" ".join(r.get("command") or [])),
            esc(r.get("backend")),
            esc(f"{r.get('host')}:{r.get('pid')}"),
            esc(r.get("started_at")),
            fmt(r.get("seconds"), 1),
        ]
        for r in data["runs"]
    ]
    history_html = (
        table(["run", "status", "command", "backend", "host:pid", "started", "seconds"], history)
        if history
        else "<p class=muted>No run records (<code>_runs/*.json</code>) yet.</p>"
    )
    live_id = data.get("run_id")
    return (
        f"<section><h2>Steps</h2>{steps_html}</section>"
        f"<section><h2>{'Run ' + esc(live_id) if live_id else 'Live'}</h2>"
        f"<div id=live>{render_live({'live': data['live']})}</div></section>"
        f"<section><h2>Run history</h2>{history_html}</section>"
    )


def render_runs_page(root: Root, data: dict) -> str:
    """The Runs page: steps, live run and history, re-fetched every second (`/fragments/runs`) so a
    running pipeline's new steps, jobs and counts appear without a reload."""
    refresh = url("/fragments/runs", run=data.get("run_id"))
    return f'<div id=runs-body data-refresh="{esc(refresh)}" data-interval=1000>{render_runs(root, data)}</div>'


def render_live(data: dict) -> str:
    """The live view of a run: its status, steps and the running stage's shards, records and rates."""
    run = data.get("live")
    if not run:
        return "<p class=muted>No run record yet. Runs write <code>_runs/&lt;run_id&gt;.json</code> while they run.</p>"
    head = (
        f"<p class=runhead><b>{esc(run.get('run_id'))}</b> "
        f'<span class="status {esc(run.get("status"))}" id=live-status>{esc(run.get("status"))}</span> '
        f"{esc(run.get('backend'))} · {fmt(run.get('workers'))} workers · "
        f"{esc(run.get('host'))} pid {esc(run.get('pid'))}"
        f" · {fmt(run.get('seconds'), 1)} s · updated {esc(run.get('updated_at'))}</p>"
    )
    if run.get("status_note"):  # "killed" / "lost": the record said running, its process is gone
        head += f"<p class=error id=status-note>{esc(run['status'])}: {esc(run['status_note'])}</p>"
    if run.get("error"):
        head += f"<p class=error>{esc(run['error'].get('type'))}: {esc(run['error'].get('message'))}</p>"
    steps = [
        [
            esc(s.get("name")),
            f'<span class="status {esc(s.get("status"))}">{esc(s.get("status"))}</span>',
            fmt(s.get("docs_in")),
            fmt(s.get("docs_out")),
            esc(", ".join(f"{k} {v:,}" for k, v in (s.get("removed") or {}).items())),
            fmt(s.get("tokens")),
            fmt(s.get("seconds"), 1),
        ]
        for s in run.get("steps") or []
    ]
    out = [head]
    if steps:
        out.append(table(["step", "status", "docs in", "docs out", "removed", "tokens", "s"], steps))
    jobs = list(run.get("jobs") or [])
    shown = [j for j in jobs if j.get("status") == "running"] + [j for j in jobs if j.get("status") != "running"][-3:]
    shown.sort(key=lambda j: -int(j.get("job") or 0))  # newest first
    if len(jobs) > len(shown):
        out.append(
            f"<p class=muted>{len(jobs)} engine jobs in this run; the running ones and the last 3 are shown "
            f"(all of them: <code>/api/runs/live</code>).</p>"
        )
    for job in shown:
        stage_rows, retry_rows = [], []
        for st in job.get("stages") or []:
            shards, done = int(st.get("shards") or 0), int(st.get("shards_done") or 0)
            pct = 100.0 * done / shards if shards else 0.0
            bar = f'<span class=bar-outer><span class=bar-inner style="width:{pct:.0f}%"></span></span>'
            stage_rows.append(
                [
                    fmt(st.get("index")),
                    esc(st.get("name")),
                    f'{bar} <span class=shards data-stage="{esc(st.get("index"))}">{done}/{shards}</span>',
                    f"<span class=records-in>{fmt(st.get('records_in'))}</span>",
                    fmt(st.get("records_out")),
                    fmt(st.get("records_per_s"), 1),
                    fmt(st.get("eta_seconds"), 1),
                    fmt(len(st.get("retries") or [])),
                ]
            )
            for r in st.get("retries") or []:
                retry_rows.append(
                    [
                        fmt(st.get("index")),
                        fmt(r.get("shard")),
                        fmt(r.get("attempt")),
                        esc(r.get("kind")),
                        esc(r.get("error")),
                        esc(r.get("worker_host")),
                        esc(r.get("worker_pid")),
                    ]
                )
        counters = ", ".join(f"{esc(k)} {fmt(v)}" for k, v in sorted((job.get("counters") or {}).items()))
        out.append(
            f"<div class=job><h3>job {esc(job.get('job'))} {esc(job.get('step') or '')} "
            f'<span class="status {esc(job.get("status"))}">{esc(job.get("status"))}</span> '
            f"{fmt(job.get('seconds'), 1)} s</h3>"
        )
        out.append(
            table(
                ["#", "stage", "shards", "records in", "records out", "records/s", "ETA s", "retries"],
                stage_rows,
                cls="stages",
            )
        )
        if counters:
            out.append(f"<p class=counters>counters: {counters}</p>")
        if retry_rows:
            out.append(
                table(
                    ["stage", "shard", "attempt", "kind", "error", "worker host", "worker pid"],
                    retry_rows,
                    cls="retries",
                )
            )
        out.append("</div>")
    return "".join(out)
