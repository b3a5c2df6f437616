"""One entry point to every filesystem: local paths, memory://, gs://, s3:// (fsspec)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import IO

import fsspec
from fsspec.core import url_to_fs as _fsspec_url_to_fs

from zephyr.engine.errors import BadInputError

__all__ = ["url_to_fs", "open_url", "expand_glob", "atomic_write", "exists", "join"]


def url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that serves `url` and the path inside it."""
    return _fsspec_url_to_fs(url)


def open_url(url: str, mode: str = "rb", *, compression: str | None = "infer") -> IO:
    """Open `url` for reading or writing; `compression="infer"` picks gzip/zstd/bz2 from the suffix."""
    fs, path = url_to_fs(url)
    if compression == "infer":
        compression = fsspec.utils.infer_compression(path)
    return fsspec.core.OpenFile(fs, path, mode=mode, compression=compression).open()


def exists(url: str) -> bool:
    fs, path = url_to_fs(url)
    return fs.exists(path)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def expand_glob(pattern: str) -> list[str]:
    """Sorted URLs matching `pattern`; raises naming the pattern when nothing matches."""
    fs, path = url_to_fs(pattern)
    if any(ch in path for ch in "*?["):
        matches = sorted(fs.glob(path))
    else:
        matches = [path] if fs.exists(path) else []
    matches = [m for m in matches if not fs.isdir(m)]
    if not matches:
        raise BadInputError(f"no files match {pattern!r}: check the path and the glob pattern")
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    if protocol in ("file", "local"):
        return matches
    return [fs.unstrip_protocol(m) for m in matches]


@contextlib.contextmanager
def atomic_write(url: str, mode: str = "wb", *, compression: str | None = "infer") -> Iterator[IO]:
    """Write to a temporary name beside `url`, then rename into place: readers never see a partial file."""
    fs, path = url_to_fs(url)
    parent = os.path.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{os.path.basename(path)}" if parent else f".tmp-{uuid.uuid4().hex}-{path}"
    if compression == "infer":
        compression = fsspec.utils.infer_compression(path)
    try:
        with fsspec.core.OpenFile(fs, tmp, mode=mode, compression=compression) as handle:
            yield handle
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise

