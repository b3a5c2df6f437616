"""Filesystems: one `open_url` / `url_to_fs` layer over fsspec for every path Zephyr reads or writes.

Importing this package registers the cross-region guarded gcsfs/s3fs (``gs://``, ``s3://``) and the
region-local mirror (``mirror://``) in the protocol registry (`zephyr.fs.registry`) that
`url_to_fs` consults; the modules import one another downwards only:
registry <- core <- region_guard <- mirror (regions, transfer_budget, copy_once are leaves).
"""

from zephyr.fs import mirror as _mirror  # noqa: F401  (registers mirror)
from zephyr.fs import region_guard as _region_guard  # noqa: F401  (registers gs/gcs/s3/s3a)
from zephyr.fs.core import (
    atomic_write,
    exists,
    expand_glob,
    is_hidden,
    join,
    missing_files,
    naming_the_file,
    open_url,
    remove_dead_temps,
    url_to_fs,
)
from zephyr.fs.registry import register_protocol

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
    "register_protocol",
]
