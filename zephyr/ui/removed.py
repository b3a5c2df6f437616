"""Removed, and why: each step's lineage side output grouped by reason, and a removed document beside its keeper.

A step's removed documents are listed in `<step dir>/_removed/part-*.parquet` (written by
`zephyr.operators.lineage.drop_removed`: id, reason, keeper, cluster, source, split, chars). Text
is not copied there, so a removed document is looked up by id in the step's input (the folder of
the previous step in run order, or any dataset folder under the root as a fallback) and its keeper
in the step's own output. A fuzzy duplicate is compared with its keeper: the Jaccard similarity of
their shingle sets (the same word 5-gram shingles fuzzy dedup verifies with) and a difflib diff
whose differing passages are highlighted.
"""

from __future__ import annotations

import difflib
import html
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from zephyr.fs import url_to_fs
from zephyr.ui.documents import find_document
from zephyr.ui.source import Root

__all__ = ["lineage_dirs", "read_lineage", "removed_counts", "removed_page", "removed_pair", "jaccard", "diff_html"]

LINEAGE = "_removed"


def lineage_dirs(root: Root) -> dict[str, list[str]]:
    """Step directory (relative) -> its lineage parquet files."""
    out: dict[str, list[str]] = {}
    for rel in root.files():
        parts = rel.split("/")
        if len(parts) >= 2 and parts[-2] == LINEAGE and rel.endswith(".parquet") and not parts[-1].startswith("."):
            out.setdefault("/".join(parts[:-2]), []).append(rel)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _files(root: Root, step: str) -> list[str]:
    files = lineage_dirs(root).get(step)
    if files is None:
        raise KeyError(
            f"step {step!r} has no lineage side output ({step}/{LINEAGE}/part-*.parquet); steps with one: "
            f"{', '.join(lineage_dirs(root)) or 'none'}"
        )
    return files


def read_lineage(
    root: Root, rel: str, *, columns: list[str] | None = None, where: pc.Expression | None = None
) -> pa.Table:
    """One lineage file (or the matching rows of it: the filter is pushed into the parquet scan)."""
    fs, path = url_to_fs(root.abs(rel))
    with fs.open(path, "rb") as handle:
        return pq.read_table(handle, columns=columns, filters=where)


def _file_counts(root: Root, rel: str) -> dict[str, int]:
    """{reason: rows} of one lineage file; only the (dictionary-encoded) reason column is read. Cached."""
    mtime = root.files().get(rel, {}).get("mtime")

    def build() -> dict[str, int]:
        reasons = read_lineage(root, rel, columns=["reason"]).column("reason").combine_chunks()
        return {c["values"]: int(c["counts"]) for c in pc.value_counts(reasons).to_pylist()}

    return root.cached(f"lineage-counts:{rel}@{mtime}", build, ttl=3600.0)


def removed_counts(root: Root) -> dict[str, dict[str, int]]:
    """Step directory -> {reason: removed documents}, most frequent first."""
    out: dict[str, dict[str, int]] = {}
    for step, files in lineage_dirs(root).items():
        total: dict[str, int] = {}
        for rel in files:
            for reason, n in _file_counts(root, rel).items():
                total[reason] = total.get(reason, 0) + n
        out[step] = dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def removed_page(root: Root, step: str, *, reason: str | None = None, offset: int = 0, limit: int = 50) -> dict:
    """Removed documents of one step (optionally one reason), in lineage file order.

    Files before the page are skipped by their cached per-reason counts; only the files holding the
    page are read, with the reason pushed into the scan, so memory stays at one file's matching rows.
    """
    rows: list[dict] = []
    seen = 0
    for rel in _files(root, step):
        counts = _file_counts(root, rel)
        n = counts.get(reason, 0) if reason else sum(counts.values())
        if seen + n <= offset:
            seen += n
            continue
        table = read_lineage(root, rel, where=pc.field("reason") == reason if reason else None)
        skip = max(0, offset - seen)
        rows.extend(table.slice(skip, limit - len(rows)).to_pylist())
        seen += n
        if len(rows) >= limit:
            break
    counts = removed_counts(root).get(step, {})
    total = counts.get(reason, 0) if reason else sum(counts.values())
    return {
        "step": step,
        "reason": reason,
        "offset": offset,
        "limit": limit,
        "total": total,
        "counts": counts,
        "rows": rows,
    }


