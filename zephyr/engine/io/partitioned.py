"""Partitioned writes: one file per value of a field, in one pass, with bounded memory.

A shard writes a file only for the values its records hold, so the files alone cannot tell a reader
whether shard 3 had no `de` records or its `de` file was lost (a shard with no records at all writes no
file). Each shard therefore also writes a manifest, after its files: `<root>.partitions/shard-<i>-of-<n>.json`
beside the output's root folder (the pattern's fixed part: `out/docs` for `out/docs/{lang}/part-{shard}.jsonl`),
listing every file the shard wrote with its value and record count (an empty shard: no files, 0 records).
A shard without a manifest did not finish; a listed file that is missing was lost. The manifests sit
*beside* the root, not in it, so that polars and pyarrow.dataset read the root folder as before (polars
refuses a folder holding files of another extension, hidden or not). Only an output at the top of a
bucket or of the working folder keeps them inside, in `<root>/_partitions/`. `read_partition_manifests`
reads them back.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fsspec.core import split_protocol

from zephyr.engine.io.formats import resolve_format
from zephyr.engine.io.jsonl import encode_jsonl_block, write_jsonl_bytes
from zephyr.engine.io.records import write_records
from zephyr.engine.io.sink import WriteStats
from zephyr.fs import atomic_write, join, url_to_fs

__all__ = [
    "MANIFEST_KIND",
    "manifest_dir",
    "read_partition_manifests",
    "remove_dead_partition_temps",
    "write_partition_manifest",
    "write_partitioned",
]

MANIFEST_KIND = "zephyr-partitioned-shard"
_OBJECT_STORES = ("gs", "gcs", "s3", "s3a")

_PARTITION_BUFFER = 65536  # records held in memory across all partitions before spilling


def _partition_value(value: Any, field: str, where: str) -> str | int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (str, int))
        or value == ""
        or "/" in str(value)
        or str(value) in (".", "..")
    ):
        raise ValueError(
            f"{where}: partition_by={field!r} needs a non-empty string or int without '/' (it becomes part of the "
            f"path), got {value!r}; map the field to a clean value first, or filter such records out"
        )
    return value


def write_partitioned(
    items: Iterable[dict | pa.RecordBatch],
    field: str,
    path_of: Callable[[str | int], str],
    *,
    format: str | None = None,
) -> list[WriteStats]:
    """Write records to one file per value of `field`, at `path_of(value)`, in one pass.

    Records are buffered per value and spilled to local temporary files, so memory stays bounded
    whatever the number of values; each file is then written atomically by `write_records` (same
    formats and schema rules). Returns the files' stats, ordered by value. A JSON Lines file's records
    spill as the lines they become (encoded once, copied through its compressor at the end) rather than
    pickled: the pickle round trip of every document had cost about as much as its JSON encoding.
    """
    with tempfile.TemporaryDirectory(prefix="zephyr-partitions-") as spill:
        spill_files: dict[str | int, Any] = {}
        counts: dict[str | int, int] = {}
        encoded_lines: dict[str | int, bool] = {}  # value -> its spill holds JSON Lines (else pickles)
        buffers: dict[str | int, list] = {}
        buffered = seen = 0

        def flush() -> None:
            for value, chunk in buffers.items():
                if value not in spill_files:
                    # One spill file per value, kept open across flushes; closed in the finally below.
                    spill_files[value] = open(os.path.join(spill, f"{len(spill_files)}.part"), "wb")  # noqa: SIM115
                    encoded_lines[value] = resolve_format(path_of(value), format).name == "jsonl"
                    counts[value] = 0
                if encoded_lines[value]:
                    rows = [
                        r for part in chunk for r in (part.to_pylist() if isinstance(part, pa.RecordBatch) else [part])
                    ]
                    spill_files[value].write(encode_jsonl_block(rows, path_of(value), counts[value]))
                    counts[value] += len(rows)
                else:
                    pickle.dump(chunk, spill_files[value], protocol=5)
            buffers.clear()

        try:
            for item in items:
                if isinstance(item, pa.RecordBatch):
                    where = f"records {seen + 1}-{seen + item.num_rows}"
                    if field not in item.schema.names or item.column(field).null_count:
                        raise ValueError(f"{where}: partition_by={field!r} but some records have no {field!r} value")
                    column = item.column(field)
                    for value in column.unique().to_pylist():
                        part = item.filter(pc.equal(column, value))
                        buffers.setdefault(_partition_value(value, field, where), []).append(part)
                    seen += item.num_rows
                    buffered += item.num_rows
                else:
                    seen += 1
                    if not isinstance(item, dict) or field not in item:
                        raise ValueError(f"record {seen}: partition_by={field!r} but the record has no {field!r} field")
                    buffers.setdefault(_partition_value(item[field], field, f"record {seen}"), []).append(item)
                    buffered += 1
                if buffered >= _PARTITION_BUFFER:
                    flush()
                    buffered = 0
            flush()
        finally:
            for handle in spill_files.values():
                handle.close()

        def spilled(path: str) -> Iterator[dict | pa.RecordBatch]:
            with open(path, "rb") as handle:
                while True:
                    try:
                        yield from pickle.load(handle)
                    except EOFError:
                        return

        def spilled_bytes(path: str) -> Iterator[bytes]:
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    yield chunk

        stats = []
        for value, handle in sorted(spill_files.items(), key=lambda kv: str(kv[0])):
            if encoded_lines[value]:
                url = path_of(value)
                stats.append(
                    WriteStats(
                        path=url, records=counts[value], bytes=write_jsonl_bytes(spilled_bytes(handle.name), url)
                    )
                )
            else:
                stats.append(write_records(spilled(handle.name), path_of(value), format=format))
        return stats


def _root(pattern: str) -> str:
    """The folder every partition of `pattern` lies under: its fixed part, up to the last '/'."""
    return pattern.split("{", 1)[0].rsplit("/", 1)[0] if "/" in pattern.split("{", 1)[0] else ""


def manifest_dir(pattern: str) -> str:
    """Where the shards' manifests of a partitioned output go: `<root>.partitions` beside its root, or
    `<root>/_partitions` when the root is a bucket's top or the working folder (nothing beside it)."""
    root = _root(pattern).rstrip("/")
    protocol, path = split_protocol(root)
    top = path.strip("/") in ("", ".") or (protocol in _OBJECT_STORES and "/" not in path.strip("/"))
    return join(root or ".", "_partitions") if top else f"{root}.partitions"


