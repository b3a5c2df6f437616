"""Which filesystem serves a URL protocol: a protocol -> factory registry.

`zephyr.fs.core.url_to_fs` asks this registry first and falls back to plain fsspec. The cross-region
guard (``gs``, ``s3``) and the mirror (``mirror``) register their factories here when
`zephyr.fs` is imported, so the core layer never imports them: every import in the package
points down (core -> registry; region_guard -> core; mirror -> region_guard, core).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import fsspec

__all__ = ["FilesystemFactory", "register_protocol", "factory_for", "registered_protocols"]

FilesystemFactory = Callable[[str], tuple[fsspec.AbstractFileSystem, str]]
"""Builds, for a full URL, the filesystem that serves it and the path inside that filesystem."""

_factories: dict[str, FilesystemFactory] = {}
_lock = threading.Lock()


def register_protocol(protocols: str | tuple[str, ...], factory: FilesystemFactory) -> None:
    """Serve `protocols` (``"gs"`` or ``("s3", "s3a")``) with `factory`; a later registration wins."""
    names = (protocols,) if isinstance(protocols, str) else protocols
    with _lock:
        for name in names:
            _factories[name] = factory


def factory_for(protocol: str | None) -> FilesystemFactory | None:
    """The registered factory for `protocol`, or None when plain fsspec serves it."""
    if protocol is None:
        return None
    return _factories.get(protocol)


def registered_protocols() -> list[str]:
    """The protocols with a registered factory, sorted."""
    with _lock:
        return sorted(_factories)
