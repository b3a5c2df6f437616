"""drop_removed: drops what operators marked, keeps one lineage row per removed document, idempotent on rerun."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as pads

from zephyr import Dataset, execution
from zephyr.operators import dedup_documents
from zephyr.operators.lineage import LINEAGE_SCHEMA, drop_removed


def _docs() -> list[dict]:
    docs = [
        {"id": f"d{i:03d}", "text": f"document number {i % 7} body", "split": "a" if i % 2 else "b"} for i in range(40)
    ]
    docs[5]["filter_reason"] = "too_short"  # an earlier operator's reason is kept
    return docs


def test_drop_removed_writes_lineage_with_keepers(tmp_path: Path) -> None:
    side = tmp_path / "step" / "_removed"
    with execution(backend="local", scratch=str(tmp_path / "scratch"), summary=False, progress=False):
        marked = dedup_documents(Dataset.from_list(_docs(), num_shards=3), num_shards=2)
        result = drop_removed(marked, str(side), flush_rows=4).execute()
        kept = result.outputs
        first_files = sorted(p.name for p in side.iterdir())
        drop_removed(marked, str(side), flush_rows=4).execute()  # a rerun rewrites the same files
    assert sorted(p.name for p in side.iterdir()) == first_files and len(first_files) > 2  # flushed in pieces
    rows = pads.dataset(str(side), format="parquet").to_table()
    assert rows.schema == LINEAGE_SCHEMA
    rows = rows.to_pylist()
    assert sorted(d["id"] for d in kept) == [f"d{i:03d}" for i in range(7) if i != 5]  # first copy of each text
    assert len(rows) == 40 - 6 and {r["id"] for r in rows}.isdisjoint(d["id"] for d in kept)
    by_id = {r["id"]: r for r in rows}
    assert by_id["d012"] == {
        "id": "d012",
        "reason": "exact_duplicate",
        "keeper": "d005",
        "cluster": by_id["d012"]["cluster"],
        "source": None,
        "split": "b",
        "chars": len("document number 5 body"),
    }
    assert by_id["d005"]["reason"] == "too_short" and by_id["d005"]["keeper"] is None  # kept copy, but filtered
    assert result.counters["filter/exact_duplicate"] == 33 and result.counters["filter/too_short"] == 1
