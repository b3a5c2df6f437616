"""Documents: page through a folder of jsonl(.gz/.zst)/parquet/vortex files without reading them whole.

How a page is read (the cost is what the page needs, never a whole file):

- Unfiltered parquet: the row count comes from each file's footer, so earlier files are skipped
  unopened and the scan starts at the row group holding the first row of the page.
- Unfiltered vortex: the row count comes from the footer; the page's rows are read by index.
- jsonl: records stream from the start of the file where the page begins and the stream is closed
  as soon as the page is full (decompression stops there).
- Filtered (the engine's `col` expressions, see `zephyr.ui.filters`): parquet row groups are read
  one at a time, the filter's columns first (its Arrow form, as the engine's pushdown uses) and whole
  rows only for the rows shown; vortex scans get the predicate pushed down as `Dataset.filter` does;
  jsonl streams. Files are scanned in order until the page is full; how many matches each scanned
  file held is remembered, so later pages start at the right file.

Text search is `col("text").str_contains(q)` (case-sensitive), combined with the filter. Nested fields
(`quality_signals.words`) are addressed with dots; such filters are evaluated row by row.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq

from zephyr.engine.expr import Expr, col
from zephyr.engine.io import infer_format, read_records
from zephyr.fs import open_url, url_to_fs
from zephyr.ui.source import Root

__all__ = ["page", "get_row", "find_document", "file_rows"]

_MATCH_CACHE: OrderedDict[tuple, dict[int, int]] = OrderedDict()
_MATCH_LOCK = threading.Lock()


@functools.lru_cache(maxsize=65536)
def file_rows(url: str, mtime: float = 0.0) -> int | None:
    """Rows of a parquet/vortex file from its footer (cached per modification time); None for jsonl
    (unknown without reading it)."""
    fmt = infer_format(url)
    rows: int | None = None
    if fmt == "parquet":
        fs, path = url_to_fs(url)
        with fs.open(path, "rb") as handle:
            rows = pq.ParquetFile(handle).metadata.num_rows
    elif fmt == "vortex":
        rows = len(_vortex_open(url))
    return rows


def _vortex_open(url: str) -> Any:
    import vortex as vx

    fs, path = url_to_fs(url)
    if getattr(fs, "protocol", None) in ("file", ("file", "local")) or fs.__class__.__name__ == "LocalFileSystem":
        return vx.open(path)
    return vx.open_readable(open_url(url, "rb", compression=None))


def _parquet_slice(url: str, start: int, count: int) -> list[dict]:
    """Rows [start, start + count) of a parquet file, reading only the row groups that hold them."""
    fs, path = url_to_fs(url)
    out: list[dict] = []
    with fs.open(path, "rb") as handle:
        pf = pq.ParquetFile(handle)
        meta = pf.metadata
        first = 0
        for rg in range(meta.num_row_groups):
            n = meta.row_group(rg).num_rows
            if first + n <= start:
                first += n
                continue
            for batch in pf.iter_batches(batch_size=max(64, count), row_groups=[rg]):
                rows = batch.to_pylist()
                lo = max(0, start - first)
                out.extend(rows[lo : lo + count - len(out)])
                first += batch.num_rows
                start = max(start, first)
                if len(out) >= count:
                    return out
    return out


def _parquet_filtered(url: str, expr: Expr, skip: int, count: int) -> tuple[list[dict], int] | None:
    """Matching rows [skip, skip + count) of a parquet file and how many matches were read, or None when
    the expression needs fields the file lacks (the caller streams instead).

    Row group by row group: the filter's columns are read and the expression (the engine's, as an Arrow
    expression, like its pushdown) picks the matching rows; whole rows are decoded only for the rows the
    page shows. A dataset scanner would read ahead many row groups, which is what a page must not do.
    """
    import numpy as np
    import pyarrow as pa

    fs, path = url_to_fs(url)
    got: list[dict] = []
    consumed = 0
    with fs.open(path, "rb") as handle:
        pf = pq.ParquetFile(handle)
        columns = sorted(expr.columns())
        if not set(columns) <= set(pf.schema_arrow.names):
            return None
        try:
            arrow_expr = expr.to_arrow()
        except NotImplementedError:
            return None
        for rg in range(pf.metadata.num_row_groups):
            keys = pf.read_row_group(rg, columns=columns)
            keys = keys.append_column("__row", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
            hits = keys.filter(arrow_expr).column("__row").to_numpy()
            if consumed + len(hits) <= skip:
                consumed += len(hits)
                continue
            lo = max(0, skip - consumed)
            take = hits[lo : lo + count - len(got)]
            got.extend(pf.read_row_group(rg).take(pa.array(take)).to_pylist())
            consumed += lo + len(take)
            if len(got) >= count:
                break
    return got, consumed


def _vortex_slice(url: str, start: int, count: int) -> list[dict]:
    import pyarrow as pa
    import vortex as vx

    vfile = _vortex_open(url)
    stop = min(len(vfile), start + count)
    if stop <= start:
        return []
    reader = vfile.to_arrow(indices=vx.array(pa.array(range(start, stop), type=pa.uint64())))
    rows: list[dict] = []
    for batch in reader:
        rows.extend(batch.to_pylist())
    return rows


def _iter_file(url: str, expr: Expr | None) -> Iterator[dict]:
    nested = sorted(c for c in expr.columns() if "." in c) if expr is not None else []
    if not nested:
        return read_records(url, filter=expr)
    return _nested_filter(read_records(url), expr, nested)


def _lookup(record: Any, path: list[str]) -> Any:
    for part in path:
        if not isinstance(record, dict):
            return None
        record = record.get(part)
    return record


def _nested_filter(records: Iterator[dict], expr: Expr, nested: list[str]) -> Iterator[dict]:
    """`expr` over records whose nested fields are addressed with dots (`quality_signals.words`).

    The engine's `col` reads top-level fields only, so each record is seen through a view where every
    dotted name is its nested value; the expression is the engine's, evaluated row by row (no pushdown).
    """
    try:
        for record in records:
            view = dict(record)
            for name in nested:
                if name not in record:
                    view[name] = _lookup(record, name.split("."))
            if expr.matches(view):
                yield record
    finally:
        records.close()  # type: ignore[attr-defined]


def _stream_slice(url: str, expr: Expr | None, skip: int, count: int) -> tuple[list[dict], int]:
    """Matching rows [skip, skip + count) of a file by streaming, and how many matches were read.

    The stream is closed as soon as the slice is full, so the rest of the file is never decompressed.
    """
    stream = _iter_file(url, expr)
    got: list[dict] = []
    consumed = 0
    try:
        for row in stream:
            consumed += 1
            if consumed > skip:
                got.append(row)
                if len(got) >= count:
                    break
    finally:
        stream.close()  # type: ignore[attr-defined]
    return got, consumed


def _combined(expr: Expr | None, q: str | None) -> Expr | None:
    if q:
        search = col("text").str_contains(q)
        return search if expr is None else expr & search
    return expr


def matches_before(key: tuple) -> dict[int, int]:
    """Remembered match counts per file index for one (dataset, filter) listing."""
    with _MATCH_LOCK:
        hit = _MATCH_CACHE.get(key)
        if hit is None:
            hit = {}
            _MATCH_CACHE[key] = hit
            while len(_MATCH_CACHE) > 256:
                _MATCH_CACHE.popitem(last=False)
        else:
            _MATCH_CACHE.move_to_end(key)
        return hit


def page(
    root: Root,
    dataset: str,
    *,
    expr: Expr | None = None,
    q: str | None = None,
    offset: int = 0,
    limit: int = 50,
    file: str | None = None,
) -> dict:
    """One page of `dataset` (a folder under the root): rows, where each came from, and whether more follow.

    Each row is returned with `_file` (relative path) and `_row` (its index among the file's matching
    rows) so a document can be opened again. `total` is known for unfiltered parquet/vortex folders.
    `file` pages through that one file of the folder (jsonl has no row counts: deep pages of a folder
    must count the files before them once, a single file need not).
    """
    if offset < 0 or not 1 <= limit <= 1000:
        raise ValueError(f"offset must be >= 0 and limit in 1..1000, got offset={offset}, limit={limit}")
    info = root.dataset(dataset)
    files = info["files"]
    if file:
        if file not in files:
            raise KeyError(f"{file!r} is not a data file of {dataset!r}; its files: {', '.join(files[:10])}")
        files = [file]
    listing = root.files()
    where = _combined(expr, q)
    key = (root.url, dataset, repr(where), tuple((f, listing.get(f, {}).get("mtime")) for f in files))
    counts = matches_before(key)
    rows: list[dict] = []
    seen = 0  # matching rows in the files before file i (exact: a file is passed only when fully counted)
    complete = True  # every file was counted
    for i, rel in enumerate(files):
        url = root.abs(rel)
        n = counts.get(i)
        if n is None and where is None:
            n = file_rows(url, listing.get(rel, {}).get("mtime", 0.0))
            if n is not None:
                counts[i] = n
        if n is not None and seen + n <= offset:
            seen += n
            continue
        skip = max(0, offset - seen)
        need = limit + 1 - len(rows)  # one more than the page: tells whether a next page exists
        fmt = infer_format(url)
        if where is None and fmt == "parquet":
            got = _parquet_slice(url, skip, need)
        elif where is None and fmt == "vortex":
            got = _vortex_slice(url, skip, need)
        else:
            sliced = _parquet_filtered(url, where, skip, need) if fmt == "parquet" else None
            got, consumed = sliced if sliced is not None else _stream_slice(url, where, skip, need)
            if len(got) < need:
                counts[i] = consumed  # the scan ended: this file's matches are now known
        for j, row in enumerate(got):
            row["_file"] = rel
            row["_row"] = skip + j
        rows.extend(got)
        if len(rows) > limit:
            complete = False
            break
        seen += counts[i]
    has_more = len(rows) > limit
    known_total: int | None = seen if complete else None
    if known_total is None and all(counts.get(i) is not None for i in range(len(files))):
        known_total = sum(counts[i] for i in range(len(files)))
    return {
        "dataset": dataset,
        "file": file,
        "file_list": info["files"][:200],
        "files": len(info["files"]),
        "format": info["format"],
        "filter": None if expr is None else repr(expr),
        "q": q or None,
        "offset": offset,
        "limit": limit,
        "rows": rows[:limit],
        "has_more": has_more,
        "total": known_total,
    }


def get_row(root: Root, rel: str, index: int, *, expr: Expr | None = None) -> dict | None:
    """Row `index` of one file (among the rows matching `expr`, when given)."""
    url = root.abs(rel)
    fmt = infer_format(url)
    if expr is None and fmt == "parquet":
        got = _parquet_slice(url, index, 1)
    elif expr is None and fmt == "vortex":
        got = _vortex_slice(url, index, 1)
    else:
        sliced = _parquet_filtered(url, expr, index, 1) if fmt == "parquet" and expr is not None else None
        got = sliced[0] if sliced is not None else _stream_slice(url, expr, index, 1)[0]
    if not got:
        return None
    got[0]["_file"] = rel
    got[0]["_row"] = index
    return got[0]


def find_document(root: Root, doc_id: str, folders: list[str], *, id_field: str = "id") -> dict | None:
    """The first document whose `id_field` equals `doc_id` in the data files of `folders` (in order).

    Cached per (root, id): lineage pages look the same keeper up once. The scan pushes `id == doc_id`
    into parquet/vortex readers; jsonl files are streamed.
    """
    key = ("doc", doc_id, tuple(folders))

    def build() -> dict | None:
        expr = col(id_field) == doc_id
        for folder in folders:
            try:
                files = root.dataset(folder)["files"]
            except KeyError:
                continue
            for rel in files:
                stream = read_records(root.abs(rel), filter=expr)
                try:
                    for row in stream:
                        row["_file"] = rel
                        return row
                finally:
                    stream.close()  # type: ignore[attr-defined]
        return None

    return root.cached(repr(key), build, ttl=300.0)
