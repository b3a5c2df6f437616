"""Staged work: a piece of work done once per version, certified by the one done marker of `zephyr.versioning`.

Every resume in Zephyr asks "was this exact work finished before?" and answers it here, so there is one
scheme to learn and to trust: the engine's shard checkpoints and reduce plans, recipe steps
(`zephyr.steps.StepRunner`), fuzzy dedup's stages and connected-components rounds, and token-store shards
(`shard.json`). A `StagedWork` names the marker's place, the kind of work and its version (a fingerprint of
the code, configuration and inputs); the work is done when a marker of that kind and version is there,
and the marker is written last, after every output it certifies.

    stage = StagedWork(join(out, "_DONE.json"), "fuzzy-dedup-stage", version)
    payload = stage.run(lambda: {"paths": write_it(out)}, clear_first=out)  # built once; a rerun reads the payload
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zephyr.fs import url_to_fs
from zephyr.versioning import DoneMarker, read_marker, remove_marker, write_marker

__all__ = ["StagedWork", "clear"]


@dataclass(frozen=True)
class StagedWork:
    """One resumable piece of work: done when `marker` holds a done marker of `kind` and `version`."""

    marker: str  # URL of its done marker
    kind: str  # what sort of work: a marker of another kind at that URL does not count
    version: str  # fingerprint of the work (code, configuration, inputs): another version does not count

    def done(self) -> DoneMarker | None:
        """The marker certifying this version of the work, or None (absent, of another kind or version)."""
        return read_marker(self.marker, self.kind, self.version)

    def certify(self, payload: dict[str, Any] | None = None) -> DoneMarker:
        """Mark the work done, with what it reported: call it last, once every output it certifies is complete."""
        return write_marker(self.marker, self.kind, self.version, payload)

    def forget(self) -> None:
        """Remove the marker: the work counts as not done until it is certified again."""
        remove_marker(self.marker)

    def run(self, build: Callable[[], dict[str, Any]], *, clear_first: str | None = None) -> dict[str, Any]:
        """The payload of this version's finished run, or else `build()`'s, certified. `clear_first`: a folder
        holding only this work's outputs, emptied before building, so what a killed attempt left there never
        mixes into the new run."""
        marker = self.done()
        if marker is None:
            if clear_first is not None:
                clear(clear_first)
            marker = self.certify(build())
        return marker.payload


def clear(url: str) -> None:
    """Remove the file or folder at `url` if it exists."""
    fs, path = url_to_fs(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)
