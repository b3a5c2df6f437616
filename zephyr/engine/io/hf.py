"""Hugging Face `datasets` folders and the Arrow IPC files inside them, read and written.

A user coming from Hugging Face has folders made by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`:

    folder/                           a Dataset
      data-00000-of-00002.arrow       the records: Arrow IPC *stream* files (not Feather/IPC "file" format)
      data-00001-of-00002.arrow
      dataset_info.json               description and features (column types)
      state.json                      {"_data_files": [{"filename": ...}, ...], "_split": ..., "_fingerprint": ...}
    folder/                           a DatasetDict
      dataset_dict.json               {"splits": ["train", "test"]}
      train/  test/                   one Dataset folder per split

`Dataset.from_files(folder)` once skipped the `.arrow` files and read `dataset_info.json` as a one-record
JSON Lines dataset, silently. Now `.arrow` is a format of its own (IPC stream, or IPC file, told apart by
the file's magic bytes), a Dataset folder reads the data files its `state.json` lists, in that order, and
never its JSON metadata; a DatasetDict folder is refused with its split names (`Dataset.from_hf(folder,
split="train")` reads one). `Dataset.write_hf(folder)` writes the same layout, one data file per shard,
which `datasets.load_from_disk` reads (checked against the `datasets` package in the tests).

The `.arrow` format is this module's `ARROW` entry, registered in `zephyr.engine.io.formats`; the folder
handling (`hf_data_files`, `write_hf_metadata`) is what `listing.data_files` and `Dataset.write_hf` call.
"""

from __future__ import annotations

import itertools
import json
import posixpath
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from zephyr.engine.expr import Expr
from zephyr.engine.io.bad_input import bad_file, short_error
from zephyr.engine.io.format import Format
from zephyr.engine.io.scan import check_scan, filter_batch, scan_columns, unreadable_columnar_file
from zephyr.engine.io.schema import plain_schema
from zephyr.engine.io.sink import CountingSink, WriteStats
from zephyr.errors import BadInputError
from zephyr.fs import atomic_write, open_url, url_to_fs

__all__ = [
    "ARROW",
    "ARROW_SUFFIXES",
    "HF_METADATA_FILES",
    "arrow_batches",
    "arrow_schema",
    "hf_data_files",
    "hf_folder_kind",
    "hf_split_folder",
    "hf_splits",
    "write_arrow",
    "write_hf_metadata",
]

ARROW_SUFFIXES = (".arrow",)
HF_METADATA_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")
_FILE_MAGIC = b"ARROW1"  # the IPC *file* format starts with it; the stream format HF writes does not


# ------------------------------------------------------------------------------------ one .arrow file
def _open_reader(handle: Any) -> Any:
    """A batch reader over an IPC stream or IPC file, whichever `handle` holds."""
    head = handle.read(len(_FILE_MAGIC))
    handle.seek(0)
    if head == _FILE_MAGIC:
        reader = pa.ipc.open_file(handle)
        return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
    reader = pa.ipc.open_stream(handle)
    return reader.schema, iter(reader)


def arrow_schema(url: str) -> pa.Schema:
    """The schema of one .arrow file (its header; no batch is read)."""
    with open_url(url, "rb", compression=None) as handle:
        return plain_schema(_open_reader(handle)[0])


