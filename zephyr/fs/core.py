"""One entry point to every filesystem: local paths, memory://, gs://, s3://, mirror:// (fsspec).

`url_to_fs` hands out the filesystem registered for the URL's protocol (`zephyr.fs.registry`):
for ``gs://`` and ``s3://``, gcsfs/s3fs guarded against cross-region reads (`zephyr.fs.region_guard`),
for ``mirror://`` the region-local mirror (`zephyr.fs.mirror`); plain fsspec for everything else.

Endpoints come from the standard variables, so emulators and S3-compatible stores work unchanged:
``STORAGE_EMULATOR_HOST`` (gcsfs; Zephyr then defaults the gcsfs token to ``anon``),
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (botocore, used by s3fs), and fsspec's own
configuration (``FSSPEC_GCS_<OPTION>`` / ``FSSPEC_S3_<OPTION>`` variables, read when fsspec is
imported, e.g. ``FSSPEC_S3_ENDPOINT_URL``; or ``fsspec.config.conf["s3"] = {...}`` in code).
"""

from __future__ import annotations

import contextlib
import io
import os
import uuid
from collections.abc import Iterator
from typing import IO

import fsspec
import fsspec.compression
from fsspec.core import split_protocol
from fsspec.core import url_to_fs as _fsspec_url_to_fs

from zephyr.errors import BadInputError
from zephyr.fs.registry import factory_for

__all__ = [
    "url_to_fs",
    "open_url",
    "expand_glob",
    "is_hidden",
    "remove_dead_temps",
    "atomic_write",
    "naming_the_file",
    "exists",
    "missing_files",
    "join",
]

# Object stores: a PUT is atomic there, so `atomic_write` commits an upload instead of renaming.
_OBJECT_STORE_PROTOCOLS = ("gs", "gcs", "s3", "s3a")


