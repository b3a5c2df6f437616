"""Removed-document lineage: what a step dropped, why, and (for duplicates) which document was kept.

Why: a filter that silently drops documents cannot be audited. Operators already record their
decision as fields (`filter_reason`, `dup_keep`, `dup_cluster`, `dup_keeper`); `drop_removed` is
the one place that turns those fields into a drop, and it keeps a small side output of every
document it drops, which `zephyr ui` ("Removed, and why") and run summaries read:

    <side_dir>/part-<hash>.parquet   one row per removed document:
        id        the removed document's id (str)
        reason    its `filter_reason` ("exact_duplicate", "fuzzy_duplicate", a quality rule, ...)
        keeper    the id of the document kept in its place (duplicates only, else null)
        cluster   its `dup_cluster` (exact dedup: the text hash; fuzzy dedup: the keeper id), else null
        source    its `source` field, split its `split` field (null when absent)
        chars     length of its text in characters

Cost, bounded and stated: the text is NOT copied (the UI reads it from the step's input files by
id); a row is the id plus a few short strings, about 100-200 bytes per removed document on disk
(parquet, dictionary-encoded reasons), written once per shard. Memory: at most `flush_rows` rows
per shard (default 65,536, a few MB) before a file is written. File names hash the ids they hold,
so a retried shard rewrites the same files instead of adding copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from zephyr import counters
from zephyr.engine.dataset import Dataset
from zephyr.fs import atomic_write, join

__all__ = ["LINEAGE_DIR", "LINEAGE_SCHEMA", "drop_removed", "removal_of"]

LINEAGE_DIR = "_removed"
"""Name of a step's side output of removed documents, inside the step's output directory."""

LINEAGE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("reason", pa.string()),
        ("keeper", pa.string()),
        ("cluster", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
        ("chars", pa.int64()),
    ]
)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def removal_of(doc: dict, *, id_field: str = "id", text_field: str = "text") -> dict | None:
    """The lineage row of `doc` if operators marked it for removal, else None.

    Marked: a non-empty `filter_reason`, or `dup_keep=False` (a duplicate without a reason reads as
    "duplicate"). The keeper is `dup_keeper` (exact dedup) or, for fuzzy dedup, `dup_cluster`, which
    there is the kept document's id.
    """
    reason = doc.get("filter_reason")
    duplicate = doc.get("dup_keep") is False
    if not reason and not duplicate:
        return None
    keeper = doc.get("dup_keeper")
    if keeper is None and duplicate and reason == "fuzzy_duplicate":
        keeper = doc.get("dup_cluster")
    text = doc.get(text_field)
    return {
        "id": _str(doc.get(id_field)),
        "reason": str(reason or "duplicate"),
        "keeper": _str(keeper) if duplicate else None,
        "cluster": _str(doc.get("dup_cluster")) if duplicate else None,
        "source": _str(doc.get("source")),
        "split": _str(doc.get("split")),
        "chars": len(text) if isinstance(text, str) else None,
    }


@dataclass(frozen=True)
class _DropRemoved:
    side_dir: str
    id_field: str
    text_field: str
    flush_rows: int

    def __call__(self, docs: Iterable[dict]) -> Iterator[dict]:
        rows: list[dict] = []
        for doc in docs:
            row = removal_of(doc, id_field=self.id_field, text_field=self.text_field)
            if row is None:
                yield doc
                continue
            counters.increment(f"filter/{row['reason']}")
            rows.append(row)
            if len(rows) >= self.flush_rows:
                self._flush(rows)
                rows = []
        if rows:
            self._flush(rows)

    def _flush(self, rows: list[dict]) -> None:
        digest = xxhash.xxh3_64()
        for row in rows:
            digest.update((row["id"] or "").encode("utf-8", "surrogatepass") + b"\0")
        table = pa.Table.from_pylist(rows, schema=LINEAGE_SCHEMA)
        with atomic_write(join(self.side_dir, f"part-{digest.hexdigest()}.parquet"), "wb", compression=None) as out:
            pq.write_table(table, out, use_dictionary=["reason", "source", "split"])


def drop_removed(
    ds: Dataset,
    side_dir: str,
    *,
    id_field: str = "id",
    text_field: str = "text",
    flush_rows: int = 65_536,
) -> Dataset:
    """Drop documents operators marked for removal, writing their lineage rows under `side_dir`.

    Equivalent to `ds.filter(zephyr.operators.keep)` plus dropping `dup_keep=False`, and counted the
    same way (`filter/<reason>`), but nothing removed is lost from view: see the module docstring
    for the side output's layout and cost. Runs as a `map_shard` fused into the preceding stage.
    """
    if flush_rows < 1:
        raise ValueError(f"drop_removed: flush_rows must be >= 1, got {flush_rows}")
    return ds.map_shard(_DropRemoved(side_dir, id_field, text_field, flush_rows))
