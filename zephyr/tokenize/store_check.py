"""Checking and describing token stores: ``zephyr verify`` and ``zephyr inspect``, local or on a bucket.

Neither copies a bucket store: ``inspect`` reads the manifest, the offsets and a few documents by range;
``verify`` lists the store once and streams every file once.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from .store import TokenStore
from .store_format import CHUNK_BYTES, CHUNK_DIGESTS, DOCUMENT_INDEX, chunk_seed, is_remote, parse_manifest, token_dtype
from .store_remote import remote_manifest, stream_tokens_file

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
    """Check a store against its manifest: files, sizes, offsets, counts, digests, ids < vocab_size.

    Looks at everything and reports every problem (each naming the shard, and the chunk for a damaged
    range) instead of stopping at the first. A ``validation/`` sub-store is checked too. A bucket store is
    checked where it is: one listing, then every file streamed once (``tokens.bin`` in 8 MiB blocks), with
    no copy and no use of the chunk cache.
    """
    from zephyr.fs import join, url_to_fs
    from zephyr.progress import TaskProgress

    location = os.fspath(path).rstrip("/") if is_remote(path) else os.fspath(path)
    try:
        if is_remote(location):
            manifest_bytes = remote_manifest(location)
        else:
            manifest_path = Path(location) / "manifest.json"
            if not manifest_path.is_file():
                raise FileNotFoundError(f"{manifest_path} not found: {location} is not a complete token store.")
            manifest_bytes = manifest_path.read_bytes()
        m = parse_manifest(location, manifest_bytes)
        fs, root = url_to_fs(location)
        listing = {
            name[len(root) + 1 :]: int(info.get("size") or 0) for name, info in fs.find(root, detail=True).items()
        }
    except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError) as exc:
        return VerifyReport(location, 0, 0, (f"cannot open store: {exc}",))
    problems: list[str] = []
    for key in ("dtype", "vocab_size", "documents", "tokens", "tokenizer", "shards", "config_hash"):
        if key not in m:
            problems.append(f"manifest.json lacks field {key!r}")
    dtype, vocab_size = np.dtype(m["dtype"]), int(m["vocab_size"])
    if dtype != token_dtype(vocab_size):
        problems.append(
            f"dtype {dtype.name} does not match vocab_size {vocab_size} (expected {token_dtype(vocab_size).name})"
        )
    doc_total = tok_total = 0
    progress = TaskProgress(f"verify {location}", len(m["shards"]), "shards", log_every_s=10.0, min_log_s=5.0)
    for s in m["shards"]:
        progress.advance()
        shard = _ShardCheck(fs, f"{root}/{s['path']}", s, dtype, listing, int(m.get("chunk_bytes") or 0))
        problems.extend(shard.problems(check_ids=check_ids, vocab_size=vocab_size))
        doc_total += int(s["documents"])
        tok_total += int(s["tokens"])
    progress.finish()
    if doc_total != m.get("documents"):
        problems.append(f"manifest documents {m.get('documents')} != sum over shards {doc_total}")
    if tok_total != m.get("tokens"):
        problems.append(f"manifest tokens {m.get('tokens')} != sum over shards {tok_total}")
    problems.extend(_stray_files(listing, [s["path"] for s in m["shards"]]))
    if "validation/manifest.json" in listing:
        sub = verify_store(join(location, "validation"), check_ids=check_ids)
        problems.extend(f"validation/: {p}" for p in sub.problems)
    return VerifyReport(location, doc_total, tok_total, tuple(problems))


@dataclass(frozen=True)
class _ShardCheck:
    """One shard's checks, over any fsspec filesystem (``base`` is the shard's path there)."""

    fs: Any
    base: str
    info: dict[str, Any]
    dtype: np.dtype
    listing: dict[str, int]  # every file of the store: path relative to the store -> size
    chunk_bytes: int

    def size(self, name: str) -> int | None:
        return self.listing.get(f"{self.info['path']}/{name}")

    def problems(self, *, check_ids: bool, vocab_size: int) -> list[str]:
        where, s = f"shard {self.info['path']}", self.info
        missing = [n for n in ("tokens.bin", "offsets.npy") if self.size(n) is None]
        if missing:
            return [f"{where}: missing {missing[0]}"]
        out: list[str] = []
        expected = int(s["tokens"]) * self.dtype.itemsize
        if self.size("tokens.bin") != expected:
            out.append(
                f"{where}: tokens.bin has {self.size('tokens.bin')} bytes, expected {expected} "
                f"({s['tokens']} tokens x {self.dtype.itemsize})"
            )
        listed = {"offsets.npy", *s.get("xxh3_64", {})} - {"tokens.bin"}
        out.extend(
            f"{where}: missing {n} (the manifest lists its digest)" for n in sorted(listed) if self.size(n) is None
        )
        small = {n: self.fs.cat_file(f"{self.base}/{n}") for n in sorted(listed) if self.size(n) is not None}
        out.extend(self._offsets(where, small["offsets.npy"]))
        digests = s.get("xxh3_64", {})
        bad_files = set()
        for name, data in small.items():
            if name in digests and (got := xxhash.xxh3_64_hexdigest(data)) != digests[name]:
                bad_files.add(name)
                out.append(
                    f"{where}: {name} has XXH3-64 digest {got}, the manifest says {digests[name]} "
                    "(changed after it was written)"
                )
        if self.chunk_bytes and CHUNK_DIGESTS not in digests:
            out.append(f"{where}: no {CHUNK_DIGESTS} although the manifest sets chunk_bytes {self.chunk_bytes}")
        out.extend(
            self._tokens(
                where,
                small.get(CHUNK_DIGESTS) if CHUNK_DIGESTS not in bad_files else None,
                check_ids=check_ids,
                vocab_size=vocab_size,
                expected=expected,
            )
        )
        return out

    def _offsets(self, where: str, data: bytes) -> list[str]:
        s = self.info
        try:
            ends = np.load(io.BytesIO(data))
        except ValueError as exc:
            return [f"{where}: offsets.npy unreadable: {exc}"]
        out = []
        if ends.dtype != np.int64 or ends.ndim != 1:
            out.append(f"{where}: offsets.npy is {ends.dtype}{list(ends.shape)}, expected int64 1-D")
        if len(ends) != int(s["documents"]):
            out.append(f"{where}: offsets.npy has {len(ends)} entries, manifest says {s['documents']} documents")
        if len(ends):
            steps = np.diff(np.asarray(ends), prepend=0)
            if (steps < 0).any():
                bad = int(np.argmax(steps < 0))
                out.append(f"{where}: offsets decrease at document {bad} ({int(ends[bad - 1])} -> {int(ends[bad])})")
            if int(ends[-1]) != int(s["tokens"]):
                out.append(f"{where}: last offset {int(ends[-1])} != manifest tokens {s['tokens']}")
        elif int(s["tokens"]):
            out.append(f"{where}: no documents but {s['tokens']} tokens")
        return out

    def _tokens(
        self, where: str, chunk_file: bytes | None, *, check_ids: bool, vocab_size: int, expected: int
    ) -> list[str]:
        """Stream tokens.bin once: its digest, every chunk against tokens.xxh3, the largest id."""
        want = self.info.get("xxh3_64", {}).get("tokens.bin")
        if want is None and not check_ids:
            return []
        step = self.chunk_bytes or CHUNK_BYTES
        digests = np.frombuffer(chunk_file, dtype="<u8") if chunk_file is not None and want is not None else None
        whole, top, bad = xxhash.xxh3_64(), -1, []
        itemsize = self.dtype.itemsize
        blocks = stream_tokens_file(
            self.fs, f"{self.base}/tokens.bin", chunk_bytes=step, seed=chunk_seed(want) if want else 0, digests=digests
        )
        for block in blocks:
            whole.update(block.data)
            bad.extend(block.bad_chunks)
            usable = len(block.data) // itemsize * itemsize
            if check_ids and usable:
                top = max(top, int(np.frombuffer(block.data[:usable], dtype=self.dtype).max()))
        out = []
        if want is not None and whole.hexdigest() != want:
            out.append(
                f"{where}: tokens.bin has XXH3-64 digest {whole.hexdigest()}, the manifest says {want} "
                "(changed after it was written)"
            )
        if bad:
            shown = ", ".join(f"{c} (bytes [{c * step}, {(c + 1) * step}))" for c in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            out.append(f"{where}: tokens.bin chunk(s) {shown}{more} do not match {CHUNK_DIGESTS}")
        if top >= vocab_size and self.size("tokens.bin") == expected:
            out.append(f"{where}: token id {top} >= vocab_size {vocab_size}")
        return out


def _stray_files(listing: dict[str, int], shard_paths: Sequence[str]) -> list[str]:
    """Files in the store that its manifest does not account for: a killed writer's ``.tmp-*`` file, a shard
    directory of another run. A reader that globs the store (or copies it) would pick them up.
    ``validation/`` is checked as a store of its own; ``.next/`` is an unfinished replacement's staging."""
    names = ("tokens.bin", "offsets.npy", CHUNK_DIGESTS, "shard.json", DOCUMENT_INDEX)
    expected = {"manifest.json"} | {f"{p}/{name}" for p in shard_paths for name in names}
    return [
        f"stray file {rel}: not in the manifest (a temporary file of a killed run, or a shard of another "
        "run); remove it, or rerun tokenize on the store, which removes it"
        for rel in sorted(listing)
        if not rel.startswith(("validation/", ".next/")) and rel not in expected
    ]


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
        f"store      {store.location}" + (f" (cached at {store.path})" if store.url and store.path else ""),
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
