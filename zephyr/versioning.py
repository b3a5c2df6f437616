"""Code+config fingerprints and the one done-marker type every resume in Zephyr uses.

Why one module: executor checkpoints, recipe steps, fuzzy dedup stages, ablation runs and token
stores all answer the same question, "was this exact work (same code, same config, same inputs)
finished before?". Each used to answer it with its own hash and its own marker file, and they
disagreed (a step hashed functions one way, an ablation run another). Here:

- `describe(value)` is a stable, repr-able description of code and configuration: functions by
  their bytecode, constants, closures and defaults (never by object identity), dataclasses by
  their fields, containers element-wise. An object may define ``__fingerprint__()`` returning what
  should stand for it (e.g. an in-memory source whose records are digested elsewhere).
- `fingerprint(*parts)` hashes such descriptions (xxh3-128, hex).
- A done marker is one small JSON file, written atomically (whole or absent) after the work it
  certifies: ``{"format": MARKER_FORMAT, "kind": ..., "fingerprint": ..., "payload": {...}}``.
  `read_marker` treats a marker of another format or kind as absent, so a layout change makes the
  work rerun instead of half reusing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import xxhash

from zephyr.fs import atomic_write, open_url, url_to_fs

__all__ = [
    "MARKER_FORMAT",
    "DoneMarker",
    "describe",
    "fingerprint",
    "digest",
    "code_digest",
    "write_marker",
    "read_marker",
    "marker_exists",
    "remove_marker",
]

_log = logging.getLogger("zephyr.versioning")

MARKER_FORMAT = 1
"""Version of the marker layout; markers of another format read as absent (the work reruns)."""

_MAX_DEPTH = 6


@dataclass(frozen=True)
class DoneMarker:
    """A finished piece of work: what kind, which version (fingerprint), and what it reported."""

    kind: str
    fingerprint: str
    payload: dict[str, Any]
    written_at: float = 0.0
    format: int = MARKER_FORMAT


# ------------------------------------------------------------------------------------------ fingerprints
def fingerprint(*parts: Any) -> str:
    """The xxh3-128 hex digest of every part's description: equal for equal code and configuration."""
    return digest([describe(part) for part in parts])


def digest(described: Any) -> str:
    """The xxh3-128 hex digest of values that are already descriptions (`describe` output, plain data)."""
    return xxhash.xxh3_128_hexdigest(repr(described).encode())


def describe(value: Any, depth: int = 0) -> Any:
    """A stable description of `value` for fingerprints: code and content, never object identity."""
    if depth > _MAX_DEPTH:
        return "..."
    if value is None or isinstance(value, str | int | float | bool | bytes):
        return value
    if isinstance(value, tuple | list):
        return [describe(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):  # repr order follows the per-process string hash seed
        return ["set", sorted((describe(v, depth + 1) for v in value), key=repr)]
    if isinstance(value, dict):
        return {str(k): describe(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if hasattr(type(value), "__fingerprint__") and not isinstance(value, type):
        return describe(value.__fingerprint__(), depth)  # a type that says what identifies it
    if isinstance(value, functools.partial):
        return [
            "partial",
            describe(value.func, depth + 1),
            describe(value.args, depth + 1),
            describe(value.keywords, depth + 1),
        ]
    if inspect.isfunction(value) or inspect.ismethod(value):
        fn = value.__func__ if inspect.ismethod(value) else value
        closure = [describe(c.cell_contents, depth + 1) for c in (fn.__closure__ or ()) if _cell_ok(c)]
        bound = describe(value.__self__, depth + 1) if inspect.ismethod(value) else None
        return [
            fn.__module__,
            fn.__qualname__,
            code_digest(fn.__code__),
            closure,
            describe(fn.__defaults__, depth + 1),
            bound,
        ]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__module__, type(value).__qualname__] + [
            describe(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        ]
    if inspect.isbuiltin(value) or isinstance(value, type):
        return [getattr(value, "__module__", None), getattr(value, "__qualname__", repr(value))]
    if hasattr(value, "to_arrow") and hasattr(value, "evaluate"):  # a filter expression
        return ["expr", repr(value)]
    text = repr(value)
    if " at 0x" in text:  # identity-based repr: describe by type, callable code and instance settings
        call = type(value).__call__ if callable(value) else None
        return [
            type(value).__module__,
            type(value).__qualname__,
            code_digest(call.__code__) if hasattr(call, "__code__") else None,
            describe(_instance_state(value), depth + 1),
        ]
    return text


def _instance_state(value: Any) -> dict[str, Any]:
    """An object's own attributes (``__dict__`` and ``__slots__``): a plain callable class's settings.

    Without them two instances of one scorer class with different thresholds fingerprinted alike and
    the second resumed the first one's checkpoint.
    """
    state = dict(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        slots = getattr(cls, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in state and name not in ("__dict__", "__weakref__") and hasattr(value, name):
                state[name] = getattr(value, name)
    return state


def code_digest(code: Any) -> str:
    """Digest of a code object: bytecode, names, and constants (nested code objects recursively)."""
    parts = [code.co_code, code.co_names, code.co_varnames]
    for const in code.co_consts:
        parts.append(code_digest(const) if inspect.iscode(const) else repr(const))
    return xxhash.xxh3_64_hexdigest(repr(parts).encode())


def _cell_ok(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------------ done markers
def write_marker(url: str, kind: str, fingerprint: str, payload: dict[str, Any] | None = None) -> DoneMarker:
    """Certify finished work: write the marker at `url` atomically (readers see all of it or none).

    Write it last, after every output it certifies is complete; `payload` must be JSON-serialisable.
    """
    marker = DoneMarker(kind, fingerprint, dict(payload or {}), time.time())
    body = {
        "format": marker.format,
        "kind": kind,
        "fingerprint": fingerprint,
        "written_at": marker.written_at,
        "payload": marker.payload,
    }
    text = json.dumps(body, indent=1, sort_keys=True)
    with atomic_write(url, "wb", compression=None) as handle:
        handle.write(text.encode("utf-8"))
    return marker


def read_marker(url: str, kind: str, fingerprint: str | None = None) -> DoneMarker | None:
    """The marker at `url`, or None when there is none, or it is of another format or kind, or (when
    `fingerprint` is given) it certifies another version of the work.

    A file there that is not a JSON marker at all (an executor checkpoint pickled by an older Zephyr,
    say) also reads as None, with a warning naming it: the work it stood for is redone, never trusted.
    Markers are written atomically, so a cut one cannot occur.
    """
    try:
        with open_url(url, "rb", compression=None) as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(raw)
    except ValueError as exc:
        _log.warning("zephyr: %s is not a done marker (%s); redoing the work it stood for", url, exc)
        return None
    if not isinstance(body, dict) or body.get("format") != MARKER_FORMAT or body.get("kind") != kind:
        return None
    if fingerprint is not None and body.get("fingerprint") != fingerprint:
        return None
    return DoneMarker(
        kind, str(body["fingerprint"]), dict(body.get("payload") or {}), float(body.get("written_at", 0.0))
    )


def marker_exists(url: str) -> bool:
    """Whether any file exists at `url` (cheap check; `read_marker` tells whether it applies)."""
    fs, path = url_to_fs(url)
    return bool(fs.exists(path))


def remove_marker(url: str) -> None:
    """Delete the marker at `url` if present: the work it certified must be redone."""
    fs, path = url_to_fs(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path)
