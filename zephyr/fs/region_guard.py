"""CrossRegionGuardedFS: gcsfs / s3fs that charge every read from another region to a budget.

Reading a few TB from a bucket on another continent costs real money, and the mistake is silent:
the job just runs. `zephyr.fs.url_to_fs` therefore hands out, for ``gs://`` and ``s3://``,
subclasses of gcsfs' and s3fs' filesystems with this guard mixed in. Everything gcsfs/s3fs can do
still works; the read entry points (``open`` for reading, ``cat``/``cat_file``/``cat_ranges``,
``get``/``get_file``, and server-side copies between buckets in different locations) first compare
the bucket's location with the machine's region (`zephyr.fs.regions`) and, when they differ,
charge the bytes to the per-process budget of `zephyr.fs.transfer_budget`:

- ``cat``/``get``/copies know their size up front and are refused *before* any byte moves;
- files opened for reading are charged the bytes actually read, as they are read.

Writes and same-region reads are never charged. An unknown machine region or bucket location
(no permission to read the bucket's metadata) is allowed, with a one-time warning.

The charged reads go through a plain twin filesystem (same options, no guard), so gcsfs' internal
reuse of its own methods (e.g. ``get_file`` built on ``cat_file``) can never charge twice.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import logging
import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

import fsspec
import fsspec.config
from fsspec.asyn import sync
from fsspec.core import split_protocol

from zephyr.errors import RemoteStorageError
from zephyr.fs.core import url_to_fs
from zephyr.fs.regions import location_contains, locations_overlap, machine_region
from zephyr.fs.registry import register_protocol
from zephyr.fs.transfer_budget import charge_cross_region, check_budget_left

__all__ = [
    "CrossRegionGuardedFS",
    "GuardedGCSFileSystem",  # noqa: F822 (built on first use by the module __getattr__)
    "GuardedS3FileSystem",  # noqa: F822
    "ChargedReadFile",
    "guarded_filesystem_class",
    "unguarded",
    "bucket_location",
    "is_cross_region",
    "record_transfer",
    "reset_bucket_location_cache",
    "CONNECT_TIMEOUT_ENV",
]

CONNECT_TIMEOUT_ENV = "ZEPHYR_CONNECT_TIMEOUT"  # seconds a first connection to a bucket's endpoint may take

_log = logging.getLogger("zephyr.fs")
_cache_lock = threading.Lock()
_location_cache: dict[tuple[str, str], str | None] = {}
_warned_buckets: set[tuple[str, str]] = set()
_classes: dict[str, type] = {}
_access_checked: set[tuple[Any, ...]] = set()  # endpoints reached / credentials found, once per process

_INSTALL_HINT = {
    "gcs": "reading gs:// needs gcsfs: pip install 'gcsfs>=2024.6' (or pip install 'zephyr[cloud]')",
    "s3": "reading s3:// needs s3fs: pip install 's3fs>=2024.6' (or pip install 'zephyr[cloud]')",
}


class CrossRegionGuardedFS:
    """Mixin for an fsspec object-store filesystem: charges cross-region reads to the budget.

    Concrete classes set `_zephyr_kind` ("gcs" or "s3") and implement `_zephyr_fetch_location`.
    """

    _zephyr_kind = ""

    # ----- the plain twin that performs charged reads -------------------------------------------
    @property
    def unguarded(self) -> fsspec.AbstractFileSystem:
        """The same filesystem without the guard (same options; listings not cached)."""
        twin = self.__dict__.get("_zephyr_twin")
        if twin is None:
            base = _plain_base(type(self))
            options = {**self.storage_options, "use_listings_cache": False}
            twin = base(*self.storage_args, **options)
            self.__dict__["_zephyr_twin"] = twin
        return twin

    # ----- where is the data, where are we ------------------------------------------------------
    def _zephyr_bucket(self, path: str) -> str:
        return self._strip_protocol(path).split("/", 1)[0]

    def _zephyr_url(self, path: str) -> str:
        return self.unstrip_protocol(self._strip_protocol(path))

    async def _zephyr_location(self, bucket: str) -> str | None:
        key = (self._zephyr_kind, bucket)
        with _cache_lock:
            if key in _location_cache:
                return _location_cache[key]
        try:
            location = await self._zephyr_fetch_location(bucket)
        except Exception as error:  # permission denied, bucket missing: unknown, decided below
            _log.debug("could not read the location of bucket %s: %s", bucket, error)
            location = None
        with _cache_lock:
            _location_cache[key] = location
            warn = location is None and key not in _warned_buckets
            _warned_buckets.add(key)
        if warn:
            _log.warning(
                "zephyr: the location of bucket %s://%s is unknown (no permission to read its metadata?), "
                "so reads from it are NOT guarded against cross-region transfer.",
                self._zephyr_kind if self._zephyr_kind == "s3" else "gs",
                bucket,
            )
        return location

    async def _zephyr_fetch_location(self, bucket: str) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _zephyr_route(self, path: str) -> tuple[str, str] | None:
        """(bucket location, machine region) when reading `path` crosses regions, else None."""
        region = await asyncio.to_thread(machine_region)
        if region is None:
            return None
        location = await self._zephyr_location(self._zephyr_bucket(path))
        if location is None or location_contains(location, region):
            return None
        return location.lower(), region

    def _zephyr_route_sync(self, path: str) -> tuple[str, str] | None:
        return sync(self.loop, self._zephyr_route, path)

    async def _zephyr_range_size(self, path: str, start: int | None, end: int | None) -> int:
        size = (await self.unguarded._info(path))["size"]
        lo = 0 if start is None else (max(0, size + start) if start < 0 else min(start, size))
        hi = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
        return max(0, hi - lo)

    # ----- guarded read entry points ------------------------------------------------------------
    async def _zephyr_cat(self, path: str, start: int | None, end: int | None, fetch, fetch_plain) -> bytes:
        route = await self._zephyr_route(path)
        if route is None:
            return await fetch()
        nbytes = await self._zephyr_range_size(path, start, end)
        charge_cross_region(self._zephyr_url(path), nbytes, source=route[0], destination=route[1])
        return await fetch_plain()

    async def _get_file(self, rpath, lpath, callback=None, **kwargs):
        route = await self._zephyr_route(rpath)
        if route is None:
            return await super()._get_file(rpath, lpath, callback=callback, **kwargs)
        nbytes = await self._zephyr_range_size(rpath, None, None)
        charge_cross_region(self._zephyr_url(rpath), nbytes, source=route[0], destination=route[1])
        return await self.unguarded._get_file(rpath, lpath, callback=callback, **kwargs)

    async def _cp_file(self, path1, path2, **kwargs):
        """Server-side copy: charged when the two buckets are in different locations."""
        source = await self._zephyr_location(self._zephyr_bucket(path1))
        target = await self._zephyr_location(self._zephyr_bucket(path2))
        if source is None or target is None or locations_overlap(source, target):
            return await super()._cp_file(path1, path2, **kwargs)
        nbytes = await self._zephyr_range_size(path1, None, None)
        charge_cross_region(self._zephyr_url(path1), nbytes, source=source.lower(), destination=target.lower())
        result = await self.unguarded._cp_file(path1, path2, **kwargs)
        self.invalidate_cache(self._strip_protocol(path2))
        return result

    def _open(self, path, mode="rb", *args, **kwargs):
        if "r" in mode and "+" not in mode:
            route = self._zephyr_route_sync(path)
            if route is not None:
                url = self._zephyr_url(path)
                check_budget_left(url, source=route[0], destination=route[1])
                inner = self.unguarded._open(path, mode, *args, **kwargs)
                return ChargedReadFile(inner, url=url, source=route[0], destination=route[1])
        return super()._open(path, mode, *args, **kwargs)


class ChargedReadFile(io.RawIOBase):
    """A file open for reading from another region: every byte read is charged to the budget.

    Wraps the object store's own file (random access and its read cache are kept); `read`,
    `readinto`, `readline` and iteration charge what they return.
    """

    def __init__(self, inner: Any, *, url: str, source: str, destination: str) -> None:
        super().__init__()
        self._inner = inner
        self._url = url
        self._source = source
        self._destination = destination
        self.charged_bytes = 0

    def _charge(self, nbytes: int) -> None:
        if nbytes:
            self.charged_bytes += nbytes
            charge_cross_region(self._url, nbytes, source=self._source, destination=self._destination, transferred=True)

    # reading
    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self._charge(len(data))
        return data

    read1 = read

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer) -> int:
        data = self._inner.read(len(memoryview(buffer)))
        n = len(data)
        memoryview(buffer).cast("B")[:n] = data
        self._charge(n)
        return n

    def readline(self, size: int | None = -1) -> bytes:
        line = self._inner.readline() if size is None or size < 0 else self._inner.readline(size)
        self._charge(len(line))
        return line

    # position and state
    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
            finally:
                super().close()

    @property
    def size(self) -> int:
        return self._inner.size

    @property
    def path(self) -> str:
        return self._inner.path

    @property
    def fs(self):
        return self._inner.fs

    def info(self) -> dict:
        return self._inner.info()

    def __repr__(self) -> str:
        return (
            f"<ChargedReadFile {self._url} ({self._source} -> {self._destination}), charged {self.charged_bytes} bytes>"
        )


def _plain_base(cls: type) -> type:
    for base in cls.__mro__[1:]:
        if (
            base is not CrossRegionGuardedFS
            and issubclass(base, fsspec.AbstractFileSystem)
            and not issubclass(base, CrossRegionGuardedFS)
        ):
            return base
    raise TypeError(f"{cls.__name__} has no plain fsspec base class")


def _client_class(kind: str, module: str, name: str) -> type:
    """The client library's filesystem class, imported on first use; without the library, an ImportError that
    says what to install."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        raise ImportError(_INSTALL_HINT[kind]) from error


