"""The embedded Nemotron-CC sample generator at any size it accepts."""

from __future__ import annotations

import json

import orjson
import pytest
import zstandard


def _docs(root, split):
    lines = []
    for path in sorted((root / split).glob("*.jsonl.zst")):
        lines += zstandard.ZstdDecompressor().decompress(path.read_bytes(), max_output_size=1 << 30).splitlines()
    return [orjson.loads(line) for line in lines]


def test_sample_beyond_the_distinct_passages_builds_every_split(load_recipe, tmp_path):
    """1000 docs per split used to raise ZeroDivisionError (the medium_low pool slice was empty at 688 or more
    on the machine of the issue)."""
    sample = load_recipe("nemotron_sample")
    root = sample.build_sample(tmp_path / "s", docs_per_split=1000, files_per_split=1)
    planted = json.loads((root / "planted.json").read_text())
    assert planted["reused_passages"] > 0
    for kind in ("exact", "near"):
        assert len(planted[kind]) == int(0.05 * 1000 * 7)
    total = sum(len(_docs(root, split)) for split in sample.SPLITS)
    assert total == 1000 * 7 + len(planted["exact"]) + len(planted["near"])
    assert all(len(_docs(root, split)) >= 1000 for split in sample.SPLITS)


@pytest.mark.parametrize("bad", [0, -3])
def test_sample_refuses_a_size_it_cannot_make(load_recipe, tmp_path, bad):
    sample = load_recipe("nemotron_sample")
    with pytest.raises(ValueError, match="docs_per_split must be a positive integer"):
        sample.build_sample(tmp_path / "s", docs_per_split=bad)
