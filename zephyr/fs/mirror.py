"""MirrorFileSystem (``mirror://path``): read from the local region's bucket, copying there once.

A dataset used from several regions is kept in one bucket per region. ``mirror://data/x.parquet``
names the file in all of them; opening it for reading

1. serves ``<local root>/data/x.parquet`` when the local region's bucket has it;
2. otherwise finds it in the other regions' buckets (configuration order), copies it once into the
   local bucket under a lock (`zephyr.fs.copy_once.run_once`: concurrent workers, on one
   machine or many, copy it exactly once; the others wait and then read the copy), charges the
   copy to the cross-region budget (`zephyr.fs.transfer_budget`), and serves the local copy.

Listing (``ls``, ``glob``, ``find``, ``info``) merges the regions, the local entry winning when a
name exists in several. Writes, deletes and ``mkdir`` go to the local bucket only.

Configuration: ``ZEPHYR_MIRROR_BUCKETS="us-central1=gs://data-us,europe-west4=gs://data-eu/prefix"``
(or a JSON object, or ``fsspec.config.conf["mirror"] = {"buckets": {...}}``, or
``MirrorFileSystem(buckets={...})``). The local region is this machine's (`zephyr.fs.regions`,
``ZEPHYR_REGION``); a configured region that contains it (``us`` for ``us-central1``) also counts.
``ZEPHYR_MIRROR_LOCK_TTL`` (seconds, default 300) is the base lifetime of a copy lock.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem

from zephyr import counters
from zephyr.fs.copy_once import LOCK_DIRNAME, run_once
from zephyr.fs.core import atomic_write, url_to_fs
from zephyr.fs.region_guard import CrossRegionGuardedFS, unguarded
from zephyr.fs.regions import REGION_ENV, location_contains, machine_region, normalize_location
from zephyr.fs.registry import register_protocol
from zephyr.fs.transfer_budget import charge_cross_region

__all__ = ["BUCKETS_ENV", "LOCK_TTL_ENV", "MirrorFileSystem", "mirror_options", "parse_mirror_buckets"]

BUCKETS_ENV = "ZEPHYR_MIRROR_BUCKETS"
LOCK_TTL_ENV = "ZEPHYR_MIRROR_LOCK_TTL"
_DEFAULT_LOCK_TTL_S = 300.0
_PESSIMISTIC_COPY_RATE = 20e6  # bytes/s used to stretch a lock's lifetime for big files
COPY_COUNTER = "fs/mirror_copies"
COPY_BYTES_COUNTER = "fs/mirror_copy_bytes"


def parse_mirror_buckets(value: str | Mapping[str, str]) -> dict[str, str]:
    """``"us-central1=gs://a,europe-west4=gs://b"`` (or a JSON object, or a mapping) -> {region: root}."""
    if isinstance(value, Mapping):
        items = list(value.items())
    else:
        text = value.strip()
        if text.startswith("{"):
            items = list(json.loads(text).items())
        else:
            items = []
            for part in filter(None, (p.strip() for p in text.split(","))):
                region, sep, root = part.partition("=")
                if not sep or not region.strip() or not root.strip():
                    raise ValueError(
                        f"{BUCKETS_ENV}: expected comma-separated REGION=URL pairs such as "
                        f"'us-central1=gs://data-us,europe-west4=gs://data-eu', got the part {part!r}"
                    )
                items.append((region, root))
    buckets = {normalize_location(str(r)): str(root).strip().rstrip("/") for r, root in items}
    for region, root in buckets.items():
        if "://" not in root:
            raise ValueError(
                f"{BUCKETS_ENV}: the root of region {region!r} must be a URL such as gs://bucket/prefix, got {root!r}"
            )
        if root.startswith("mirror://"):
            raise ValueError(f"{BUCKETS_ENV}: region {region!r} points at mirror:// itself ({root!r})")
    return buckets


def mirror_options() -> dict[str, Any]:
    """Constructor options from the environment (empty: fsspec's ``conf["mirror"]`` applies)."""
    raw = os.environ.get(BUCKETS_ENV, "").strip()
    return {"buckets": parse_mirror_buckets(raw)} if raw else {}


class MirrorFileSystem(AbstractFileSystem):
    """``mirror://`` - one logical tree over regional buckets, served from the local one."""

    protocol = "mirror"
    root_marker = ""

    def __init__(
        self,
        buckets: str | Mapping[str, str] | None = None,
        region: str | None = None,
        lock_ttl_s: float | None = None,
        local_lock: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if buckets is None:
            raw = os.environ.get(BUCKETS_ENV, "").strip()
            if not raw:
                raise ValueError(
                    f"mirror:// needs its regional buckets: set {BUCKETS_ENV}='us-central1=gs://data-us,"
                    f"europe-west4=gs://data-eu' (or fsspec.config.conf['mirror'] = {{'buckets': {{...}}}})"
                )
            buckets = raw
        self.buckets = parse_mirror_buckets(buckets)
        if not self.buckets:
            raise ValueError(f"mirror:// needs at least one regional bucket; got {buckets!r}")
        self._region = normalize_location(region) if region else None
        ttl = lock_ttl_s if lock_ttl_s is not None else float(os.environ.get(LOCK_TTL_ENV, "") or _DEFAULT_LOCK_TTL_S)
        self.lock_ttl_s = ttl
        self.local_lock = local_lock

    # ----- paths and regions --------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for prefix in ("mirror://", "mirror::"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        return path.strip("/")

    @property
    def local_region(self) -> str:
        """The configured region that serves this machine."""
        region = self._region or machine_region()
        if region is None:
            raise RuntimeError(
                f"mirror:// needs this machine's region to pick its local bucket, and it is unknown; "
                f"set {REGION_ENV} to one of {sorted(self.buckets)}"
            )
        if region in self.buckets:
            return region
        for label in self.buckets:
            if location_contains(label, region):
                return label
        raise RuntimeError(
            f"mirror:// has no bucket for this machine's region {region!r}; configured regions: "
            f"{sorted(self.buckets)}. Add '{region}=gs://BUCKET' to {BUCKETS_ENV} (or set {REGION_ENV})"
        )

    def _regions(self) -> list[str]:
        local = self.local_region
        return [local, *(r for r in self.buckets if r != local)]

    def _url(self, region: str, key: str) -> str:
        root = self.buckets[region]
        return f"{root}/{key}" if key else root

    @staticmethod
    def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
        return url_to_fs(url)

    def local_url(self, path: str) -> str:
        """Where `path` lives (or will live) in the local region's bucket."""
        return self._url(self.local_region, self._strip_protocol(path))

    # ----- the copy-once read path -------------------------------------------------------------
    def localize(self, path: str) -> str:
        """Make sure `path` is in the local bucket (copying it once if needed); return its URL there."""
        key = self._strip_protocol(path)
        local = self.local_region
        local_url = self._url(local, key)
        lfs, lpath = self._fs(local_url)
        if _fresh_is_file(lfs, lpath):
            return local_url
        source = self._find_elsewhere(key)
        if source is None:
            tried = ", ".join(self._url(r, key) for r in self._regions())
            raise FileNotFoundError(f"mirror://{key} is in none of the regional buckets (tried {tried})")
        src_region, src_url, size = source
        lock_fs, root_path = self._fs(self.buckets[local])
        ttl = self.lock_ttl_s + size / _PESSIMISTIC_COPY_RATE

        def copy() -> None:
            charge_cross_region(src_url, size, source=src_region, destination=local)
            _transfer(src_url, local_url)
            counters.increment(COPY_COUNTER)
            counters.increment(COPY_BYTES_COUNTER, size)

        run_once(
            key=local_url,
            lock_fs=lock_fs,
            lock_path=f"{root_path}/{LOCK_DIRNAME}/{key}.lock",
            done=lambda: _fresh_is_file(lfs, lpath),
            action=copy,
            ttl_s=ttl,
            wait_timeout_s=2 * ttl + 30,
            local_lock=self.local_lock,
        )
        return local_url

    def _find_elsewhere(self, key: str) -> tuple[str, str, int] | None:
        local = self.local_region
        for region in self.buckets:
            if region == local:
                continue
            url = self._url(region, key)
            fs, path = self._fs(url)
            fs.invalidate_cache(path)
            try:
                info = fs.info(path)
            except FileNotFoundError:
                continue
            if info.get("type") == "file":
                return region, url, int(info.get("size") or 0)
        return None

    # ----- fsspec interface ---------------------------------------------------------------------
    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        key = self._strip_protocol(path)
        if "r" in mode and "+" not in mode:
            url = self.localize(key)
            fs, fspath = self._fs(url)
        else:
            fs, fspath = self._fs(self._url(self.local_region, key))
            parent = fspath.rsplit("/", 1)[0]
            if parent and parent != fspath:
                fs.makedirs(parent, exist_ok=True)
        return fs._open(
            fspath, mode=mode, block_size=block_size, autocommit=autocommit, cache_options=cache_options, **kwargs
        )

    def ls(self, path, detail=True, **kwargs):
        key = self._strip_protocol(path)
        merged: dict[str, dict] = {}
        found = False
        for region in self._regions():
            fs, root_path = self._fs(self.buckets[region])
            target = f"{root_path}/{key}" if key else root_path
            fs.invalidate_cache(target)
            try:
                entries = fs.ls(target, detail=True)
            except FileNotFoundError:
                continue
            found = True
            for entry in entries:
                name = str(entry["name"]).rstrip("/")
                if name != root_path and not name.startswith(root_path + "/"):
                    continue
                rel = name[len(root_path) + 1 :] if name != root_path else ""
                if not rel or rel.split("/", 1)[0] == LOCK_DIRNAME:
                    continue
                merged.setdefault(rel, {**entry, "name": rel, "mirror_region": region})
        if not found:
            raise FileNotFoundError(f"mirror://{key} is in none of the regional buckets")
        entries = [merged[name] for name in sorted(merged)]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path, **kwargs):
        key = self._strip_protocol(path)
        if not key:
            return {"name": "", "size": 0, "type": "directory"}
        for region in self._regions():
            fs, fspath = self._fs(self._url(region, key))
            fs.invalidate_cache(fspath)
            try:
                info = fs.info(fspath)
            except FileNotFoundError:
                continue
            return {**info, "name": key, "mirror_region": region}
        raise FileNotFoundError(f"mirror://{key}")

    def cp_file(self, path1, path2, **kwargs):
        _transfer(self.localize(path1), self.local_url(path2))

    def rm_file(self, path):
        fs, fspath = self._fs(self.local_url(path))
        fs.rm_file(fspath)

    def _rm(self, path):
        self.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        paths = [path] if isinstance(path, str) else list(path)
        for p in paths:
            fs, fspath = self._fs(self.local_url(p))
            fs.rm(fspath, recursive=recursive, maxdepth=maxdepth)

    def mkdir(self, path, create_parents=True, **kwargs):
        fs, fspath = self._fs(self.local_url(path))
        fs.mkdir(fspath, create_parents=create_parents, **kwargs)

    def makedirs(self, path, exist_ok=False):
        fs, fspath = self._fs(self.local_url(path))
        fs.makedirs(fspath, exist_ok=exist_ok)

    def rmdir(self, path):
        fs, fspath = self._fs(self.local_url(path))
        fs.rmdir(fspath)

    def modified(self, path):
        fs, fspath = self._fs(self.localize(path))
        return fs.modified(fspath)


def _fresh_is_file(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    fs.invalidate_cache(path)
    try:
        return fs.info(path).get("type") == "file"
    except FileNotFoundError:
        return False


def _transfer(src_url: str, dst_url: str) -> None:
    """Copy without charging (the caller charged): server-side within one store, else streamed."""
    src_fs, src_path = MirrorFileSystem._fs(src_url)
    dst_fs, dst_path = MirrorFileSystem._fs(dst_url)
    if src_fs is dst_fs and isinstance(src_fs, CrossRegionGuardedFS):
        parent = dst_path.rsplit("/", 1)[0]
        if parent != dst_path:
            dst_fs.makedirs(parent, exist_ok=True)
        unguarded(src_fs).cp_file(src_path, dst_path)  # server-side: atomic, nothing through this machine
        dst_fs.invalidate_cache(dst_path)
        return
    with unguarded(src_fs).open(src_path, "rb") as reader, atomic_write(dst_url, "wb", compression=None) as writer:
        shutil.copyfileobj(reader, writer, 16 * 2**20)


def mirror_url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The mirror filesystem (configured from the environment) serving a ``mirror://`` URL."""
    return MirrorFileSystem(**mirror_options()), MirrorFileSystem._strip_protocol(url)


register_protocol("mirror", mirror_url_to_fs)
# So that fsspec.open("mirror://...") and pyarrow-through-fsspec also find the mirror.
fsspec.register_implementation("mirror", MirrorFileSystem, clobber=True)
