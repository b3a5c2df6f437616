"""The pages: for each, a data function (request -> JSON-able dict) and a renderer (dict -> HTML body).

`PAGES` lists (path, data, render, title, nav key); `zephyr.ui.app` serves each at its path (HTML) and
at `/api<path>` (JSON; the runs page at `/api/runs`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from zephyr.ui import documents, removed, runs, stores, training
from zephyr.ui.filters import parse_filter
from zephyr.ui.html import bar_chart, esc, fmt, interval_chart, line_chart, link, pre_json, table, url
from zephyr.ui.source import Root

__all__ = ["PAGES", "live_data", "render_live", "runs_data", "render_runs"]

_TEXT_PREVIEW = 240
_PREFERRED_COLUMNS = ("id", "split", "source", "lang", "filter_reason", "dup_cluster", "dup_keep", "quality_score")


def _int(request: Request, name: str, default: int, lo: int = 0, hi: int = 10**12) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name}={raw!r} must be an integer") from None
    if not lo <= value <= hi:
        raise ValueError(f"query parameter {name}={value} must be in {lo}..{hi}")
    return value


def _param(request: Request, name: str, required: bool = False) -> str:
    value = request.query_params.get(name, "")
    if required and not value:
        raise ValueError(f"query parameter {name!r} is required")
    return value


# ---------------------------------------------------------------------------------------------- runs
def runs_data(root: Root, request: Request) -> dict:
    run_id = _param(request, "run") or None
    return {**runs.runs_view(root, removed.removed_counts(root), run_id), "run_id": run_id}


def live_data(root: Root, request: Request) -> dict:
    return {"live": runs.latest_run(root, _param(request, "run") or None)}


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
    if (run.get("stale_seconds") or 0) > 30:
        head += (
            f'<p class=error>no update for {run["stale_seconds"]:.0f} s while "running": '
            "the process may have been killed (a live run rewrites its record about once a second)</p>"
        )
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


# ----------------------------------------------------------------------------------------- documents
def documents_data(root: Root, request: Request) -> dict:
    dataset = request.query_params.get("dataset")
    listing = [d for d in root.datasets() if d["path"].startswith(_param(request, "prefix"))]
    if dataset is None:
        return {"datasets": listing}
    expr = parse_filter(_param(request, "filter"))
    result = documents.page(
        root,
        dataset,
        expr=expr,
        q=_param(request, "q") or None,
        offset=_int(request, "offset", 0),
        limit=_int(request, "limit", 50, 1, 1000),
        file=_param(request, "file") or None,
    )
    result["filter_text"] = _param(request, "filter")
    return result


def _preview(value: Any) -> str:
    """A table cell: text cut to a preview; nested values summarized (the document view shows them whole)."""
    if isinstance(value, dict):
        return f'<span class=muted title="{esc(", ".join(map(str, value)))}">{{{len(value)} fields}}</span>'
    if isinstance(value, list) and len(value) > 8:
        return f"<span class=muted>[{len(value)} items]</span>"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return esc(text[:_TEXT_PREVIEW] + ("…" if len(text) > _TEXT_PREVIEW else ""))


_LINKED = {"dup_keeper": "id", "dup_cluster": "dup_cluster"}  # field -> the field a click filters on


def _cell(dataset: str, key: str, value: Any) -> str:
    """A table cell; a duplicate's keeper id and cluster link to those documents in the same folder."""
    if key in _LINKED and isinstance(value, (str, int)) and not isinstance(value, bool):
        href = url("/documents", dataset=dataset, filter=f"{_LINKED[key]} == {json.dumps(value)}")
        return f'<a class="{esc(key)}" href="{esc(href)}">{_preview(value)}</a>'
    return _preview(value)


