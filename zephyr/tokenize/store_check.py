"""Checking and describing token stores: ``zephyr verify`` and ``zephyr inspect``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .store import TokenStore
from .store_format import DOCUMENT_INDEX, file_digest, token_dtype

__all__ = ["VerifyReport", "inspect_store", "verify_store"]


@dataclass(frozen=True)
class VerifyReport:
    """Result of :func:`verify_store`; ``ok`` is true when ``problems`` is empty."""

    path: str
    documents: int
    tokens: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(path: str | os.PathLike[str], *, check_ids: bool = True) -> VerifyReport:
    """Check a store against its manifest: files, sizes, offsets, counts, ids < vocab_size.

    Looks at everything and reports every problem (each naming the shard)
    instead of stopping at the first. A ``validation/`` sub-store is checked too.
    A remote store is checked in its local cache copy (fetched first).
    """
    problems: list[str] = []
    try:
        store = TokenStore(path)
    except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError) as exc:
        return VerifyReport(os.fspath(path), 0, 0, (f"cannot open store: {exc}",))
    root = store.path
    m = store.manifest
    for key in ("dtype", "vocab_size", "documents", "tokens", "tokenizer", "shards", "config_hash"):
        if key not in m:
            problems.append(f"manifest.json lacks field {key!r}")
    if store.dtype != token_dtype(store.vocab_size):
        problems.append(
            f"dtype {store.dtype.name} does not match vocab_size {store.vocab_size} "
            f"(expected {token_dtype(store.vocab_size).name})"
        )
    doc_total = tok_total = 0
    from zephyr.progress import TaskProgress

    progress = TaskProgress(f"verify {store.location}", len(m["shards"]), "shards", log_every_s=10.0, min_log_s=5.0)
    for s in m["shards"]:
        progress.advance()
        where = f"shard {s['path']}"
        d = root / s["path"]
        tb, ob = d / "tokens.bin", d / "offsets.npy"
        if not tb.is_file() or not ob.is_file():
            problems.append(f"{where}: missing {'tokens.bin' if not tb.is_file() else 'offsets.npy'}")
            continue
        expected = int(s["tokens"]) * store.dtype.itemsize
        if tb.stat().st_size != expected:
            problems.append(
                f"{where}: tokens.bin has {tb.stat().st_size} bytes, expected {expected} "
                f"({s['tokens']} tokens x {store.dtype.itemsize})"
            )
        try:
            ends = np.load(ob, mmap_mode="r")
        except ValueError as exc:
            problems.append(f"{where}: offsets.npy unreadable: {exc}")
            continue
        if ends.dtype != np.int64 or ends.ndim != 1:
            problems.append(f"{where}: offsets.npy is {ends.dtype}{list(ends.shape)}, expected int64 1-D")
        if len(ends) != int(s["documents"]):
            problems.append(f"{where}: offsets.npy has {len(ends)} entries, manifest says {s['documents']} documents")
        if len(ends):
            steps = np.diff(np.asarray(ends), prepend=0)
            if (steps < 0).any():
                bad = int(np.argmax(steps < 0))
                problems.append(
                    f"{where}: offsets decrease at document {bad} ({int(ends[bad - 1])} -> {int(ends[bad])})"
                )
            if int(ends[-1]) != int(s["tokens"]):
                problems.append(f"{where}: last offset {int(ends[-1])} != manifest tokens {s['tokens']}")
        elif int(s["tokens"]):
            problems.append(f"{where}: no documents but {s['tokens']} tokens")
        for name, want in s.get("xxh3_64", {}).items():
            if (got := file_digest(d / name)) != want:
                problems.append(
                    f"{where}: {name} has XXH3-64 digest {got}, the manifest says {want} (changed after it was written)"
                )
        if check_ids and tb.is_file() and tb.stat().st_size == expected and expected:
            arr = np.memmap(tb, dtype=store.dtype, mode="r")
            top = max(int(arr[i : i + (1 << 24)].max()) for i in range(0, len(arr), 1 << 24))
            if top >= store.vocab_size:
                problems.append(f"{where}: token id {top} >= vocab_size {store.vocab_size}")
        doc_total += int(s["documents"])
        tok_total += int(s["tokens"])
    progress.finish()
    if doc_total != m.get("documents"):
        problems.append(f"manifest documents {m.get('documents')} != sum over shards {doc_total}")
    if tok_total != m.get("tokens"):
        problems.append(f"manifest tokens {m.get('tokens')} != sum over shards {tok_total}")
    problems.extend(_stray_files(root, [s["path"] for s in m["shards"]]))
    if (root / "validation").is_dir():
        sub = verify_store(root / "validation", check_ids=check_ids)
        problems.extend(f"validation/: {p}" for p in sub.problems)
    return VerifyReport(store.location, doc_total, tok_total, tuple(problems))


def _stray_files(root: Path, shard_paths: Sequence[str]) -> list[str]:
    """Files in the store that its manifest does not account for: a killed writer's ``.tmp-*`` file, a shard
    directory of another run. A reader that globs the store (or copies it) would pick them up.
    ``validation/`` is checked as a store of its own; ``.next/`` is an unfinished replacement's staging."""
    expected = {"manifest.json"} | {
        f"{p}/{name}" for p in shard_paths for name in ("tokens.bin", "offsets.npy", "shard.json", DOCUMENT_INDEX)
    }
    stray = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir() or rel.startswith(("validation/", ".next/")) or rel in expected:
            continue
        stray.append(
            f"stray file {rel}: not in the manifest (a temporary file of a killed run, or a shard of another "
            "run); remove it, or rerun tokenize on the store, which removes it"
        )
    return stray


