"""Token stores and mixtures: counts, length histograms, decoded documents with token boundaries.

A token store is a folder with a `manifest.json` of format "zephyr-token-store" (zephyr/tokenize/store.py);
it is opened memory-mapped through `TokenStore`, so a page touches only the documents it shows. A
mixture is a `mixture.json` of `{split: [store path, weight]}` (recipes/nemotron_cc.py's mixture step):
for a token budget B, split k is sampled for `weight_k * B` tokens, i.e. `weight_k * B / tokens_k`
epochs of its store.
"""

from __future__ import annotations

import functools
import posixpath
from typing import Any

import numpy as np

from zephyr.ui.source import Root

__all__ = [
    "list_stores",
    "open_store",
    "store_view",
    "store_document",
    "warm_tokenizer",
    "list_mixtures",
    "mixture_view",
]


def list_stores(root: Root) -> list[dict]:
    """Every token store under the root: {path, documents, tokens, dtype, tokenizer, split}."""
    out = []
    for rel in root.json_files("manifest.json"):
        try:
            manifest = root.read_json(rel)
        except (OSError, ValueError):
            continue
        if not isinstance(manifest, dict) or manifest.get("format") != "zephyr-token-store":
            continue
        tok = manifest.get("tokenizer") or {}
        out.append(
            {
                "path": posixpath.dirname(rel),
                "documents": manifest.get("documents"),
                "tokens": manifest.get("tokens"),
                "dtype": manifest.get("dtype"),
                "split": manifest.get("split"),
                "tokenizer": tok.get("name"),
                "shards": len(manifest.get("shards") or []),
            }
        )
    return out


def open_store(root: Root, path: str) -> Any:
    """The token store at `path` (a store `list_stores` finds under the root), opened once a minute at most."""
    from zephyr.tokenize.store import TokenStore

    known = {s["path"] for s in list_stores(root)}
    if path not in known:
        raise KeyError(f"no token store {path!r} under {root.url}; stores: {', '.join(sorted(known)) or 'none'}")
    return root.cached("store:" + path, lambda: TokenStore(root.abs(path)), ttl=60.0)


def _histogram(lengths: np.ndarray, bins: int = 20) -> list[dict]:
    if not len(lengths):
        return []
    hi = max(1, int(lengths.max()))
    edges = np.unique(np.linspace(0, hi, bins + 1).round().astype(np.int64))
    counts, edges = np.histogram(lengths, bins=edges)
    return [{"lo": int(edges[i]), "hi": int(edges[i + 1]), "count": int(c)} for i, c in enumerate(counts)]


def store_view(root: Root, path: str, *, offset: int = 0, limit: int = 10) -> dict:
    """A store's figures, document length percentiles and histogram, and a page of documents."""
    store = open_store(root, path)
    lengths = store.document_lengths()
    q = np.percentile(lengths, [50, 90, 99]).tolist() if len(lengths) else [0, 0, 0]
    docs = []
    for i in range(offset, min(store.num_documents, offset + limit)):
        ids = np.asarray(store.document(i))
        docs.append({"index": i, "tokens": int(len(ids))})
    validation = store.validation
    return {
        "path": path,
        "documents": store.num_documents,
        "tokens": store.num_tokens,
        "dtype": store.dtype.name,
        "shards": store.num_shards,
        "tokenizer": store.tokenizer,
        "split": store.manifest.get("split"),
        "length": {
            "mean": float(lengths.mean()) if len(lengths) else 0.0,
            "p50": q[0],
            "p90": q[1],
            "p99": q[2],
            "max": int(lengths.max()) if len(lengths) else 0,
        },
        "histogram": _histogram(lengths),
        "validation": None
        if validation is None
        else {"documents": validation.num_documents, "tokens": validation.num_tokens},
        "offset": offset,
        "limit": limit,
        "docs": docs,
    }


@functools.lru_cache(maxsize=8)
def _decoder(source: str, content_hash: str | None) -> Any:
    from zephyr.tokenize.tokenizer import TokenizerSpec, load_tokenizer

    try:
        loaded = load_tokenizer(TokenizerSpec(source=source, engine="tokenizers"))
    except Exception:  # noqa: BLE001 - the page must work without the tokenizer (ids are shown instead)
        return None
    if content_hash and loaded.info.content_hash != content_hash:
        return None
    return loaded