def render_documents(root: Root, data: dict) -> str:
    if "datasets" in data:
        rows = [
            [
                link(url("/documents", dataset=d["path"]), d["path"] or "."),
                fmt(len(d["files"])),
                esc(d["format"]),
                fmt(d["bytes"]),
                "lineage" if d["lineage"] else "",
            ]
            for d in data["datasets"]
        ]
        return table(["folder", "files", "format", "bytes", ""], rows, id="datasets")
    dataset = data["dataset"]
    hidden = f'<input type=hidden name=dataset value="{esc(dataset)}">'
    if data.get("file"):
        hidden += f'<input type=hidden name=file value="{esc(data["file"])}">'
    form = (
        f'<form class=filters method=get action="/documents">{hidden}'
        f'<label>filter <input name=filter id=filter size=60 value="{esc(data.get("filter_text"))}" '
        f'placeholder=\'filter_reason == "exact_duplicate" and lang in ["en"]\'></label> '
        f'<label>text contains <input name=q id=q value="{esc(data.get("q"))}"></label> '
        f"<button type=submit id=apply>apply</button></form>"
    )
    files = " ".join(
        link(
            url("/documents", dataset=dataset, file=f, filter=data.get("filter_text"), q=data.get("q")),
            f.rsplit("/", 1)[-1],
            cls="file" + (" active" if f == data.get("file") else ""),
        )
        for f in data.get("file_list") or []
    )
    if data.get("file"):
        files = (
            link(url("/documents", dataset=dataset, filter=data.get("filter_text"), q=data.get("q")), "all files")
            + " "
            + files
        )
    rows = data["rows"]
    keys: list[str] = [k for k in _PREFERRED_COLUMNS if any(k in r for r in rows)]
    for r in rows:
        for k in r:
            if k not in keys and not k.startswith("_") and k not in ("text", "metadata") and len(keys) < 8:
                keys.append(k)
    body = []
    for r in rows:
        href = url("/documents/doc", file=r["_file"], row=r["_row"], filter=data.get("filter_text"), q=data.get("q"))
        cells = [link(href, f"{r['_file'].rsplit('/', 1)[-1]}#{r['_row']}", cls="open")]
        cells += [_cell(dataset, k, r.get(k)) for k in keys]
        cells.append(f"<span class=text>{_preview(r.get('text'))}</span>")
        body.append(cells)
    off, lim = data["offset"], data["limit"]
    nav = []
    if off > 0:
        nav.append(
            link(
                url(
                    "/documents",
                    dataset=dataset,
                    file=data.get("file"),
                    filter=data.get("filter_text"),
                    q=data.get("q"),
                    offset=max(0, off - lim),
                    limit=lim,
                ),
                "← previous",
            )
        )
    if data["has_more"]:
        nav.append(
            link(
                url(
                    "/documents",
                    dataset=dataset,
                    file=data.get("file"),
                    filter=data.get("filter_text"),
                    q=data.get("q"),
                    offset=off + lim,
                    limit=lim,
                ),
                "next →",
                id="next",
            )
        )
    shown = f"rows {off + 1 if rows else 0}–{off + len(rows)}" + (
        f" of {fmt(data['total'])}" if data["total"] is not None else ""
    )
    expr = f" · expression <code>{esc(data['filter'])}</code>" if data.get("filter") else ""
    return (
        f"<p>{link('/documents', 'all folders')} / <b>{esc(dataset)}</b> · {fmt(data['files'])} files "
        f"({esc(data['format'])}){expr}</p><p class=files>files: {files}</p>{form}"
        f"<p class=pager><span id=shown>{shown}</span> {' '.join(nav)}</p>"
        + table(["document"] + keys + ["text"], body, id="docs")
    )


def document_data(root: Root, request: Request) -> dict:
    rel, row = _param(request, "file", True), _int(request, "row", 0)
    expr = parse_filter(_param(request, "filter"))
    q = _param(request, "q")
    if q:
        from zephyr.engine.expr import col

        search = col("text").str_contains(q)
        expr = search if expr is None else expr & search
    doc = documents.get_row(root, rel, row, expr=expr)
    if doc is None:
        raise KeyError(f"{rel} has no row {row}" + (" matching the filter" if expr is not None else ""))
    return {"file": rel, "row": row, "document": doc}


def render_document(root: Root, data: dict) -> str:
    doc = data["document"]
    fields = [
        [f"<code>{esc(k)}</code>", pre_json(v) if isinstance(v, (dict, list)) else esc(v)]
        for k, v in doc.items()
        if k != "text" and not k.startswith("_")
    ]
    folder = data["file"].rsplit("/", 1)[0] if "/" in data["file"] else ""
    return (
        f"<p>{link(url('/documents', dataset=folder), folder or '.')} / {esc(data['file'])} row {data['row']}</p>"
        + table(["field", "value"], fields, id="fields")
        + f"<h2>text</h2><pre class=doctext id=doctext>{esc(doc.get('text'))}</pre>"
    )


# ------------------------------------------------------------------------------------------- removed
def _step_order(root: Root) -> list[str]:
    return [s["path"] for s in runs.steps_view(root)]


