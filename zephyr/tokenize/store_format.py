"""The token store's names and small shared pieces: constants, dtype choice, atomic files, manifest parsing.

The layout itself is documented in :mod:`zephyr.tokenize.store` (reading); writing is in
:mod:`zephyr.tokenize.store_write`, bucket copies in :mod:`zephyr.tokenize.store_remote`, checks in
:mod:`zephyr.tokenize.store_check`.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_DIGESTS",
    "DOCUMENT_INDEX",
    "SHARD_MARKER_KIND",
    "STORE_CACHE_ENV",
    "STORE_CACHE_MAX_ENV",
    "STORE_FORMAT",
    "STORE_VERSION",
    "atomic_bytes",
    "atomic_json",
    "chunk_digest",
    "chunk_digests",
    "chunk_seed",
    "file_digest",
    "is_remote",
    "json_bytes",
    "parse_manifest",
    "store_cache_max",
    "store_cache_root",
    "token_dtype",
]

STORE_FORMAT = "zephyr-token-store"
STORE_VERSION = 1
STORE_CACHE_ENV = "ZEPHYR_STORE_CACHE"
STORE_CACHE_MAX_ENV = "ZEPHYR_STORE_CACHE_MAX"
DEFAULT_STORE_CACHE_MAX = 4 << 30
COPY_CHUNK = 8 << 20

# Every CHUNK_BYTES of a shard's tokens.bin has its own digest in CHUNK_DIGESTS (little-endian uint64, one per
# chunk, the last chunk may be short), so a reader that fetches a few byte ranges of a bucket store can check
# exactly what it fetched. 512 bytes (256 uint16 tokens): a training window of seq_len 2048 (4098 bytes) at a
# random offset touches 9 chunks on average, 4.6 KB fetched for 4.1 KB used (1.12x, plus 72 bytes of digests);
# 4 KiB chunks would fetch twice what is used. The digests cost 1.6% of the store's size.
CHUNK_BYTES = 512
CHUNK_DIGESTS = "tokens.xxh3"


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


def store_cache_max() -> int:
    """The local chunk cache's bound in bytes: ``$ZEPHYR_STORE_CACHE_MAX`` (``268435456``, ``256MB``, ``4GiB``;
    ``0`` keeps no cache on disk), default 4 GiB."""
    raw = os.environ.get(STORE_CACHE_MAX_ENV, "").strip()
    if not raw:
        return DEFAULT_STORE_CACHE_MAX
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)", raw.lower())
    if match is None or (match.group(3) and not match.group(2)):
        raise ValueError(
            f"{STORE_CACHE_MAX_ENV}={raw!r} is not a size: expected bytes, e.g. 268435456, 256MB (10^6), 256MiB or "
            "256M (2^20), 4GiB; 0 keeps no chunk cache on disk."
        )
    number, unit, binary, byte = match.groups()
    base = 1000 if (byte and not binary) else 1024
    return int(float(number) * base ** " kmgt".index(unit or " "))


def chunk_seed(file_digest_hex: str) -> int:
    """The seed of a shard's chunk digests: its ``tokens.bin`` digest, so that chunk digests of one version of a
    shard never match the bytes of another (a store rewritten under a reader fails the check, never mixes)."""
    return int(file_digest_hex, 16)


def chunk_digest(data: bytes | memoryview, seed: int) -> int:
    """XXH3-64 of one chunk of ``tokens.bin``, seeded by :func:`chunk_seed` (as ``tokens.xxh3`` holds it)."""
    return xxhash.xxh3_64_intdigest(data, seed=seed)


def chunk_digests(data: bytes | memoryview, seed: int, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """The digests of consecutive chunks of ``data`` (uint64; the last chunk may be short)."""
    view = memoryview(data)
    digest = xxhash.xxh3_64_intdigest
    return np.fromiter(
        (digest(view[i : i + chunk_bytes], seed=seed) for i in range(0, len(view), chunk_bytes)),
        dtype=np.uint64,
        count=-(-len(view) // chunk_bytes),
    )


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