def url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that serves `url` and the path inside it.

    ``gs://`` and ``s3://`` get the cross-region guarded gcsfs/s3fs, ``mirror://`` the mirror
    filesystem (both registered in `zephyr.fs.registry` by `zephyr.fs`); anything else (local
    paths, memory://, chained URLs) plain fsspec.
    """
    protocol, _ = split_protocol(url)
    factory = factory_for(protocol)
    if factory is not None:
        return factory(url)
    return _fsspec_url_to_fs(url)


def open_url(url: str, mode: str = "rb", *, compression: str | None = "infer") -> IO:
    """Open `url` for reading or writing; `compression="infer"` picks gzip/zstd/bz2 from the suffix."""
    fs, path = url_to_fs(url)
    if compression == "infer":
        compression = fsspec.utils.infer_compression(path)
    handle = fsspec.core.OpenFile(fs, path, mode=mode, compression=compression).open()
    if compression == "zstd" and mode == "rb":
        # zstandard's stream reader has no readline; buffered, `for line in handle` works as for gzip.
        handle = io.BufferedReader(handle, buffer_size=1 << 20)
    return handle


def exists(url: str) -> bool:
    """Whether a file or folder exists at `url`."""
    fs, path = url_to_fs(url)
    return fs.exists(path)


def missing_files(urls: list[str]) -> list[str]:
    """Those of `urls` that do not exist, listing each folder once (one request per folder on a bucket,
    not one per file: a resume checks thousands of committed files)."""
    by_folder: dict[str, list[str]] = {}
    for url in urls:
        by_folder.setdefault(url.rstrip("/").rsplit("/", 1)[0], []).append(url)
    missing = []
    for folder, members in by_folder.items():
        fs, path = url_to_fs(folder)
        fs.invalidate_cache(path)  # another process (or the user) may have removed files since we listed
        try:
            names = {entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(path, detail=False)}
        except (FileNotFoundError, NotADirectoryError):
            names = set()
        missing += [url for url in members if url.rstrip("/").rsplit("/", 1)[-1] not in names]
    return missing


def join(base: str, *parts: str) -> str:
    """`base` and `parts` joined with single slashes, for paths and URLs alike (`os.path.join` would break
    `gs://`)."""
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def expand_glob(pattern: str) -> list[str]:
    """Sorted URLs of the files matching `pattern`; raises naming the pattern when nothing matches.

    A directory stands for every file below it (recursively), as in pyarrow.dataset, polars and Ray
    Data. Files and directories whose names start with `.` or `_` below the pattern's fixed part are
    left out, as pyarrow and Spark do: they are temporary files of writers (`.tmp-*` of a killed run)
    and markers (`_SUCCESS`), never data. A file named exactly is always kept.
    """
    fs, path = url_to_fs(pattern)
    if any(ch in path for ch in "*?["):
        found = fs.glob(path, detail=True)
        fixed = path[: min(path.index(ch) for ch in "*?[" if ch in path)].rsplit("/", 1)[0]
        matches = sorted(name for name, info in found.items() if info.get("type") != "directory")
    else:
        fixed = path.rstrip("/")
        try:
            info = fs.info(path)
        except FileNotFoundError:
            info = None
        if info is None:
            matches = []
        elif info.get("type") == "directory":
            matches = sorted(fs.find(fixed))
        else:
            matches = [path]
            fixed = path  # named exactly: kept whatever its name
    matches = [m for m in matches if not is_hidden(m, fixed)]
    if not matches:
        raise BadInputError(f"no files match {pattern!r}{_relative_to(pattern)}: check the path and the glob pattern")
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    if protocol in ("file", "local"):
        return matches
    return [fs.unstrip_protocol(m) for m in matches]


def _relative_to(pattern: str) -> str:
    """Where a relative local path was looked for (a script run from another folder reads another `data/`)."""
    protocol, path = split_protocol(pattern)
    if protocol in (None, "file", "local") and not os.path.isabs(path):
        return f" (relative to the working folder {os.getcwd()})"
    return ""


def remove_dead_temps(url: str) -> int:
    """Remove the temporary files `atomic_write` left beside `url` in attempts that died (kill -9, a
    lost machine); returns how many. Call it only where no live writer of `url` can exist (the engine
    calls it for the shard it is about to write). Object stores keep no temporary files."""
    if split_protocol(url)[0] in _OBJECT_STORE_PROTOCOLS:
        return 0
    fs, path = url_to_fs(url)
    parent, name = os.path.dirname(path), os.path.basename(path)
    try:
        entries = fs.ls(parent or ".", detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    removed = 0
    for entry in entries:
        base = entry.rstrip("/").rsplit("/", 1)[-1]
        if base.startswith(".tmp-") and base.endswith(f"-{name}") and len(base) == len(name) + 38:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(entry)
                removed += 1
    return removed


def is_hidden(path: str, root: str = "") -> bool:
    """Whether a name in `path` below `root` starts with `.` or `_` (a temporary file or a marker)."""
    rest = path[len(root) :] if root and path.startswith(root) else path.rsplit("/", 1)[-1]
    return any(part.startswith((".", "_")) for part in rest.strip("/").split("/") if part)


@contextlib.contextmanager
def atomic_write(url: str, mode: str = "wb", *, compression: str | None = "infer") -> Iterator[IO]:
    """Write `url` so that readers see the whole file or nothing, never a partial one.

    Object stores (gs://, s3://) upload to the final name without committing (fsspec's
    ``autocommit=False``: a resumable upload / multipart upload) and commit when the block ends,
    or abort it on an error; a PUT is atomic there, and this avoids a server-side copy. Other
    filesystems write a temporary name beside `url` and rename it into place.
    """
    fs, path = url_to_fs(url)
    if compression == "infer":
        compression = fsspec.utils.infer_compression(path)
    if split_protocol(url)[0] in _OBJECT_STORE_PROTOCOLS:
        with _committed_upload(fs, path, mode, compression) as handle:
            yield handle
        return
    parent = os.path.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{os.path.basename(path)}" if parent else f".tmp-{uuid.uuid4().hex}-{path}"
    try:
        with naming_the_file(url), fsspec.core.OpenFile(fs, tmp, mode=mode, compression=compression) as handle:
            yield handle
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise


@contextlib.contextmanager
def naming_the_file(url: str) -> Iterator[None]:
    """Give an OSError raised in the block `url` as its file name when it has none: a write that meets a full
    disk (ENOSPC) or a quota names no file, and the error message should say which file it was writing."""
    try:
        yield
    except OSError as error:
        if not error.filename:
            error.filename = url
        raise


@contextlib.contextmanager
def _committed_upload(fs: fsspec.AbstractFileSystem, path: str, mode: str, compression: str | None) -> Iterator[IO]:
    raw = fs.open(path, mode.replace("t", "").replace("b", "") + "b", autocommit=False)
    try:
        handle = raw
        if compression is not None:
            handle = fsspec.compression.compr[compression](handle, mode="wb")
        if "b" not in mode:
            handle = io.TextIOWrapper(handle, encoding="utf-8")
        yield handle
        handle.close()  # flushes compressor and text layers into `raw`
        raw.close()  # uploads what is buffered; nothing is visible yet
        raw.commit()  # the object appears, complete
    except BaseException:
        with contextlib.suppress(Exception):
            raw.discard()  # abort the resumable / multipart upload: no object appears
        raw.closed = True  # and never flush the rest later (fsspec files flush on close and on __del__)
        raise