def removed_data(root: Root, request: Request) -> dict:
    step = request.query_params.get("step")
    if not step:
        counts = removed.removed_counts(root)
        return {"steps": [{"step": k, "removed": v, "total": sum(v.values())} for k, v in counts.items()]}
    return removed.removed_page(
        root,
        step,
        reason=_param(request, "reason") or None,
        offset=_int(request, "offset", 0),
        limit=_int(request, "limit", 50, 1, 1000),
    )


def render_removed(root: Root, data: dict) -> str:
    if "steps" in data:
        if not data["steps"]:
            return (
                "<p class=muted>No lineage side outputs (<code>&lt;step&gt;/_removed/part-*.parquet</code>) under this "
                "root. Steps that drop documents through <code>zephyr.operators.lineage.drop_removed</code> "
                "write them.</p>"
            )
        rows = []
        for s in data["steps"]:
            reasons = " ".join(
                link(url("/removed", step=s["step"], reason=r), f"{r} {n:,}", cls="reason")
                for r, n in s["removed"].items()
            )
            rows.append([link(url("/removed", step=s["step"]), s["step"]), fmt(s["total"]), reasons])
        return table(["step", "removed", "by reason"], rows, id="removed-steps")
    step = data["step"]
    reasons = " ".join(
        link(url("/removed", step=step, reason=r), f"{r} {n:,}", cls="reason") for r, n in data["counts"].items()
    )
    rows = []
    for r in data["rows"]:
        pair = url("/removed/pair", step=step, id=r["id"])
        rows.append(
            [
                link(pair, r["id"], cls="removed-id"),
                esc(r["reason"]),
                link(pair, r["keeper"], cls="keeper") if r.get("keeper") else "–",
                esc(r.get("split") or r.get("source")),
                fmt(r.get("chars")),
            ]
        )
    off, lim = data["offset"], data["limit"]
    nav = []
    if off > 0:
        nav.append(link(url("/removed", step=step, reason=data["reason"], offset=max(0, off - lim)), "← previous"))
    if off + lim < data["total"]:
        nav.append(link(url("/removed", step=step, reason=data["reason"], offset=off + lim), "next →"))
    return (
        f"<p>{link('/removed', 'all steps')} / <b>{esc(step)}</b>: {reasons} "
        f"{link(url('/removed', step=step), '(all reasons)')}</p>"
        f"<p class=pager>{fmt(data['total'])} removed {esc(data['reason'] or '')} {' '.join(nav)}</p>"
        + table(["removed document", "reason", "kept instead", "split", "chars"], rows, id="removed")
    )


def pair_data(root: Root, request: Request) -> dict:
    return removed.removed_pair(root, _param(request, "step", True), _param(request, "id", True), _step_order(root))


def render_pair(root: Root, data: dict) -> str:
    lin = data["lineage"]
    head = (
        f"<p>{link(url('/removed', step=data['step']), data['step'])} / removed as <b>{esc(lin['reason'])}</b>"
        + (f" · Jaccard <b id=jaccard>{fmt(data['jaccard'], 3)}</b>" if data.get("jaccard") is not None else "")
        + (" · identical text after normalization" if lin["reason"] == "exact_duplicate" else "")
        + "</p>"
    )
    kept, gone = data.get("keeper"), data.get("removed")

    def side(doc: dict | None, label: str, doc_id: Any, html_text: str | None, ident: str) -> str:
        if doc is None:
            missing = f"<p class=muted>{esc(doc_id)} not found under the root</p>"
            return f"<div class=side id={ident}><h2>{esc(label)}</h2>{missing}</div>"
        folder = doc["_file"].rsplit("/", 1)[0] if "/" in doc["_file"] else ""
        opened = link(
            url("/documents", dataset=folder, filter=f"id == {json.dumps(str(doc_id))}"), doc_id, cls="open-doc"
        )
        meta = " · ".join(esc(f"{k}={doc.get(k)}") for k in ("split", "source", "lang") if doc.get(k) is not None)
        return (
            f"<div class=side id={ident}><h2>{esc(label)}</h2><p><code>{opened}</code><br>{meta}<br>"
            f"<small>{esc(doc.get('_file'))}</small></p>"
            f"<div class=doctext>{html_text if html_text is not None else esc(doc.get('text'))}</div></div>"
        )

    diff = data.get("diff") or {}
    if not lin.get("keeper"):
        return head + side(gone, "removed", lin["id"], None, "removed-doc")
    return (
        head
        + "<div class=pair>"
        + side(kept, "kept", lin["keeper"], diff.get("kept"), "kept-doc")
        + side(gone, "removed", lin["id"], diff.get("removed"), "removed-doc")
        + "</div>"
        + "<p class=muted>highlighted: passages only in one of the two documents (word-level difflib).</p>"
    )