def _module_level(cls: type) -> type:
    """`cls`, built inside a function, named as this module's attribute so that it pickles by reference (the
    module's __getattr__ builds it again in another process)."""
    cls.__module__ = __name__
    cls.__qualname__ = cls.__name__
    return cls


def _build_gcs_class() -> type:
    # The core class, not gcsfs.GCSFileSystem: since 2025 that name is an experimental subclass
    # that probes a gRPC storage-layout API per bucket (60 s per probe against an emulator).
    GCSFileSystem = _client_class("gcs", "gcsfs.core", "GCSFileSystem")

    class GuardedGCSFileSystem(CrossRegionGuardedFS, GCSFileSystem):
        """gcsfs' GCSFileSystem with the cross-region read guard."""

        _zephyr_kind = "gcs"

        async def _zephyr_fetch_location(self, bucket: str) -> str | None:
            info = await self.unguarded._info(bucket)
            placement = (info.get("customPlacementConfig") or {}).get("dataLocations") or []
            if placement:  # a custom dual-region: local to either of its regions
                return "+".join(str(p).lower() for p in placement)
            location = info.get("location")
            return str(location).lower() if location else None

        async def _cat_file(self, path, start=None, end=None, **kwargs):
            return await self._zephyr_cat(
                path,
                start,
                end,
                lambda: super(GuardedGCSFileSystem, self)._cat_file(path, start=start, end=end, **kwargs),
                lambda: self.unguarded._cat_file(path, start=start, end=end, **kwargs),
            )

    return _module_level(GuardedGCSFileSystem)


