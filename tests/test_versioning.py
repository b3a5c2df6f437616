"""The one fingerprint and done-marker scheme (zephyr.versioning) every resume uses."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from zephyr.versioning import MARKER_FORMAT, describe, fingerprint, read_marker, write_marker


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


class Scorer:
    """A plain callable class (not a dataclass) with its own setting."""

    def __init__(self, threshold):
        self.threshold = threshold

    def __call__(self, record):
        return record["score"] > self.threshold


class SlottedScorer:
    __slots__ = ("threshold",)

    def __init__(self, threshold):
        self.threshold = threshold

    def __call__(self, record):
        return record["score"] > self.threshold


def test_long_strings_and_bytes_are_described_by_a_digest_of_their_content():
    """A str past the inline length used to raise (xxhash hashes bytes only): a step config holding a long
    text could not be versioned."""
    text = "é" * 3000
    assert describe(text) == describe("é" * 3000) != describe("é" * 2999 + "e")
    assert describe(text)[:2] == ["str", 3000] and describe(text.encode())[:2] == ["bytes", 6000]
    assert fingerprint(text) != fingerprint(text.encode())


def test_plain_callable_objects_are_fingerprinted_by_their_settings():
    # Two instances of one class with different settings used to share a fingerprint (by type and
    # __call__ code only), so a rerun with another threshold resumed the old checkpoint.
    assert fingerprint(Scorer(0.5)) == fingerprint(Scorer(0.5))
    assert fingerprint(Scorer(0.5)) != fingerprint(Scorer(0.9))
    assert fingerprint(SlottedScorer(0.5)) != fingerprint(SlottedScorer(0.9))


def test_sets_fingerprint_alike_in_every_process():
    # A set's repr follows the per-process string hash seed, so a stopword set gave another
    # fingerprint in every run and checkpoints were never reused.
    code = "from zephyr.versioning import fingerprint; print(fingerprint({'the', 'a', 'of', 'and', 'to', 'in'}))"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(seen) == 1 and next(iter(seen)).strip()


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


def test_markers_of_another_format_read_as_absent_and_junk_is_named(tmp_path: Path, caplog):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"paths": [], "counters": {}}))  # a marker from before the shared scheme
    assert read_marker(str(old), "fuzzy-dedup-stage") is None
    pickled = tmp_path / "shard-00000.done"
    pickled.write_bytes(pickle.dumps({"shard": 0, "paths": ["x"]}))  # an older executor checkpoint
    with caplog.at_level(logging.WARNING, logger="zephyr.versioning"):
        assert read_marker(str(pickled), "engine-shard") is None  # redone, never trusted
    assert "shard-00000.done is not a done marker" in caplog.text


def test_markers_on_memory_filesystem():
    url = "memory://versioning-test/run/_STEP.json"
    write_marker(url, "unit", "f1", {"ok": True})
    assert read_marker(url, "unit", "f1").payload == {"ok": True}