def write_partition_manifest(
    pattern: str, field: str, shard: int, total: int, written: list[tuple[str | int, WriteStats]]
) -> str:
    """Write shard `shard`'s manifest (atomically, after its files): each (value, file) it wrote, with records."""
    url = join(manifest_dir(pattern), f"shard-{shard:05d}-of-{total:05d}.json")
    files: list[dict[str, Any]] = [
        {"value": value, "path": _relative(stats.path, pattern), "records": stats.records, "bytes": stats.bytes}
        for value, stats in written
    ]
    manifest: dict[str, Any] = {  # paths relative to the root: the manifests stay right when the output folder is moved
        "kind": MANIFEST_KIND,
        "pattern": _relative(pattern, pattern),
        "partition_by": field,
        "shard": shard,
        "total": total,
        "records": sum(f["records"] for f in files),
        "files": files,
        "written_at": time.time(),  # a rerun with another shard count leaves the old manifests: newest wins
    }
    with atomic_write(url, "w", compression=None) as handle:
        handle.write(json.dumps(manifest, indent=1))
    return url


def _relative(path: str, pattern: str) -> str:
    root = _root(pattern)
    return path[len(root) :].lstrip("/") if root and path.startswith(root) else path


def read_partition_manifests(pattern: str) -> list[dict[str, Any]]:
    """The manifests of a partitioned output written with `pattern` (those of the shard count it was
    written with last), by shard, file paths made absolute again; a shard missing did not finish."""
    fs, folder = url_to_fs(manifest_dir(pattern))
    try:
        names = sorted(fs.ls(folder, detail=False))
    except FileNotFoundError:
        return []
    manifests = []
    for name in names:
        if name.rsplit("/", 1)[-1].startswith("shard-") and name.endswith(".json"):
            with fs.open(name, "r") as handle:
                manifest = json.load(handle)
            if manifest.get("kind") == MANIFEST_KIND and manifest.get("pattern") == _relative(pattern, pattern):
                root = _root(pattern)
                for entry in manifest["files"]:
                    entry["path"] = join(root, entry["path"]) if root else entry["path"]
                manifests.append(manifest)
    if manifests:
        latest = max(manifests, key=lambda m: m.get("written_at", 0))["total"]
        manifests = [m for m in manifests if m["total"] == latest]
    return sorted(manifests, key=lambda m: m["shard"])


def remove_dead_partition_temps(pattern: str, field: str, shard: int, total: int) -> int:
    """Remove the temporary files (`atomic_write`'s `.tmp-<32 hex>-<name>`) that killed attempts of this
    shard left in ANY partition of the output, not only in those this attempt rewrote: a partition the
    retry has no records for would otherwise keep them forever. Returns how many were removed."""
    shard_pattern = pattern.replace("{" + field + "}", "\0").format(shard=shard, total=total)
    if split_protocol(shard_pattern)[0] in _OBJECT_STORES:  # object stores keep no temporary files
        return 0
    fs, path = url_to_fs(shard_pattern)
    folder, name = os.path.dirname(path), os.path.basename(path)
    name_regex = re.compile(r"\.tmp-[0-9a-f]{32}-" + "[^/]+".join(map(re.escape, name.split("\0"))) + "$")
    folders = fs.glob(folder.replace("\0", "*")) if "\0" in folder else [folder]
    removed = 0
    for each in folders:
        try:
            entries = fs.ls(each, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if name_regex.match(entry.rstrip("/").rsplit("/", 1)[-1]):
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(entry)
                    removed += 1
    return removed