def _build_s3_class() -> type:
    S3FileSystem = _client_class("s3", "s3fs", "S3FileSystem")

    class GuardedS3FileSystem(CrossRegionGuardedFS, S3FileSystem):
        """s3fs' S3FileSystem with the cross-region read guard."""

        _zephyr_kind = "s3"

        async def _zephyr_fetch_location(self, bucket: str) -> str | None:
            plain = self.unguarded
            try:
                response = await plain._call_s3("get_bucket_location", Bucket=bucket)
                # S3 reports us-east-1 as an empty constraint and old eu-west-1 buckets as "EU".
                constraint = response.get("LocationConstraint") or "us-east-1"
                return "eu-west-1" if constraint == "EU" else str(constraint).lower()
            except Exception:
                # No s3:GetBucketLocation permission: HEAD tells the region in a header.
                response = await plain._call_s3("head_bucket", Bucket=bucket)
                region = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
                return str(region).lower() if region else None

        async def _cat_file(self, path, version_id=None, start=None, end=None, **kwargs):
            return await self._zephyr_cat(
                path,
                start,
                end,
                lambda: super(GuardedS3FileSystem, self)._cat_file(
                    path, version_id=version_id, start=start, end=end, **kwargs
                ),
                lambda: self.unguarded._cat_file(path, version_id=version_id, start=start, end=end, **kwargs),
            )

    return _module_level(GuardedS3FileSystem)


