"""Find one document by its id: which step removed it and why, the document kept in its place, its tokens.

A user often starts from an id (a line in a log, a row a colleague pasted), not from a step. The
removed-and-why pages are organised by step and the token store pages by position, so this module
answers the id question across the whole root:

- every step's lineage side output (`<step>/_removed/part-*.parquet`) is scanned with `id == ...`
  pushed into the parquet reader (row groups that cannot hold the id are skipped), giving the step,
  the reason and the keeper;
- every token store is looked up through its per-document index (`documents.parquet` per shard,
  `TokenStore.document_index()`), which maps an id to the store's document number; the index is
  read once per store and cached, so later searches are a filter over one column in memory;
- the document itself is read from the first dataset folder (in run order) that holds it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import BadInputError
from zephyr.ui import removed, stores
from zephyr.ui.documents import find_document
from zephyr.ui.source import Root

__all__ = ["find_by_id", "removed_by_id", "tokens_by_id"]


def removed_by_id(root: Root, doc_id: str) -> list[dict]:
    """Every lineage row naming `doc_id` as removed, with the step it is in (normally one)."""
    out = []
    for step, files in removed.lineage_dirs(root).items():
        for rel in files:
            hit = removed.read_lineage(root, rel, where=pc.field("id") == doc_id)
            out.extend({"step": step, **row} for row in hit.to_pylist())
    return out


def _id_index(root: Root, path: str) -> pa.Table:
    """A store's document number by id (ids as strings), read once per store and cached."""

    def build() -> pa.Table:
        table = stores.open_store(root, path).document_index().select(["document", "id"])
        return table.set_column(1, "id", pc.cast(table.column("id"), pa.string()))

    return root.cached(f"store-id-index:{path}", build, ttl=300.0)


def tokens_by_id(root: Root, doc_id: str) -> list[dict]:
    """Where `doc_id` is in each token store: {store, split, index, tokens}; stores without it are left out."""
    out = []
    for info in stores.list_stores(root):
        index = _id_index(root, info["path"])
        hits = index.filter(pc.equal(index.column("id"), doc_id)).column("document").to_pylist()
        store = stores.open_store(root, info["path"])
        for document in hits:
            out.append(
                {
                    "store": info["path"],
                    "split": info.get("split"),
                    "index": int(document),
                    "tokens": int(len(store.document(int(document)))),
                }
            )
    return out


def find_by_id(root: Root, doc_id: str, steps_in_order: list[str]) -> dict[str, Any]:
    """Everything the root knows about `doc_id`: removed by which step(s) and why, with the keeper; the
    token stores holding it; the document itself (from the first folder, in run order, that has it)."""
    doc_id = doc_id.strip()
    if not doc_id:
        raise ValueError("give a document id to find, e.g. /find?id=<id>")
    removals = removed_by_id(root, doc_id)
    folders = removed.input_folders(root, removals[0]["step"], steps_in_order) if removals else []
    if not folders:
        folders = [d["path"] for d in root.datasets() if not d["lineage"]]
        order = {step: i for i, step in enumerate(steps_in_order)}
        folders.sort(key=lambda f: order.get(f.split("/")[0], len(order)))
    document = None
    for folder in folders:
        try:
            document = find_document(root, doc_id, [folder])
        except BadInputError:
            continue  # a folder whose records have no id field (training metrics, reports): not documents
        if document is not None:
            break
    return {
        "id": doc_id,
        "removed": removals,
        "tokens": tokens_by_id(root, doc_id),
        "document": document,
    }