def arrow_batches(
    url: str, columns: Sequence[str] | None, filter: Expr | None, batch_size: int, skip: bool
) -> Iterator[pa.RecordBatch]:
    """Stream one .arrow file as record batches of at most `batch_size` rows, batch by batch (memory
    holds one of the file's batches). `columns` and `filter` are applied to each batch."""
    fs, path = url_to_fs(url)
    try:
        handle = open_url(url, "rb", compression=None)
    except FileNotFoundError:
        raise BadInputError(f"{url}: no such file; check the path") from None
    kept = 0
    with handle:
        try:
            schema, batches = _open_reader(handle)
        except (pa.ArrowInvalid, OSError) as exc:
            fix = "re-create or re-download the file (Hugging Face writes it with save_to_disk)"
            unreadable_columnar_file(url, fs, path, skip, "Arrow IPC (stream or file)", exc, fix)
            return
        if not len(schema):
            return
        check_scan(url, columns, filter, schema)
        wanted = scan_columns(columns, filter, schema) if filter is not None else columns
        predicate = filter.compile() if filter is not None else None
        try:
            for batch in batches:
                if wanted is not None:
                    batch = batch.select(list(wanted))
                if predicate is not None:
                    assert filter is not None
                    batch = filter_batch(batch, filter, predicate)
                    if columns is not None:
                        batch = batch.select(list(columns))
                for start in range(0, batch.num_rows, batch_size):
                    part = batch.slice(start, batch_size)
                    kept += part.num_rows
                    yield part
        except (pa.ArrowInvalid, OSError) as exc:
            bad_file(
                url,
                skip,
                "truncated",
                f"the Arrow stream ends inside a batch ({short_error(exc)})",
                fix="re-create or re-download the file",
                kept=kept,
            )


def write_arrow(batches: Iterator[pa.RecordBatch], url: str) -> WriteStats:
    """Write batches (one schema) as one Arrow IPC stream file, atomically: what `save_to_disk` writes."""
    first = next(batches)
    records = 0
    with atomic_write(url, "wb", compression=None) as raw:
        sink = CountingSink(raw)
        with pa.ipc.new_stream(sink, first.schema) as writer:
            for batch in itertools.chain([first], batches):
                writer.write_batch(batch)
                records += batch.num_rows
    return WriteStats(path=url, records=records, bytes=sink.count)


ARROW = Format("arrow", ARROW_SUFFIXES, write=write_arrow, batches=arrow_batches, schema=arrow_schema)
"""Arrow IPC (the stream files Hugging Face's save_to_disk writes; IPC files read too): one schema per file."""


# ------------------------------------------------------------------------------------- HF folders
def _read_json(url: str) -> Any:
    with open_url(url, "r", compression=None) as handle:
        return json.load(handle)


def hf_folder_kind(url: str) -> str | None:
    """ "dataset" (save_to_disk of a Dataset), "dataset_dict" (of a DatasetDict), or None."""
    fs, path = url_to_fs(url)
    base = path.rstrip("/")
    try:
        if fs.isfile(f"{base}/state.json") and fs.isfile(f"{base}/dataset_info.json"):
            return "dataset"
        if fs.isfile(f"{base}/dataset_dict.json"):
            return "dataset_dict"
    except OSError:
        return None
    return None


def hf_splits(url: str) -> list[str]:
    """The split names a DatasetDict folder's `dataset_dict.json` lists."""
    splits = _read_json(posixpath.join(url.rstrip("/"), "dataset_dict.json")).get("splits")
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise BadInputError(f"{url}/dataset_dict.json has no list of split names under 'splits'; got {splits!r}")
    return splits


def hf_split_folder(url: str, split: str | None) -> str:
    """The Dataset folder to read for `Dataset.from_hf(url, split=...)`: `url` itself for a Dataset folder
    (no split), `url/<split>` for a DatasetDict folder; a wrong or missing split is a ValueError naming
    the splits there are."""
    kind = hf_folder_kind(url)
    if kind == "dataset_dict":
        splits = hf_splits(url)
        if split not in splits:
            raise ValueError(
                f"from_hf: {url} is a DatasetDict with splits {', '.join(splits)}; "
                + (f"it has no split {split!r}" if split is not None else "choose one")
                + f", e.g. Dataset.from_hf({url!r}, split={splits[0]!r})"
            )
        return posixpath.join(url.rstrip("/"), split)
    if kind == "dataset":
        if split is not None:
            raise ValueError(f"from_hf: {url} is a single Dataset folder, not a DatasetDict; drop split={split!r}")
        return url
    raise ValueError(
        f"from_hf: {url} is not a Hugging Face save_to_disk folder (it has no state.json + dataset_info.json, "
        "nor dataset_dict.json); for data files use Dataset.from_files"
    )


