"""The documents pages: a dataset paged and filtered, one document, what each step removed and why,
and a removed document beside its keeper."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from zephyr.ui import documents, find, removed, runs
from zephyr.ui.filters import parse_filter
from zephyr.ui.html import esc, fmt, link, pre_json, table, url
from zephyr.ui.params import query_int, query_param
from zephyr.ui.source import Root

__all__ = [
    "documents_data",
    "render_documents",
    "document_data",
    "render_document",
    "removed_data",
    "render_removed",
    "pair_data",
    "render_pair",
    "find_data",
    "render_find",
]

_TEXT_PREVIEW = 240
_PREFERRED_COLUMNS = ("id", "split", "source", "lang", "filter_reason", "dup_cluster", "dup_keep", "quality_score")


# ----------------------------------------------------------------------------------------- documents
def documents_data(root: Root, request: Request) -> dict:
    """The documents page's data: the data folders under the root, or a page of one folder's rows (filtered,
    searched)."""
    dataset = request.query_params.get("dataset")
    listing = [d for d in root.datasets() if d["path"].startswith(query_param(request, "prefix"))]
    if dataset is None:
        return {"datasets": listing}
    expr = parse_filter(query_param(request, "filter"))
    result = documents.page(
        root,
        dataset,
        expr=expr,
        q=query_param(request, "q") or None,
        offset=query_int(request, "offset", 0),
        limit=query_int(request, "limit", 50, 1, 1000),
        file=query_param(request, "file") or None,
    )
    result["filter_text"] = query_param(request, "filter")
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
    """The documents page: the data folders, or a page of one folder's rows with the filter and search box."""
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

    def page(offset: int) -> str:  # this listing (dataset, file, filter, search) from another offset
        return url(
            "/documents",
            dataset=dataset,
            file=data.get("file"),
            filter=data.get("filter_text"),
            q=data.get("q"),
            offset=offset,
            limit=lim,
        )

    nav = []
    if off > 0:
        nav.append(link(page(max(0, off - lim)), "← previous"))
    if data["has_more"]:
        nav.append(link(page(off + lim), "next →", id="next"))
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
    """One row of a data file with every field."""
    rel, row = query_param(request, "file", True), query_int(request, "row", 0)
    expr = parse_filter(query_param(request, "filter"))
    q = query_param(request, "q")
    if q:
        from zephyr.engine.expr import col

        search = col("text").str_contains(q)
        expr = search if expr is None else expr & search
    doc = documents.get_row(root, rel, row, expr=expr)
    if doc is None:
        raise KeyError(f"{rel} has no row {row}" + (" matching the filter" if expr is not None else ""))
    return {"file": rel, "row": row, "document": doc}


def render_document(root: Root, data: dict) -> str:
    """One document: its text and every other field."""
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
    """The removed page's data: per step the counts by reason, or a page of one step's removed documents."""
    step = request.query_params.get("step")
    if not step:
        counts = removed.removed_counts(root)
        return {"steps": [{"step": k, "removed": v, "total": sum(v.values())} for k, v in counts.items()]}
    return removed.removed_page(
        root,
        step,
        reason=query_param(request, "reason") or None,
        offset=query_int(request, "offset", 0),
        limit=query_int(request, "limit", 50, 1, 1000),
    )


def render_removed(root: Root, data: dict) -> str:
    """The removed page: counts by reason per step, or one step's removed documents with the kept one for each."""
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
    """A removed duplicate beside the document kept for it, with their Jaccard similarity."""
    return removed.removed_pair(
        root, query_param(request, "step") or None, query_param(request, "id", True), _step_order(root)
    )


def render_pair(root: Root, data: dict) -> str:
    """A removed duplicate beside the document kept for it, the passages that differ highlighted."""
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


# ---------------------------------------------------------------------------------------------- find
def find_data(root: Root, request: Request) -> dict:
    """The find page's data: for the `id` asked, the steps that removed it, the token stores holding it and
    the document itself (`find.find_by_id`)."""
    return find.find_by_id(root, query_param(request, "id", True), _step_order(root))


def render_find(root: Root, data: dict) -> str:
    """The find page: where a document id went (removed by which step and why, kept in which token stores)."""
    doc_id = data["id"]
    removals = data["removed"]
    if removals:
        rows = [
            [
                link(url("/removed", step=r["step"]), r["step"]),
                f"<b>{esc(r.get('reason'))}</b>",
                link(url("/find", id=r["keeper"]), r["keeper"]) if r.get("keeper") else "<span class=muted>none</span>",
                esc(r.get("split")),
                link(
                    url("/removed/pair", step=r["step"], id=doc_id),
                    "removed beside kept" if r.get("keeper") else "open",
                ),
            ]
            for r in removals
        ]
        gone = "<h2>Removed</h2>" + table(["step", "reason", "kept in its place", "split", ""], rows, id="find-removed")
    else:
        gone = "<h2>Removed</h2><p id=find-removed class=muted>no step removed it (no lineage lists this id)</p>"
    if data["tokens"]:
        rows = [
            [
                link(url("/stores/view", path=t["store"]), t["store"]),
                esc(t.get("split")),
                link(url("/stores/doc", path=t["store"], index=t["index"]), f"document {t['index']}"),
                fmt(t["tokens"]),
            ]
            for t in data["tokens"]
        ]
        tokens = "<h2>Tokens</h2>" + table(["token store", "split", "document", "tokens"], rows, id="find-tokens")
    else:
        tokens = "<h2>Tokens</h2><p id=find-tokens class=muted>in no token store under this root</p>"
    doc = data.get("document")
    if doc is None:
        found = "<h2>Document</h2><p id=find-doc class=muted>not found in any dataset folder under this root</p>"
    else:
        folder = doc["_file"].rsplit("/", 1)[0] if "/" in doc["_file"] else ""
        opened = link(url("/documents", dataset=folder, filter=f"id == {json.dumps(str(doc_id))}"), doc["_file"])
        text = str(doc.get("text") or "")
        found = (
            f"<h2>Document</h2><p id=find-doc>first found in {opened}</p>"
            f"<div class=doctext>{esc(text[:2000])}{'…' if len(text) > 2000 else ''}</div>"
        )
    return f"<p>document <code id=find-id>{esc(doc_id)}</code></p>" + gone + tokens + found
