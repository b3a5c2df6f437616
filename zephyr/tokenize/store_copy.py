"""Whole local copies of bucket token stores (``gs://``, ``s3://``), then memory-mapped: the explicit choice.

By default a bucket store is read by byte ranges (:mod:`zephyr.tokenize.store_remote`); a whole copy is
what ``TokenStore(url, copy=True)`` (the trainer's ``data.bucket_reads: copy``) asks for, and what a store
written before per-chunk digests falls back to. A store is fetched into ``store_cache_root()``, one
directory per URL and manifest content hash, checked against the manifest's sizes and digests, and
renamed into place whole; the processes of one host fetch it once (:func:`zephyr.fs.copy_once.run_once`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import numpy as np
import xxhash

from .store_format import COPY_CHUNK, atomic_bytes, file_digest, parse_manifest, store_cache_root
from .store_remote import remote_manifest

__all__ = ["materialize_store"]

_PESSIMISTIC_COPY_RATE = 20e6  # bytes/s, stretches the copy lock's lifetime for big stores
_log = logging.getLogger("zephyr.tokenize")


def materialize_store(url: str) -> Path:
    """The local copy of the remote store at ``url``, fetching it first unless the cache has it.

    The copy lives in ``store_cache_root() / <name>-<url hash>-<manifest hash>``: a store rewritten
    at the same URL (a different ``manifest.json``, which lists every data file's digest) gets a new
    directory and is fetched again (older copies stay: a process may still map them). The
    processes of one host fetch it once (:func:`zephyr.fs.copy_once.run_once`, lock under the
    cache root); the others wait and map the same copy.
    """
    import fsspec

    from zephyr.fs.copy_once import LOCK_DIRNAME, run_once

    url = url.rstrip("/")
    manifest_bytes = remote_manifest(url)
    manifest = parse_manifest(url, manifest_bytes)
    root = store_cache_root()
    name = (
        re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[-1])[-60:].strip("_")
        + "-"
        + xxhash.xxh3_64_hexdigest(url.encode())[:12]
        + "-"
        + xxhash.xxh3_64_hexdigest(manifest_bytes)
    )
    dest = root / name
    done = (dest / "manifest.json").is_file
    if done():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    size = sum(int(s["tokens"]) * np.dtype(manifest["dtype"]).itemsize for s in manifest["shards"])
    ttl = 300.0 + size / _PESSIMISTIC_COPY_RATE
    run_once(
        key=str(dest),
        lock_fs=fsspec.filesystem("file"),
        lock_path=str(root / LOCK_DIRNAME / f"{name}.lock"),
        done=done,
        action=lambda: _fetch_store(url, manifest_bytes, dest),
        ttl_s=ttl,
        wait_timeout_s=2 * ttl + 30,
    )
    return dest


def _fetch_store(url: str, manifest_bytes: bytes, dest: Path) -> None:
    """Copy the store (and its ``validation/`` split, if any) into a temporary sibling of ``dest``, then
    rename it into place: ``dest/manifest.json`` exists only once everything was copied and checked."""
    from zephyr.fs import join, url_to_fs

    tmp = dest.with_name(f".tmp-{uuid.uuid4().hex}-{dest.name}")
    _log.info("zephyr: copying token store %s into the local cache %s", url, dest)
    try:
        _fetch_tree(url, manifest_bytes, tmp)
        fs, vpath = url_to_fs(join(url, "validation", "manifest.json"))
        try:
            val_bytes = fs.cat_file(vpath)
        except FileNotFoundError:
            val_bytes = None
        if val_bytes is not None:
            _fetch_tree(join(url, "validation"), val_bytes, tmp / "validation")
            atomic_bytes(tmp / "validation" / "manifest.json", val_bytes)
        if remote_manifest(url) != manifest_bytes:
            raise RuntimeError(f"token store {url} was rewritten while it was being copied to {dest}; open it again.")
        atomic_bytes(tmp / "manifest.json", manifest_bytes)
        if dest.exists():  # an incomplete leftover (no manifest.json): replace it
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fetch_tree(url: str, manifest_bytes: bytes, dest: Path) -> None:
    """Download every shard the manifest lists into ``dest`` and check each against it (sizes, entries)."""
    from zephyr.fs import join, url_to_fs

    manifest = parse_manifest(url, manifest_bytes)
    dtype = np.dtype(manifest["dtype"])
    dest.mkdir(parents=True, exist_ok=True)
    for shard in manifest["shards"]:
        local = dest / shard["path"]
        local.mkdir(parents=True, exist_ok=True)
        names = (
            "tokens.bin",
            "offsets.npy",
            *(n for n in shard.get("xxh3_64", {}) if n not in ("tokens.bin", "offsets.npy")),
        )
        for name in names:
            remote = join(url, shard["path"], name)
            fs, path = url_to_fs(remote)
            try:
                with fs.open(path, "rb") as src, open(local / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, COPY_CHUNK)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{remote} not found although {url}/manifest.json lists shard {shard['path']}: "
                    "the store is damaged or being rewritten; rerun tokenize_dataset on it."
                ) from None
        got, want = (local / "tokens.bin").stat().st_size, int(shard["tokens"]) * dtype.itemsize
        if got != want:
            raise ValueError(
                f"{join(url, shard['path'], 'tokens.bin')} has {got} bytes, the manifest says {want} "
                f"({shard['tokens']} tokens x {dtype.itemsize}): the store is damaged or being rewritten; "
                "rerun tokenize_dataset on it."
            )
        try:
            ends = np.load(local / "offsets.npy", mmap_mode="r")
            entries = len(ends)
        except ValueError:
            entries = -1
        if entries != int(shard["documents"]):
            raise ValueError(
                f"{join(url, shard['path'], 'offsets.npy')} has {entries} entries, the manifest says "
                f"{shard['documents']} documents: the store is damaged or being rewritten; rerun "
                "tokenize_dataset on it."
            )
        for name, want in shard.get("xxh3_64", {}).items():
            if (got := file_digest(local / name)) != want:
                raise ValueError(
                    f"{join(url, shard['path'], name)} has XXH3-64 digest {got}, the manifest says {want}: "
                    "the store is damaged or being rewritten; rerun tokenize_dataset on it."
                )