def hf_data_files(url: str) -> list[str]:
    """The data files of a Hugging Face folder, in the order its `state.json` lists them.

    A DatasetDict folder raises BadInputError naming its splits: its splits are separate datasets (train
    and test read as one would mix them), so one is chosen by its sub-folder.
    """
    base = url.rstrip("/")
    kind = hf_folder_kind(base)
    if kind == "dataset_dict":
        splits = hf_splits(base)
        raise BadInputError(
            f"{url} is a Hugging Face DatasetDict folder with splits {', '.join(splits)}: read one split with "
            f"Dataset.from_hf({url!r}, split={splits[0]!r}) (or Dataset.from_files('{base}/{splits[0]}'))"
        )
    if kind != "dataset":
        raise BadInputError(f"{url} is not a Hugging Face dataset folder (no state.json and dataset_info.json)")
    state = _read_json(f"{base}/state.json")
    listed = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(listed, list) or not all(isinstance(f, dict) and f.get("filename") for f in listed):
        raise BadInputError(
            f"{base}/state.json lists no data files under '_data_files' (expected [{{'filename': "
            f"'data-00000-of-00001.arrow'}}, ...]); was the folder written by save_to_disk?"
        )
    files = [f"{base}/{entry['filename']}" for entry in listed]
    fs, _ = url_to_fs(base)
    missing = [f for f in files if not fs.exists(url_to_fs(f)[1])]
    if missing:
        raise BadInputError(
            f"{base}/state.json lists {len(missing)} data file(s) that are missing, e.g. {missing[0]}: the folder "
            "is incomplete; copy it again"
        )
    return files


def write_hf_metadata(folder: str, files: Sequence[str], schema: pa.Schema, *, split: str | None = None) -> None:
    """`dataset_info.json` and `state.json` for `files` (data files in `folder`), written last and
    atomically: a folder is a loadable dataset only once both exist. With `split`, the parent folder's
    `dataset_dict.json` gains that split, so the parent loads as a DatasetDict."""
    base = folder.rstrip("/")
    names = [posixpath.basename(f) for f in files]
    info = {"citation": "", "description": "", "features": _features(schema), "homepage": "", "license": ""}
    state: dict[str, Any] = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": uuid.uuid5(uuid.NAMESPACE_URL, base + "|" + "|".join(names)).hex[:16],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": split,
    }
    for name, value in (("dataset_info.json", info), ("state.json", state)):
        with atomic_write(f"{base}/{name}", "w", compression=None) as handle:
            json.dump(value, handle, indent=2)
    if split is not None:
        parent = posixpath.dirname(base)
        fs, parent_path = url_to_fs(parent)
        dict_path = f"{parent}/dataset_dict.json"
        splits = hf_splits(parent) if fs.isfile(f"{parent_path}/dataset_dict.json") else []
        with atomic_write(dict_path, "w", compression=None) as handle:
            json.dump({"splits": [*splits, split] if split not in splits else splits}, handle)


# HF's `Value` dtype names of the Arrow types a feature can be written for; other types are left to
# `datasets`, which infers features from the Arrow schema when dataset_info.json has none.
_VALUE_TYPES = {
    pa.string(): "string",
    pa.large_string(): "large_string",
    pa.binary(): "binary",
    pa.large_binary(): "large_binary",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint8",
    pa.uint16(): "uint16",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.float16(): "float16",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.null(): "null",
}


def _features(schema: pa.Schema) -> dict[str, Any] | None:
    """HF features for a schema of plain columns, else None (datasets then reads them from the Arrow schema)."""
    features = {}
    for field in schema:
        dtype = _VALUE_TYPES.get(field.type)
        if dtype is None:
            return None
        features[field.name] = {"dtype": dtype, "_type": "Value"}
    return features
