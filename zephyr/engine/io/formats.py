"""The format registry: every file format the engine reads and writes, by name, and formats from file names.

Each format is one module defining its `Format` (`zephyr.engine.io.format`); the table below registers it.
Everything that depends on a format (readers, writers, the planner's Arrow fast path, one schema per
written folder, `Dataset.write`'s check) asks `format_named(name)`, so adding a format is one module plus
one line here.
"""

from __future__ import annotations

from zephyr.engine.io.compression import split_compression
from zephyr.engine.io.format import Format
from zephyr.engine.io.hf import ARROW
from zephyr.engine.io.jsonl import JSONL
from zephyr.engine.io.parquet import PARQUET
from zephyr.engine.io.paths import PATHS
from zephyr.engine.io.vortex import VORTEX
from zephyr.errors import BadInputError

__all__ = [
    "FORMATS",
    "format_named",
    "infer_format",
    "resolve_format",
    "expected_names",
    "format_choices",
    "written_formats",
]

FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (JSONL, PARQUET, VORTEX, ARROW, PATHS)}
"""Every registered format, by name, in the order messages list them."""


def format_named(name: str) -> Format:
    """The registered format `name`; ValueError naming the registered ones otherwise."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ValueError(f"unknown format {name!r}: choose one of {', '.join(FORMATS)}")
    return fmt


def written_formats() -> list[str]:
    """The formats a pipeline can write (every registered one but those only read, such as "path")."""
    return [name for name, fmt in FORMATS.items() if fmt.write is not None]


def expected_names() -> str:
    """The file names formats are read from, for messages ("… .jsonl/.json/.ndjson (optionally …), .parquet/.pq
    or .vortex/.vtx")."""
    names = [fmt.describe_names() for fmt in FORMATS.values() if fmt.suffixes]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def format_choices() -> str:
    """The formats told by file names, as a message offers them: 'jsonl'|'parquet'|'vortex'."""
    return "|".join(f"'{name}'" for name, fmt in FORMATS.items() if fmt.suffixes)


def infer_format(path: str) -> str:
    """The format named by `path`'s extension: "jsonl", "parquet", "vortex" or "arrow".

    `.jsonl`, `.json` and `.ndjson` (optionally followed by `.gz`, `.zst`, `.bz2` or `.xz`) are
    JSON Lines; `.parquet` / `.pq` are Parquet; `.vortex` / `.vtx` are Vortex; `.arrow` is Arrow IPC
    (Hugging Face `save_to_disk` data files; `zephyr.engine.io.hf`).
    """
    stem, codec = split_compression(path)
    for fmt in FORMATS.values():
        if stem.endswith(fmt.suffixes) and (codec is None or fmt.compressible):
            return fmt.name
    uncompressed = [name for name, fmt in FORMATS.items() if fmt.suffixes and not fmt.compressible]
    listed = ", ".join(uncompressed[:-1]) + f" and {uncompressed[-1]}" if len(uncompressed) > 1 else uncompressed[0]
    raise BadInputError(
        f"cannot tell the format of {path!r} from its name: expected a name ending in {expected_names()} "
        f"({listed} compress internally). Rename the file or pass format={format_choices()}"
    )


def resolve_format(path: str, format: str | None) -> Format:
    """The format `format` names, or (None) the one `path`'s name tells."""
    if format is None:
        return FORMATS[infer_format(path)]
    if format not in FORMATS:
        raise ValueError(f"format must be one of {tuple(FORMATS)} or None (infer from the name), got {format!r}")
    return FORMATS[format]
