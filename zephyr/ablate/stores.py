"""Derived token stores for ablations: token-shuffled copies (negative controls) and capped subsets
(matched exposure), plus the bytes-per-token figure that turns eval loss into bits per byte.

Derived stores are ordinary token stores (same layout, same tokenizer record
in ``manifest.json``), so the trainer and any reader treat them like the
originals. Each is a pure function of its source store and its parameters:
its ``config_hash`` records both, and writing it again with the same inputs
reuses the finished store instead of rewriting it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from .config import ExposureSpec

__all__ = [
    "StoreSummary",
    "store_summary",
    "write_shuffled_store",
    "write_capped_store",
    "ExposureCap",
    "exposure_cap",
    "eval_bytes_per_token",
]


@dataclass(frozen=True)
class StoreSummary:
    """What an ablation needs to know about a store, read from its manifest."""

    path: str
    tokens: int
    documents: int
    vocab_size: int
    tokenizer_hash: str | None
    tokenizer_name: str | None
    eos_id: int | None
    config_hash: str | None


def _manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    manifest = Path(path) / "manifest.json"
    if not manifest.is_file():
        hint = " (a tokenize run that has not finished?)" if Path(path).is_dir() else ""
        raise FileNotFoundError(
            f"{manifest} not found: {path} is not a complete token store{hint}. "
            "Write one with `zephyr tokenize INPUT_GLOB OUTPUT` or zephyr.tokenize.tokenize_dataset()."
        )
    return json.loads(manifest.read_text())


def store_summary(path: str | os.PathLike[str]) -> StoreSummary:
    """Counts and tokenizer identity of the store at ``path`` (manifest only; no token is read)."""
    m = _manifest(path)
    tok = m.get("tokenizer") or {}
    eos = tok.get("eos_id", m.get("eos_id"))
    return StoreSummary(
        str(Path(path).absolute()),
        int(m["tokens"]),
        int(m["documents"]),
        int(m["vocab_size"]),
        tok.get("content_hash"),
        tok.get("name"),
        None if eos is None else int(eos),
        m.get("config_hash"),
    )


def _derived_hash(source: StoreSummary, derivation: dict[str, Any]) -> str:
    payload = {
        "source_config_hash": source.config_hash,
        "source_tokens": source.tokens,
        "source_documents": source.documents,
        "derivation": derivation,
    }
    return xxhash.xxh3_64_hexdigest(json.dumps(payload, sort_keys=True).encode())


def _reusable(destination: Path, config_hash: str) -> bool:
    manifest = destination / "manifest.json"
    return manifest.is_file() and json.loads(manifest.read_text()).get("config_hash") == config_hash


def _write_store(
    source: str,
    destination: Path,
    shards: list[tuple[np.ndarray, np.ndarray]],
    *,
    derivation: dict[str, Any],
    config_hash: str,
) -> str:
    """Write ``shards`` (flat ids, document lengths) as a complete store; the manifest goes last."""
    from zephyr.tokenize.store_format import token_dtype
    from zephyr.tokenize.store_write import ShardWriter, write_manifest

    m = _manifest(source)
    if destination.exists():  # a stale or partial derived store: it is ours to replace
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    dtype = token_dtype(int(m["vocab_size"]))
    records = []
    for i, (flat, lengths) in enumerate(shards):
        with ShardWriter(
            destination,
            f"shards/{i:05d}",
            dtype=dtype,
            vocab_size=int(m["vocab_size"]),
            source=str(source),
            config_hash=config_hash,
        ) as writer:
            writer.add_flat(flat, lengths)
            records.append(writer.close())
    write_manifest(
        destination,
        shards=records,
        dtype=dtype,
        tokenizer=m["tokenizer"],
        sources=[str(source)],
        split=m.get("split", "train"),
        config={"derived_from": str(source), "derivation": derivation},
        config_hash=config_hash,
    )
    return str(destination)


def write_shuffled_store(source: str | os.PathLike[str], destination: str | os.PathLike[str], *, seed: int = 0) -> str:
    """Write a copy of ``source`` whose tokens are shuffled inside each document: a negative control.

    Each document keeps its length and its bag of tokens (so unigram statistics
    are unchanged) but loses all word order, so training on it should only ever
    hurt held-out loss. A leading BOS and a trailing EOS stay in place, so
    document boundaries are unchanged. Deterministic in ``seed``. Returns the
    destination path; an existing copy with the same source and seed is reused.
    """
    from zephyr.tokenize.store import TokenStore

    src = store_summary(source)
    derivation = {"kind": "token_shuffle", "scope": "document", "seed": int(seed)}
    config_hash = _derived_hash(src, derivation)
    dest = Path(destination)
    if _reusable(dest, config_hash):
        return str(dest)
    store = TokenStore(source)
    tok = store.tokenizer
    bos, eos = tok.get("bos_id") if store.manifest.get("config", {}).get("add_bos") else None, tok.get("eos_id")
    rng = np.random.default_rng([int(seed), 0x5EED])
    all_lengths = store.document_lengths()
    shards, doc_start, tok_start = [], 0, 0
    for entry in store.manifest["shards"]:  # one shard at a time keeps memory at one shard
        n_docs, n_tokens = int(entry["documents"]), int(entry["tokens"])
        tokens = np.asarray(store.tokens(tok_start, tok_start + n_tokens))
        lengths = np.asarray(all_lengths[doc_start : doc_start + n_docs], dtype=np.int64)
        doc_start, tok_start = doc_start + n_docs, tok_start + n_tokens
        ends = np.cumsum(lengths)
        starts = ends - lengths
        doc = np.repeat(np.arange(len(lengths)), lengths)  # document of each token
        key = rng.random(len(tokens))
        nonempty = lengths > 0
        if eos is not None:  # pin a trailing EOS last
            last = ends[nonempty] - 1
            key[last[tokens[last] == eos]] = 2.0
        if bos is not None:  # and a leading BOS first
            first = starts[nonempty]
            key[first[tokens[first] == bos]] = -1.0
        order = np.lexsort((key, doc))
        shards.append((tokens[order], lengths))
    return _write_store(str(Path(source).absolute()), dest, shards, derivation=derivation, config_hash=config_hash)


def write_capped_store(
    source: str | os.PathLike[str], destination: str | os.PathLike[str], *, max_tokens: int, seed: int = 0
) -> str:
    """Write a subset of ``source`` holding ``max_tokens`` tokens (whole documents, the last one cut).

    Documents are taken in a seeded random order until the budget is reached;
    the document that would overflow it is cut to fit (keeping its EOS), so the
    subset holds exactly ``max_tokens`` tokens (or the whole store if smaller).
    With one seed, a smaller cap selects a prefix of a larger cap's documents,
    so a sweep of caps compares nested subsets. Returns the destination path.
    """
    from zephyr.tokenize.store import TokenStore

    if max_tokens < 2:
        raise ValueError(f"max_tokens must be at least 2 (one token and its EOS), got {max_tokens}.")
    src = store_summary(source)
    derivation = {"kind": "cap", "max_tokens": int(max_tokens), "seed": int(seed)}
    config_hash = _derived_hash(src, derivation)
    dest = Path(destination)
    if _reusable(dest, config_hash):
        return str(dest)
    store = TokenStore(source)
    eos = store.tokenizer.get("eos_id")
    lengths = store.document_lengths()
    order = np.random.default_rng([int(seed), 0xCA9]).permutation(len(lengths))
    cumulative = np.cumsum(lengths[order])
    whole = int(np.searchsorted(cumulative, max_tokens, side="right"))  # documents that fit entirely
    taken = int(cumulative[whole - 1]) if whole else 0
    pieces, piece_lengths = [np.asarray(store.document(int(i))) for i in order[:whole]], list(lengths[order[:whole]])
    left = max_tokens - taken
    if whole < len(order) and left >= 2:
        cut = np.asarray(store.document(int(order[whole])))[:left].copy()
        if eos is not None and cut[-1] != eos:
            cut[-1] = eos
        pieces.append(cut)
        piece_lengths.append(len(cut))
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=store.dtype)
    return _write_store(
        str(Path(source).absolute()),
        dest,
        [(flat, np.asarray(piece_lengths, dtype=np.int64))],
        derivation=derivation,
        config_hash=config_hash,
    )


@dataclass(frozen=True)
class ExposureCap:
    """How matched exposure treats one dataset in one mixture.

    ``cap_tokens`` is the number of unique tokens to keep (None: keep all);
    ``production_epochs`` the passes production makes over the dataset,
    ``ablation_epochs`` the passes this ablation will make after capping.
    ``note`` says when the target cannot be met (the ablation then repeats the
    dataset more often than production will, even with every token kept).
    """

    dataset: str
    share: float
    unique_tokens: int
    cap_tokens: int | None
    production_epochs: float
    ablation_epochs: float
    note: str = ""


def exposure_cap(
    dataset: str, *, unique_tokens: int, share: float, ablation_tokens: int, spec: ExposureSpec
) -> ExposureCap:
    """Unique tokens to keep so that epochs over ``dataset`` in the ablation equal production's.

    Production makes ``E = production_weight * production_tokens / unique_tokens``
    passes (or ``production_epochs`` when given); the ablation trains on
    ``share * ablation_tokens`` tokens of the dataset, so keeping
    ``share * ablation_tokens / E`` unique tokens makes it ``E`` passes too.
    """
    seen = share * ablation_tokens
    if spec.production_epochs is not None:
        target = float(spec.production_epochs)
    else:
        weight = spec.production_weight if spec.production_weight is not None else share
        target = weight * float(spec.production_tokens) / unique_tokens
    cap = int(math.floor(seen / target)) if target > 0 else unique_tokens
    if cap >= unique_tokens:
        epochs = seen / unique_tokens
        note = (
            ""
            if math.isclose(epochs, target, rel_tol=1e-6)
            else f"cannot match: even all {unique_tokens:,} tokens give {epochs:.3g} epochs, more than production's "
            f"{target:.3g}; the ablation over-repeats {dataset}"
        )
        return ExposureCap(dataset, share, unique_tokens, None, target, epochs, note)
    return ExposureCap(dataset, share, unique_tokens, cap, target, seen / max(cap, 1))


def eval_bytes_per_token(
    path: str | os.PathLike[str], *, seq_len: int, batch_size: int, eval_batches: int
) -> float | None:
    """UTF-8 bytes per token of exactly the targets the trainer evaluates in this store, or None.

    The trainer scores the first ``min(windows, batch_size * eval_batches)``
    windows of ``seq_len + 1`` tokens, i.e. target tokens ``[1, n * seq_len + 1)``
    of the stream. Those are decoded with the store's tokenizer (special tokens
    count as zero bytes), so bits per byte compares models across tokenizers.
    None when the tokenizer cannot be loaded or its content hash differs from
    the one recorded in the manifest.
    """
    from zephyr.tokenize.store import TokenStore

    store = TokenStore(path)
    n = min(store.num_windows(seq_len), batch_size * eval_batches)
    if n < 1:
        return None
    ids = np.asarray(store.tokens(1, n * seq_len + 1))
    tok = store.tokenizer
    try:
        from zephyr.tokenize.tokenizer import TokenizerSpec, load_tokenizer

        loaded = load_tokenizer(TokenizerSpec(source=tok.get("source") or tok["name"], engine="tokenizers"))
    except Exception:  # noqa: BLE001 - bits per byte is optional; the report says when it is missing
        return None
    if loaded.info.content_hash != tok.get("content_hash"):
        return None
    text = loaded.hf.decode([int(i) for i in ids], skip_special_tokens=True)
    nbytes = len(text.encode("utf-8"))
    return nbytes / len(ids) if nbytes else None
