"""Outputs a dry run would write but does not: later pipelines that read them are still planned.

A dry run of a chain of steps (`zephyr.steps.StepRunner`, `zephyr run --dry-run`) writes nothing, so
the second step's input (the first step's output folder) does not exist when the second step is
planned. The step runner declares such folders here, each with the step that would produce it; the
planner (`plan._lower_source`) then plans a source whose pattern lies under one of them as a *pending*
input: no shards listed, its shard count unknown until the producer runs, and its plan printed
naming the producer. Only a dry run declares them (the step runner's planning) and only a dry run's
planner consults them (`ExecutionConfig.dry_run`), so a real run never plans against something that is
not there; code outside the engine that lists inputs itself (`tokenize_dataset`) asks `pending_producer`
the same way, without a dry-run flag of its own.

    with declare_pending({"out/extract-1a2b": "step 'extract'"}):
        Dataset.from_files("out/extract-1a2b/docs/*.jsonl.zst").map(f).write_jsonl(...).execute()
        # plan: stage 0 [? shards] read(...) ... reads the output of step 'extract' (not written yet ...)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

from zephyr.fs import url_to_fs

__all__ = ["declare_pending", "pending_producer"]

# (normalized folder, producer) pairs declared by the enclosing dry runs, innermost last
_DECLARED: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("zephyr_pending_outputs", default=())


@contextlib.contextmanager
def declare_pending(outputs: Mapping[str, str]) -> Iterator[None]:
    """While inside, a dry run plans any source under one of `outputs` (folder URL -> who writes it,
    e.g. "step 'extract'") as the pending output of that producer."""
    token = _DECLARED.set(_DECLARED.get() + tuple((_normalized(url), who) for url, who in outputs.items()))
    try:
        yield
    finally:
        _DECLARED.reset(token)


def pending_producer(pattern: str) -> str | None:
    """Who would write what `pattern` (a file, folder or glob) reads, when it lies under a declared
    pending output; None otherwise."""
    declared = _DECLARED.get()
    if not declared:
        return None
    key = _normalized(pattern)
    for folder, who in reversed(declared):
        if key == folder or key.startswith(folder + "/"):
            return who
    return None


def _normalized(url: str) -> str:
    """`url` as protocol + absolute path, so that a relative local path and its absolute form match."""
    fs, path = url_to_fs(os.fspath(url))
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        return "file://" + os.path.abspath(path).rstrip("/")
    return f"{protocols[0]}://{path.rstrip('/')}"