# -------------------------------------------------------------------------------------------- stores
def stores_data(root: Root, request: Request) -> dict:
    return {"stores": stores.list_stores(root), "mixtures": stores.list_mixtures(root)}


def render_stores(root: Root, data: dict) -> str:
    rows = [
        [
            link(url("/stores/view", path=s["path"]), s["path"]),
            esc(s.get("split")),
            fmt(s["documents"]),
            fmt(s["tokens"]),
            esc(s["dtype"]),
            esc(s["tokenizer"]),
            fmt(s["shards"]),
        ]
        for s in data["stores"]
    ]
    mixes = "".join(f"<li>{link(url('/stores/mixture', path=m), m)}</li>" for m in data["mixtures"])
    return (
        table(["store", "split", "documents", "tokens", "dtype", "tokenizer", "shards"], rows, id="stores")
        + f"<h2>Mixtures</h2><ul>{mixes or '<li class=muted>none</li>'}</ul>"
    )


def store_data(root: Root, request: Request) -> dict:
    return stores.store_view(
        root, _param(request, "path", True), offset=_int(request, "offset", 0), limit=_int(request, "limit", 20, 1, 500)
    )


def render_store(root: Root, data: dict) -> str:
    length = data["length"]
    summary = (
        f"<p>{fmt(data['documents'])} documents · {fmt(data['tokens'])} tokens · {esc(data['dtype'])} · "
        f"{fmt(data['shards'])} shards · tokenizer {esc(data['tokenizer'].get('name'))} · length mean "
        f"{fmt(length['mean'], 1)}, p50 {fmt(length['p50'], 0)}, p90 {fmt(length['p90'], 0)}, max {fmt(length['max'])}"
        + (
            f" · validation {fmt(data['validation']['documents'])} docs / {fmt(data['validation']['tokens'])} tokens"
            if data.get("validation")
            else ""
        )
        + "</p>"
    )
    chart = bar_chart(
        [(f"{b['lo']}–{b['hi']}", b["count"]) for b in data["histogram"]], title="document length (tokens)"
    )
    rows = [
        [link(url("/stores/doc", path=data["path"], index=d["index"]), f"document {d['index']}"), fmt(d["tokens"])]
        for d in data["docs"]
    ]
    nav = (
        link(url("/stores/view", path=data["path"], offset=data["offset"] + data["limit"]), "next →")
        if data["offset"] + data["limit"] < data["documents"]
        else ""
    )
    return summary + chart + table(["document", "tokens"], rows, id="store-docs") + f"<p class=pager>{nav}</p>"


def store_doc_data(root: Root, request: Request) -> dict:
    return stores.store_document(root, _param(request, "path", True), _int(request, "index", 0))


def render_store_doc(root: Root, data: dict) -> str:
    head = (
        f"<p>{link(url('/stores/view', path=data['path']), data['path'])} / document {data['index']}: "
        f"{fmt(data['tokens'])} tokens (showing {fmt(data['shown'])}), tokenizer {esc(data['tokenizer'])}</p>"
    )
    if not data["decoded"]:
        return (
            head
            + "<p class=muted>tokenizer unavailable or its hash differs: ids only</p>"
            + f"<pre class=doctext>{esc(' '.join(map(str, data['ids'])))}</pre>"
        )
    spans = "".join(f'<span class=tok title="id {p["id"]}">{esc(p["text"])}</span>' for p in data["pieces"])
    return head + f'<div class="doctext tokens" id=tokens>{spans}</div>'


def mixture_data(root: Root, request: Request) -> dict:
    budget = _int(request, "budget", 0) or None
    return stores.mixture_view(
        root,
        _param(request, "path", True),
        budget=budget,
        runs=training.training_budgets(root) if budget is None else None,
    )


def render_mixture(root: Root, data: dict) -> str:
    form = (
        f'<form method=get action="/stores/mixture"><input type=hidden name=path value="{esc(data["path"])}">'
        f'<label>token budget <input name=budget value="{data["budget"]}"></label> <button>recompute</button></form>'
    )
    rows = [
        [
            esc(c["name"]),
            link(url("/stores/view", path=c["store"]), c["store"]),
            fmt(c["weight"], 4),
            fmt(c["tokens"]),
            fmt(c["sampled_tokens"]),
            fmt(c["epochs"], 2),
        ]
        for c in data["components"]
    ]
    chart = bar_chart([(c["name"], c["epochs"] or 0.0) for c in data["components"]], title="epochs per component")
    return (
        form + f"<p>the stores hold {fmt(data['store_tokens'])} tokens; budget {fmt(data['budget'])} "
        f"({esc(data['budget_from'])})</p>"
        + table(["component", "store", "weight", "store tokens", "sampled tokens", "epochs"], rows, id="mixture")
        + chart
    )