def _lineage_row(root: Root, step: str, doc_id: str) -> dict | None:
    for rel in _files(root, step):
        hit = read_lineage(root, rel, where=pc.field("id") == doc_id)
        if hit.num_rows:
            return hit.slice(0, 1).to_pylist()[0]
    return None


def input_folders(root: Root, step: str, steps_in_order: list[str], split: str | None = None) -> list[str]:
    """Dataset folders to search for a step's removed documents: the previous step's (its folder named
    after the document's split first, e.g. normalize-*/medium/), then all others."""
    folders = [d["path"] for d in root.datasets() if not d["lineage"]]
    top = step.split("/")[0]
    preferred: list[str] = []
    if top in steps_in_order:
        position = steps_in_order.index(top)
        if position > 0:
            previous = steps_in_order[position - 1]
            preferred = [f for f in folders if f == previous or f.startswith(previous + "/")]
    own = [f for f in folders if f == top or f.startswith(top + "/")]
    rest = [f for f in folders if f not in preferred and f not in own and "/work/" not in f + "/"]
    if split:
        preferred.sort(key=lambda f: f.rsplit("/", 1)[-1] != split)
    return preferred + rest + own


def output_folders(root: Root, step: str) -> list[str]:
    """The data folders a step wrote (its folder and those below it), lineage side outputs left out."""
    top = step.split("/")[0]
    return [
        d["path"] for d in root.datasets() if not d["lineage"] and (d["path"] == top or d["path"].startswith(top + "/"))
    ]


def removed_pair(root: Root, step: str | None, doc_id: str, steps_in_order: list[str]) -> dict:
    """A removed document, the document kept in its place, their Jaccard and a highlighted diff.

    Without `step`, the step whose lineage lists the id (the first in run order) is used."""
    if not step:
        listed = [s for s in lineage_dirs(root) if _lineage_row(root, s, doc_id) is not None]
        order = {name: i for i, name in enumerate(steps_in_order)}
        listed.sort(key=lambda s: order.get(s.split("/")[0], len(order)))
        if not listed:
            raise KeyError(
                f"document {doc_id!r} is in no step's list of removed documents under {root.url}; "
                f"/find?id={doc_id} says where it is"
            )
        step = listed[0]
    row = _lineage_row(root, step, doc_id)
    if row is None:
        raise KeyError(f"document {doc_id!r} is not in the lineage of step {step!r}")
    inputs = input_folders(root, step, steps_in_order, row.get("split"))
    removed_doc = find_document(root, doc_id, inputs)
    keeper_doc = None
    if row.get("keeper"):
        keeper_doc = find_document(root, row["keeper"], output_folders(root, step) + inputs)
    out: dict[str, Any] = {
        "step": step,
        "lineage": row,
        "removed": removed_doc,
        "keeper": keeper_doc,
        "jaccard": None,
        "diff": None,
    }
    if removed_doc and keeper_doc:
        a, b = str(keeper_doc.get("text") or ""), str(removed_doc.get("text") or "")
        out["jaccard"] = jaccard(a, b)
        out["identical_text"] = a == b
        out["diff"] = diff_html(a, b)
    return out


def jaccard(a: str, b: str) -> float:
    """Exact Jaccard similarity of the two texts' shingle sets (fuzzy dedup's default word 5-grams)."""
    from zephyr.operators.minhash import shingle_set

    sa, sb = shingle_set(a), shingle_set(b)
    if not len(sa) and not len(sb):
        return 1.0
    inter = len(np.intersect1d(sa, sb, assume_unique=True))
    return inter / (len(sa) + len(sb) - inter)


def diff_html(kept: str, removed: str, *, max_words: int = 20_000) -> dict[str, str]:
    """Both texts as HTML, word-level diff: passages only in one side wrapped in <mark class=...>."""
    wa, wb = kept.split(" ")[:max_words], removed.split(" ")[:max_words]
    matcher = difflib.SequenceMatcher(a=wa, b=wb, autojunk=False)
    left: list[str] = []
    right: list[str] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        ta = html.escape(" ".join(wa[a0:a1]))
        tb = html.escape(" ".join(wb[b0:b1]))
        if op == "equal":
            left.append(ta)
            right.append(tb)
            continue
        if a1 > a0:
            left.append(f'<mark class="del">{ta}</mark>')
        if b1 > b0:
            right.append(f'<mark class="ins">{tb}</mark>')
    return {"kept": " ".join(left), "removed": " ".join(right), "ratio": f"{matcher.ratio():.3f}"}
