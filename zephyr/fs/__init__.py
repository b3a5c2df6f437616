"""Filesystems: one `open_url` / `url_to_fs` layer over fsspec for every path Zephyr reads or writes.

Importing this package registers the cross-region guarded gcsfs/s3fs (``gs://``, ``s3://``) and the
region-local mirror (``mirror://``) in the protocol registry (`zephyr.fs.registry`) that
`url_to_fs` consults; the modules import one another downwards only:
registry <- core <- region_guard <- mirror (regions, transfer_budget, copy_once are leaves).

The package offers `core`'s public API as core lists it (``from core import *``, ``__all__ += core.__all__``,
asyncio's pattern, which type checkers read as re-exports), so a name is listed once.
"""

from zephyr.fs import core
from zephyr.fs import mirror as _mirror  # noqa: F401  (registers mirror)
from zephyr.fs import region_guard as _region_guard  # noqa: F401  (registers gs/gcs/s3/s3a)
from zephyr.fs.core import *
from zephyr.fs.registry import register_protocol

__all__ = ["register_protocol"]
__all__ += core.__all__
