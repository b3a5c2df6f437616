"""Which files a `from_files` pattern reads: globs, and directories as polars and Ray Data read them."""

from __future__ import annotations

import logging

from zephyr.engine.io.compression import COMPRESSIONS, split_compression
from zephyr.engine.io.formats import expected_names, format_choices, infer_format
from zephyr.engine.io.hf import HF_METADATA_FILES, hf_data_files, hf_folder_kind
from zephyr.errors import BadInputError
from zephyr.fs import expand_glob, url_to_fs

_log = logging.getLogger("zephyr")


def data_files(pattern: str, format: str | None = None) -> list[str]:
    """The files `pattern` names, for reading as records.

    A glob that names files by extension (`data/*.jsonl.zst`) reads what it matches. A directory
    (`data/`), read recursively, or an open wildcard (`data/*`, `data/**`) reads the files whose
    format the name tells (see `formats`: jsonl[.gz|.zst|...], parquet, vortex, arrow; every file when
    `format` is given) and logs which extensions it skipped, so a folder with a README or a `.crc` file still
    reads. Hidden (`.`) and `_`-prefixed files are never read (see `expand_glob`).

    A Hugging Face `save_to_disk` folder reads the `.arrow` data files its `state.json` lists (a DatasetDict
    folder is refused with its split names, see `zephyr.engine.io.hf`); inside a folder read recursively,
    such a folder's JSON metadata (`dataset_info.json`, `state.json`, `dataset_dict.json`) is never read as
    records, and what was set aside is logged.
    """
    if hf_folder_kind(pattern) is not None:
        return hf_data_files(pattern)
    files = expand_glob(pattern)
    if format is not None or not _open_ended(pattern):
        return files
    kept: list[str] = []
    skipped: dict[str, int] = {}  # extension -> files skipped
    metadata = [f for f in files if f.rsplit("/", 1)[-1] in HF_METADATA_FILES and hf_folder_kind(f.rsplit("/", 1)[0])]
    if metadata:
        _log.warning(
            "zephyr: %s: not reading %d Hugging Face metadata file(s) as records (e.g. %s); the .arrow files "
            "beside them hold the records",
            pattern,
            len(metadata),
            metadata[0],
        )
    set_aside = set(metadata)
    for path in files:
        if path in set_aside:
            continue
        try:
            infer_format(path)
        except BadInputError:
            ext = _extension(path)
            skipped[ext] = skipped.get(ext, 0) + 1
            continue
        kept.append(path)
    if skipped:
        listed = ", ".join(f"{ext} ({n})" for ext, n in sorted(skipped.items()))
        _log.warning(
            "zephyr: %s: read %d data file(s), skipped %d file(s) whose format the name does not tell: %s "
            "(pass format= to read them as one format)",
            pattern,
            len(kept),
            sum(skipped.values()),
            listed,
        )
    if not kept:
        raise BadInputError(
            f"{pattern!r} has no data files: found {len(files)} file(s) with extensions "
            f"{', '.join(sorted(skipped))}; expected {expected_names()}. Pass format={format_choices()} to read "
            "them anyway"
        )
    return kept


def _open_ended(pattern: str) -> bool:
    fs, path = url_to_fs(pattern)
    last = path.rstrip("/").rsplit("/", 1)[-1]
    if any(ch in path for ch in "*?["):
        return "." not in last.replace("*", "").replace("?", "")
    try:
        return fs.isdir(path)
    except OSError:
        return False


def _extension(path: str) -> str:
    stem, codec = split_compression(path)
    name = stem.rsplit("/", 1)[-1]
    ext = "." + name.rsplit(".", 1)[-1] if "." in name else "(none)"
    suffix = {codec: suffix for suffix, codec in reversed(COMPRESSIONS.items())}  # the first suffix of each
    return ext + (suffix[codec] if codec else "")
