"""The token store's names and small shared pieces: constants, dtype choice, atomic files, manifest parsing.

The layout itself is documented in :mod:`zephyr.tokenize.store` (reading); writing is in
:mod:`zephyr.tokenize.store_write`, bucket copies in :mod:`zephyr.tokenize.store_remote`, checks in
:mod:`zephyr.tokenize.store_check`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

__all__ = [
    "DOCUMENT_INDEX",
    "SHARD_MARKER_KIND",
    "STORE_CACHE_ENV",
    "STORE_FORMAT",
    "STORE_VERSION",
    "atomic_bytes",
    "atomic_json",
    "file_digest",
    "is_remote",
    "json_bytes",
    "parse_manifest",
    "store_cache_root",
    "token_dtype",
]

STORE_FORMAT = "zephyr-token-store"
STORE_VERSION = 1
STORE_CACHE_ENV = "ZEPHYR_STORE_CACHE"
COPY_CHUNK = 8 << 20


DOCUMENT_INDEX = "documents.parquet"  # per shard: id, source, start, end of every document
# shard.json: the one done-marker type (zephyr.versioning), fingerprint = the config hash
SHARD_MARKER_KIND = "token-store-shard"


def is_remote(location: str | os.PathLike[str]) -> bool:
    """True for a URL (``gs://``, ``s3://``, ``memory://`` ...): stored through fsspec, not a local directory."""
    return "://" in os.fspath(location)


def store_cache_root() -> Path:
    """Where remote stores are materialised: ``$ZEPHYR_STORE_CACHE``, default ``$ZEPHYR_CACHE_DIR/stores``."""
    from zephyr.cache import cache_root

    return Path(os.environ.get(STORE_CACHE_ENV) or cache_root() / "stores").expanduser()


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits with room to spare (vocab <= 65535), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


def atomic_bytes(path: Path, payload: bytes) -> None:
    """Write `payload` to `path` whole or not at all (a temporary name in the same folder, then rename)."""
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
    with open(tmp, "wb") as handle:
        handle.write(payload)
    os.replace(tmp, path)


def json_bytes(obj: Any) -> bytes:
    """`obj` as the stores write JSON: indented, keys sorted, one trailing newline."""
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def atomic_json(path: Path, obj: Any) -> None:
    """`obj` written as JSON to `path`, atomically."""
    atomic_bytes(path, json_bytes(obj))


def parse_manifest(url: str, payload: bytes) -> dict[str, Any]:
    """A store's `manifest.json` checked: JSON, of this store format; a clear error naming the store otherwise."""
    try:
        manifest = json.loads(payload)
    except ValueError as exc:
        raise ValueError(
            f"{url}/manifest.json is not valid JSON ({exc}); rewrite the store with tokenize_dataset."
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ValueError(f"{url}/manifest.json: expected format {STORE_FORMAT!r}, found {found!r}.")
    return manifest


def file_digest(path: Path) -> str:
    """XXH3-64 hex digest of a file's bytes, as the manifest records it for each data file."""
    digest = xxhash.xxh3_64()
    with open(path, "rb") as handle:
        while chunk := handle.read(COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