# ------------------------------------------------------------------------------------------ training
def training_data(root: Root, request: Request) -> dict:
    return {"runs": training.list_training(root), "reports": training.list_reports(root)}


def render_training(root: Root, data: dict) -> str:
    runs_html = "".join(f"<li>{link(url('/training/run', path=p), p or '.')}</li>" for p in data["runs"])
    reports = "".join(f"<li>{link(url('/training/report', path=p), p or '.')}</li>" for p in data["reports"])
    return (
        f"<h2>Training runs</h2><ul id=train-runs>{runs_html or '<li class=muted>none</li>'}</ul>"
        f"<h2>Ablation reports</h2><ul id=reports>{reports or '<li class=muted>none</li>'}</ul>"
    )


def train_run_data(root: Root, request: Request) -> dict:
    return training.training_view(root, _param(request, "path", True))


def render_train_run(root: Root, data: dict) -> str:
    series = data["series"]
    loss = {k: v for k, v in series.items() if k == "loss" or k.endswith("/loss")}
    bpb = {k: v for k, v in series.items() if k.endswith("/bpb")}
    end = data.get("end") or {}
    summary = (
        f"<p>final loss {fmt(end.get('final_loss'), 4)} · {fmt(end.get('tokens_per_s'), 0)} tokens/s · "
        f"params {fmt((data.get('start') or {}).get('params'))}</p>"
    )
    evals = [[esc(k), fmt(v.get("loss"), 4), fmt(v.get("bpb"), 4)] for k, v in (end.get("eval") or {}).items()]
    return (
        summary
        + line_chart(loss, title="loss", y_label="nats/token")
        + line_chart(bpb, title="bits per byte")
        + (table(["eval set", "loss", "bits per byte"], evals) if evals else "")
    )


def report_data(root: Root, request: Request) -> dict:
    return training.report_view(root, _param(request, "path", True))


def render_report(root: Root, data: dict) -> str:
    verdicts = [
        [
            esc(v.get("mixture")),
            esc(v.get("derivation")),
            f'<b class="verdict {esc(v.get("verdict"))}">{esc(v.get("verdict"))}</b>',
            esc(v.get("line")),
        ]
        for v in data["verdicts"]
    ]
    items = [{"label": f"{d['mixture']} · {d['eval_set']} · {d['metric']}", **d} for d in data["differences"]]
    charts = []
    keys = sorted({k.rsplit("/", 1)[0] for k in data["curves"]})
    for key in keys:
        series = {k.rsplit("/", 1)[1]: v for k, v in data["curves"].items() if k.rsplit("/", 1)[0] == key}
        charts.append(line_chart(series, title=f"{key} (mean over seeds)"))
    return (
        f"<p>baseline <b>{esc(data['baseline'])}</b> · metric {esc(data['metric'])} · confidence "
        f"{fmt(data['confidence'], 2)} · seeds {esc(data['seeds'])}</p>"
        + table(["candidate", "derivation", "verdict", "summary"], verdicts, id="verdicts")
        + interval_chart(items, title=f"paired difference vs {data['baseline']} (candidate − baseline; < 0 is better)")
        + "".join(charts)
        + "".join(f"<p class=muted>{esc(n)}</p>" for n in data["notes"])
    )


PAGES: tuple[tuple[str, Any, Any, str, str], ...] = (
    ("/", runs_data, render_runs_page, "Runs", "runs"),
    ("/documents", documents_data, render_documents, "Documents", "documents"),
    ("/documents/doc", document_data, render_document, "Document", "documents"),
    ("/removed", removed_data, render_removed, "Removed, and why", "removed"),
    ("/removed/pair", pair_data, render_pair, "Removed document and its keeper", "removed"),
    ("/stores", stores_data, render_stores, "Token stores and mixtures", "stores"),
    ("/stores/view", store_data, render_store, "Token store", "stores"),
    ("/stores/doc", store_doc_data, render_store_doc, "Token store document", "stores"),
    ("/stores/mixture", mixture_data, render_mixture, "Mixture", "stores"),
    ("/training", training_data, render_training, "Ablations and training", "training"),
    ("/training/run", train_run_data, render_train_run, "Training run", "training"),
    ("/training/report", report_data, render_report, "Ablation report", "training"),
)