def warm_tokenizer(root: Root, path: str) -> bool:
    """Load the tokenizer store `path` names (cached), so its first token page does not wait; True if loaded."""
    tok = open_store(root, path).tokenizer
    return _decoder(str(tok.get("source") or tok.get("name")), tok.get("content_hash")) is not None


def store_document(root: Root, path: str, index: int, *, max_tokens: int = 2000) -> dict:
    """Document `index` of a store as pieces of text, one per token (ids kept), so boundaries show."""
    store = open_store(root, path)
    if not 0 <= index < store.num_documents:
        raise KeyError(f"document {index} out of range: store {path} has {store.num_documents} documents")
    ids = np.asarray(store.document(index))[:max_tokens].tolist()
    tok = store.tokenizer
    loaded = _decoder(str(tok.get("source") or tok.get("name")), tok.get("content_hash"))
    pieces: list[dict] = []
    if loaded is not None:
        pieces = _token_pieces(loaded.decode, ids)
    return {
        "path": path,
        "index": index,
        "tokens": int(len(store.document(index))),
        "shown": len(ids),
        "decoded": loaded is not None,
        "ids": ids,
        "pieces": pieces,
        "tokenizer": tok.get("name"),
    }


def _token_pieces(decode: Any, ids: list[int], context: int = 8) -> list[dict]:
    """The text each token adds, decoding a window of `context` tokens before it (linear in the length).

    A character split across tokens (a multi-byte UTF-8 sequence in byte-level BPE) shows on the token
    that completes it; the tokens before it add "". Concatenated, the pieces are the decoded text.
    """
    pieces = []
    for k in range(len(ids)):
        start = max(0, k - context)
        before = decode(ids[start:k]) if k else ""
        while start > 0 and before.startswith("\ufffd"):  # the window began inside a character: widen it
            start -= 1
            before = decode(ids[start:k])
        window = ids[start:k]
        before = before.rstrip("\ufffd")
        after = decode(window + [ids[k]]).rstrip("\ufffd")  # an incomplete character waits for its last byte
        pieces.append({"id": ids[k], "text": after[len(before) :] if after.startswith(before) else ""})
    return pieces


def list_mixtures(root: Root) -> list[str]:
    """The folders under the root holding a `mixture.json`."""
    return [posixpath.dirname(rel) or "." for rel in root.json_files("mixture.json")]


def mixture_view(root: Root, path: str, *, budget: int | None = None, runs: list[dict] | None = None) -> dict:
    """A mixture's weights and, for a token budget, the tokens and epochs each component is sampled for.

    Without `budget`: the budget of a training run on this mixture's stores (`runs`, from
    `zephyr.ui.training.training_budgets`), else one pass over the stores.
    """
    rel = posixpath.join(path, "mixture.json") if path not in ("", ".") else "mixture.json"
    if rel not in root.files():
        raise KeyError(f"no mixture.json in {path!r} under {root.url}")
    mix = root.read_json(rel)
    stores = {s["path"]: s for s in list_stores(root)}
    base = root.base.rstrip("/")
    components = []
    for name, spec in mix.items():
        store_path, weight = (spec[0], float(spec[1])) if isinstance(spec, (list, tuple)) else (spec, 1.0)
        rel_store = str(store_path)
        if rel_store.startswith(base + "/"):
            rel_store = rel_store[len(base) + 1 :]
        info = stores.get(rel_store.rstrip("/"))
        components.append(
            {
                "name": name,
                "store": rel_store,
                "weight": weight,
                "tokens": info["tokens"] if info else None,
                "documents": info["documents"] if info else None,
            }
        )
    total_tokens = sum(c["tokens"] or 0 for c in components)
    budget_from = "given"
    if not budget:
        paths = {str(spec[0]).rstrip("/") for spec in mix.values() if isinstance(spec, (list, tuple))}
        run = next((r for r in runs or [] if paths and paths <= set(r["stores"])), None)
        budget, budget_from = (run["tokens"], f"training run {run['path']}") if run else (total_tokens, "one pass")
    for c in components:
        c["sampled_tokens"] = int(round(c["weight"] * budget))
        c["epochs"] = (c["sampled_tokens"] / c["tokens"]) if c["tokens"] else None
    return {
        "path": path,
        "budget": budget,
        "budget_from": budget_from,
        "store_tokens": total_tokens,
        "components": components,
    }
