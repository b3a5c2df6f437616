"""What a folder of Zephyr outputs holds: recipe steps, document datasets, token stores, reports.

Everything goes through the project's fsspec layer (`url_to_fs`), so a `gs://` or `s3://` root is
read through the region guard like any engine input. Listings are cached for a few seconds: a page
view lists the root once, not once per panel, and a live run's new files still show up quickly.
"""

from __future__ import annotations

import json
import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from zephyr.fs import join, open_url, url_to_fs

__all__ = ["Root", "DATA_SUFFIXES", "is_data_file"]

DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.bz2", ".json.gz", ".parquet", ".vortex", ".arrow")
_SKIP_PARTS = ("checkpoints", "shards", "scratch", ".zephyr")
T = TypeVar("T")


def is_data_file(path: str) -> bool:
    """Whether the UI lists `path` as a data file: a known data suffix, and not a hidden or temporary file."""
    name = posixpath.basename(path)
    return not name.startswith((".", "_tmp")) and name.endswith(DATA_SUFFIXES)


@dataclass
class Root:
    """A browsable root. `url` is the root as given (local path or URL); paths inside are relative."""

    url: str
    ttl: float = 2.0

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/") or "/"
        self.fs, self.base = url_to_fs(self.url)
        self._cache: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------------- paths
    def abs(self, rel: str) -> str:
        """The URL of `rel` (a path relative to the root); refuses paths that climb out of it."""
        rel = (rel or "").strip("/")
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ValueError(f"path {rel!r} leaves the root {self.url}; give a path inside it")
        return join(self.url, *parts) if parts else self.url

    def rel(self, path: str) -> str:
        """`path` as the filesystem lists it -> relative to the root."""
        base = self.base.rstrip("/")
        return path[len(base) + 1 :] if path.startswith(base + "/") else path

    def cached(self, key: str, build: Callable[[], T], ttl: float | None = None) -> T:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < (self.ttl if ttl is None else ttl):
                return hit[1]
        value = build()
        with self._lock:
            self._cache[key] = (now, value)
        return value

    # -------------------------------------------------------------------------- listing
    def files(self) -> dict[str, dict]:
        """Every file under the root (relative path -> {size, mtime}), skipping token shards and checkpoints."""

        def build() -> dict[str, dict]:
            out: dict[str, dict] = {}
            try:
                found = self.fs.find(self.base, detail=True)
            except FileNotFoundError:
                return out
            for path, info in found.items():
                rel = self.rel(path)
                parts = rel.split("/")
                if any(p in _SKIP_PARTS for p in parts[:-1]) or parts[-1].startswith(".tmp"):
                    continue
                out[rel] = {"size": info.get("size") or 0, "mtime": _mtime(info)}
            return out

        return self.cached("files", build)

    def datasets(self) -> list[dict]:
        """Folders holding data files (one dataset each): {path, files, bytes, format}."""

        def build() -> list[dict]:
            groups: dict[str, list[str]] = {}
            sizes: dict[str, int] = {}
            for rel, info in self.files().items():
                if not is_data_file(rel):
                    continue
                folder = posixpath.dirname(rel)
                groups.setdefault(folder, []).append(rel)
                sizes[folder] = sizes.get(folder, 0) + info["size"]
            out = []
            for folder in sorted(groups):
                files = sorted(groups[folder])
                kinds = sorted({_kind(f) for f in files})
                out.append(
                    {
                        "path": folder,
                        "files": files,
                        "bytes": sizes[folder],
                        "format": "+".join(kinds),
                        "lineage": folder.split("/")[-1] == "_removed",
                    }
                )
            return out

        return self.cached("datasets", build)

    def dataset(self, path: str) -> dict:
        path = (path or "").strip("/")
        for d in self.datasets():
            if d["path"] == path:
                return d
        known = ", ".join(d["path"] or "." for d in self.datasets()[:20])
        raise KeyError(f"no dataset folder {path!r} under {self.url}; folders with data files: {known}")

    def read_json(self, rel: str) -> Any:
        with open_url(self.abs(rel), "rb", compression=None) as handle:
            return json.loads(handle.read())

    def json_files(self, name: str) -> list[str]:
        """Relative paths of files called `name` (e.g. manifest.json, report.json)."""
        return sorted(rel for rel in self.files() if posixpath.basename(rel) == name)


def _kind(path: str) -> str:
    name = posixpath.basename(path)
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".vortex"):
        return "vortex"
    if name.endswith(".arrow"):
        return "arrow"
    return "jsonl"


def _mtime(info: dict) -> float:
    value = info.get("mtime") or info.get("updated") or info.get("LastModified") or info.get("created") or 0
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
