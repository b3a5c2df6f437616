"""The `path` format: each file is one record naming it, `{"path": url}`, for files an op reads itself.

Some inputs are read by an operator rather than by a record reader: WARC archives (`operators.warc`),
PDFs, images. Reading them as `Dataset.from_files(glob, format="path")` keeps one shard per file and
everything a file source gets from the planner: the files listed at plan time, the shard's file size in
the stats and fingerprint, and in a dry run a glob over what an earlier step would write planned as that
step's pending output (`engine.run.pending`). It is never inferred from a name, and cannot be written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from zephyr.engine.expr import Expr
from zephyr.engine.io.format import Format
from zephyr.engine.io.jsonl import project_filter_lists

__all__ = ["PATHS", "read_paths"]


def read_paths(
    url: str, columns: Sequence[str] | None, filter: Expr | None, skip: bool, compression: str | None
) -> Iterator[list[dict]]:
    """The one record of file `url`, `{"path": url}` (filtered and projected like any record)."""
    return project_filter_lists(iter([[{"path": url}]]), columns, filter, url)


PATHS = Format("path", (), record_lists=read_paths)
"""Each file as the record `{"path": url}`; read by an op of its own (`flat_map(ReadWarc())`)."""