_BUILDERS = {"GuardedGCSFileSystem": _build_gcs_class, "GuardedS3FileSystem": _build_s3_class}
_PROTOCOL_CLASS = {
    "gs": "GuardedGCSFileSystem",
    "gcs": "GuardedGCSFileSystem",
    "s3": "GuardedS3FileSystem",
    "s3a": "GuardedS3FileSystem",
}


def __getattr__(name: str) -> type:
    """Build the guarded classes on first use, so importing Zephyr never imports gcsfs or s3fs."""
    if name not in _BUILDERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _cache_lock:
        if name not in _classes:
            _classes[name] = _BUILDERS[name]()
        return _classes[name]


def guarded_filesystem_class(protocol: str) -> type | None:
    """The guarded class for ``gs``/``gcs``/``s3``/``s3a``; None for other protocols."""
    name = _PROTOCOL_CLASS.get(protocol)
    return None if name is None else __getattr__(name)


def guarded_url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The guarded gcsfs/s3fs serving `url` (registered for ``gs``/``gcs``/``s3``/``s3a``)."""
    protocol, _ = split_protocol(url)
    cls = guarded_filesystem_class(protocol)
    if cls is None:
        raise ValueError(f"no cross-region guarded filesystem for {url!r}: expected gs://, gcs://, s3:// or s3a://")
    options = {**_emulator_defaults(protocol), **cls._get_kwargs_from_urls(url)}
    _check_access(cls._zephyr_kind, options, url)  # before the client's own start (gcsfs looks for credentials)
    return cls(**options), cls._strip_protocol(url)


def _check_access(kind: str, options: dict[str, Any], url: str) -> None:
    """Before a process's first request to an object store: can its endpoint be reached at all, and (S3)
    are there credentials? Either failing is one `RemoteStorageError` naming `url` and the fix, at once,
    instead of the clients' retries (gcsfs: 6 attempts over ~40 s and a traceback per attempt; botocore:
    `NoCredentialsError` deep in a stack). Checked once per endpoint and process; a reachable endpoint is
    then left to the client (its retries handle a passing network error)."""
    endpoint, override = _endpoint(kind, options)
    key: tuple[Any, ...] = (kind, endpoint)
    if key not in _access_checked:
        _check_reachable(url, endpoint, override)
        _access_checked.add(key)
    if kind == "s3" and not (options.get("anon") or options.get("key") or options.get("session")):
        profile = options.get("profile") or os.environ.get("AWS_PROFILE")
        key = ("s3-credentials", profile)
        if key not in _access_checked:
            _check_s3_credentials(url, profile)
            _access_checked.add(key)


def _endpoint(kind: str, options: dict[str, Any]) -> tuple[str, str | None]:
    """The service's URL as the client will use it, and the variable that set it (None: the default)."""
    configured = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get("endpoint_url")
    if configured:
        return str(configured), None
    names = ("STORAGE_EMULATOR_HOST",) if kind == "gcs" else ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    for name in names:
        value = os.environ.get(name, "")
        if value and value != "default":
            return (value if "://" in value else f"http://{value}"), name
    return ("https://storage.googleapis.com" if kind == "gcs" else "https://s3.amazonaws.com"), None


