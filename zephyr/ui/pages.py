"""The pages: for each, a data function (request -> JSON-able dict) and a renderer (dict -> HTML body).

`PAGES` lists (path, data, render, title, nav key); `zephyr.ui.app` serves each at its path (HTML) and
at `/api<path>` (JSON; the runs page at `/api/runs`). The pages themselves are in pages_runs,
pages_documents and pages_outputs.
"""

from __future__ import annotations

from typing import Any

from zephyr.ui.pages_documents import (
    document_data,
    documents_data,
    find_data,
    pair_data,
    removed_data,
    render_document,
    render_documents,
    render_find,
    render_pair,
    render_removed,
)
from zephyr.ui.pages_outputs import (
    ladder_data,
    mixture_data,
    render_ladder,
    render_mixture,
    render_report,
    render_store,
    render_store_doc,
    render_stores,
    render_train_run,
    render_training,
    report_data,
    store_data,
    store_doc_data,
    stores_data,
    train_run_data,
    training_data,
)
from zephyr.ui.pages_runs import render_runs_page, runs_data

__all__ = ["PAGES"]

PAGES: tuple[tuple[str, Any, Any, str, str], ...] = (
    ("/", runs_data, render_runs_page, "Runs", "runs"),
    ("/documents", documents_data, render_documents, "Documents", "documents"),
    ("/documents/doc", document_data, render_document, "Document", "documents"),
    ("/removed", removed_data, render_removed, "Removed, and why", "removed"),
    ("/removed/pair", pair_data, render_pair, "Removed document and its keeper", "removed"),
    ("/find", find_data, render_find, "Find a document by id", "find"),
    ("/stores", stores_data, render_stores, "Token stores and mixtures", "stores"),
    ("/stores/view", store_data, render_store, "Token store", "stores"),
    ("/stores/doc", store_doc_data, render_store_doc, "Token store document", "stores"),
    ("/stores/mixture", mixture_data, render_mixture, "Mixture", "stores"),
    ("/training", training_data, render_training, "Ablations and training", "training"),
    ("/training/run", train_run_data, render_train_run, "Training run", "training"),
    ("/training/report", report_data, render_report, "Ablation report", "training"),
    ("/training/ladder", ladder_data, render_ladder, "Scaling ladder", "training"),
)
