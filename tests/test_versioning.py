"""The one fingerprint and done-marker scheme (zephyr.versioning) every resume uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from zephyr.versioning import MARKER_FORMAT, MarkerError, describe, fingerprint, read_marker, write_marker


def _scaler(factor):
    def scale(x):
        return x * factor

    return scale


@dataclass(frozen=True)
class Settings:
    threshold: float
    name: str = "a"


class Big:
    def __init__(self, items):
        self.items = items

    def __fingerprint__(self):
        return ["Big", len(self.items)]


def test_fingerprint_follows_code_and_config_not_identity():
    assert fingerprint(_scaler(2), Settings(0.5)) == fingerprint(_scaler(2), Settings(0.5))  # new objects, same fp
    assert fingerprint(_scaler(2)) != fingerprint(_scaler(3))  # closure value
    assert fingerprint(Settings(0.5)) != fingerprint(Settings(0.6))
    assert fingerprint({"b": 1, "a": 2}) == fingerprint({"a": 2, "b": 1})
    assert fingerprint(lambda x: x + 1) != fingerprint(lambda x: x + 2)  # bytecode constants
    assert describe(Big(range(10**6))) == ["Big", 10**6]  # objects choose what stands for them


def test_marker_round_trip_and_mismatches(tmp_path: Path):
    url = str(tmp_path / "deep" / "_DONE.json")
    assert read_marker(url, "unit") is None
    written = write_marker(url, "unit", "abc", {"paths": ["x"], "n": 3})
    body = json.loads(Path(url).read_text())
    assert body["format"] == MARKER_FORMAT and body["kind"] == "unit" and body["payload"] == {"paths": ["x"], "n": 3}
    got = read_marker(url, "unit", "abc")
    assert got is not None and got.payload == written.payload and got.fingerprint == "abc"
    assert read_marker(url, "unit", "other") is None  # another version of the work
    assert read_marker(url, "other-kind") is None
    assert [p.name for p in Path(url).parent.iterdir()] == ["_DONE.json"]  # no temporary left beside it


def test_markers_of_another_format_read_as_absent_and_junk_is_named(tmp_path: Path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"paths": [], "counters": {}}))  # a marker from before the shared scheme
    assert read_marker(str(old), "fuzzy-dedup-stage") is None
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(MarkerError, match=r"junk\.json is not JSON.*kind 'unit'"):
        read_marker(str(junk), "unit")


def test_markers_on_memory_filesystem():
    url = "memory://versioning-test/run/_STEP.json"
    write_marker(url, "unit", "f1", {"ok": True})
    assert read_marker(url, "unit", "f1").payload == {"ok": True}