def _check_reachable(url: str, endpoint: str, override: str | None) -> None:
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return  # the client goes through a proxy: a direct connection says nothing
    parts = urlsplit(endpoint)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    timeout = float(os.environ.get(CONNECT_TIMEOUT_ENV) or 5)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        timed_out = isinstance(error, TimeoutError)
        reason = f"no answer within {timeout:g} s" if timed_out else (error.strerror or str(error))
        check = f"{override}={os.environ.get(override)}" if override else "the machine's DNS and firewall"
        raise RemoteStorageError(
            f"cannot reach {url}: its service {endpoint} cannot be reached ({reason}): no network, or a wrong "
            f"endpoint. Fix: check the network (or proxy) and {check}, then rerun ({CONNECT_TIMEOUT_ENV}=30 "
            "waits longer for a slow network)."
        ) from None


def _check_s3_credentials(url: str, profile: str | None) -> None:
    import botocore.exceptions
    import botocore.session

    try:
        credentials = botocore.session.Session(profile=profile).get_credentials()
    except botocore.exceptions.ProfileNotFound:
        credentials = None
    if credentials is None:
        raise RemoteStorageError(
            f"no AWS credentials to read {url}"
            + (f" (profile {profile!r} not found)" if profile else "")
            + ": none in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws or the instance's role. "
            "Fix: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or run on a machine with a role "
            "that may read the bucket; then rerun."
        )


def _emulator_defaults(protocol: str) -> dict:
    """gcsfs with ``STORAGE_EMULATOR_HOST`` and no configured token: anonymous (emulators need none,
    and the default credential chain would otherwise probe the GCE metadata server)."""
    if protocol not in ("gs", "gcs") or not os.environ.get("STORAGE_EMULATOR_HOST"):
        return {}
    configured = {**fsspec.config.conf.get("gs", {}), **fsspec.config.conf.get("gcs", {})}
    return {} if "token" in configured else {"token": "anon"}


register_protocol(tuple(_PROTOCOL_CLASS), guarded_url_to_fs)


def unguarded(fs: fsspec.AbstractFileSystem) -> fsspec.AbstractFileSystem:
    """`fs` without the guard (itself when it has none): for transfers charged some other way."""
    return fs.unguarded if isinstance(fs, CrossRegionGuardedFS) else fs


def bucket_location(url: str) -> str | None:
    """Location of the bucket holding `url` (``us``, ``europe-west4``, ``eu-west-1``; None: unknown)."""
    fs, path = url_to_fs(url)
    if not isinstance(fs, CrossRegionGuardedFS):
        return None
    return sync(fs.loop, fs._zephyr_location, fs._zephyr_bucket(path))


def is_cross_region(url: str) -> bool:
    """True when reading `url` from this machine would be charged to the transfer budget."""
    fs, path = url_to_fs(url)
    return isinstance(fs, CrossRegionGuardedFS) and fs._zephyr_route_sync(path) is not None


def record_transfer(url: str, nbytes: int) -> int:
    """Charge `nbytes` read from `url` by a tool outside fsspec (pyarrow's own GCS client, gsutil, ...).

    Returns the bytes charged: `nbytes` when `url` is in another region, 0 when it is local (or
    either region is unknown). Raises `CrossRegionBudgetExceeded` past the budget; call it before
    the transfer when the size is known, so that nothing is paid for a refused read.
    """
    fs, path = url_to_fs(url)
    if not isinstance(fs, CrossRegionGuardedFS):
        return 0
    route = fs._zephyr_route_sync(path)
    if route is None:
        return 0
    charge_cross_region(fs._zephyr_url(path), nbytes, source=route[0], destination=route[1])
    return nbytes


def reset_bucket_location_cache() -> None:
    """Forget cached bucket locations and warnings (tests; buckets re-created elsewhere)."""
    with _cache_lock:
        _location_cache.clear()
        _warned_buckets.clear()
        _access_checked.clear()