def _histogram_lines(lengths: np.ndarray, width: int = 40) -> list[str]:
    if not len(lengths):
        return ["  (no documents)"]
    top = int(lengths.max())
    edges = [0] + [1 << k for k in range(0, max(1, top.bit_length()) + 1)]
    counts = np.histogram(lengths, bins=np.asarray(edges + [edges[-1] * 2]))[0]
    lines, peak = [], max(1, int(counts.max()))
    for lo, hi, c in zip(edges, edges[1:] + [edges[-1] * 2], counts, strict=False):
        if c:
            lines.append(f"  [{lo:>9,}, {hi:>9,}) {int(c):>9,} {'#' * max(1, round(width * int(c) / peak))}")
    return lines


def inspect_store(path: str | os.PathLike[str], *, samples: int = 3, max_chars: int = 400, decode: bool = True) -> str:
    """A readable report: counts, tokenizer, document-length histogram, decoded samples.

    Samples are decoded with the tokenizer named in the manifest when it can be
    loaded and its content hash matches; otherwise their first ids are shown.
    """
    store = TokenStore(path)
    lengths = store.document_lengths()
    tok = store.tokenizer
    lines = [
        f"store      {store.location}" + (f" (cached at {store.path})" if store.url else ""),
        f"split      {store.manifest.get('split')}   shards {store.num_shards}   dtype {store.dtype.name}",
        f"documents  {store.num_documents:,}",
        f"tokens     {store.num_tokens:,}",
        f"tokenizer  {tok.get('name')} (vocab {tok.get('vocab_size'):,}, hash {tok.get('content_hash')}, "
        f"bos {tok.get('bos_token')!r}, eos {tok.get('eos_token')!r})",
    ]
    if len(lengths):
        q = np.percentile(lengths, [50, 90, 99])
        lines.append(
            f"doc length mean {lengths.mean():,.1f}  p50 {q[0]:,.0f}  p90 {q[1]:,.0f}  p99 {q[2]:,.0f}  "
            f"max {int(lengths.max()):,}"
        )
    if store.manifest.get("skipped"):
        lines.append("skipped    " + ", ".join(f"{k}={v}" for k, v in store.manifest["skipped"].items()))
    lines.append("document length histogram (tokens):")
    lines.extend(_histogram_lines(lengths))
    if store.validation is not None:
        v = store.validation
        lines.append(f"validation {v.num_documents:,} documents, {v.num_tokens:,} tokens")
    decoder = None
    if decode and samples:
        decoder = _decoder_for(tok)
    if samples and store.num_documents:
        picks = np.linspace(0, store.num_documents - 1, num=min(samples, store.num_documents)).astype(int)
        lines.append("samples:" + ("" if decoder else " (tokenizer unavailable or hash differs: showing ids)"))
        for i in sorted(set(picks.tolist())):
            ids = np.asarray(store.document(i))
            if decoder is not None:
                text = decoder(ids[: max_chars * 2])
                shown = repr(text[:max_chars]) + (" ..." if len(text) > max_chars or len(ids) > max_chars * 2 else "")
            else:
                shown = str(ids[:32].tolist()) + (" ..." if len(ids) > 32 else "")
            lines.append(f"  doc {i} ({len(ids):,} tokens): {shown}")
    return "\n".join(lines)


def _decoder_for(tok: dict[str, Any]) -> Any:
    try:
        from .tokenizer import TokenizerSpec, load_tokenizer

        loaded = load_tokenizer(TokenizerSpec(source=tok.get("source") or tok["name"], engine="tokenizers"))
    except Exception:  # noqa: BLE001 - inspection must work without the tokenizer
        return None
    if loaded.info.content_hash != tok.get("content_hash"):
        return None
    return loaded.decode
