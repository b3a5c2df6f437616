"""Code+config fingerprints and the one done-marker type every resume in Zephyr uses.

Why one module: executor checkpoints, recipe steps, fuzzy dedup stages, ablation runs and token
stores all answer the same question, "was this exact work (same code, same config, same inputs)
finished before?". Each used to answer it with its own hash and its own marker file, and they
disagreed (a step hashed functions one way, an ablation run another). Here:

- `describe(value)` is a stable, repr-able description of what code would compute: never object
  identity, and everything a function reads (see `describe`). An object may define
  ``__fingerprint__()`` returning what should stand for it (e.g. an in-memory source whose records
  are digested elsewhere). What cannot be described (an open file, a live client) is an
  `Undescribable` in the description: `undescribable(description)` lists why, and whoever reuses work
  by that description must not (the executor reruns the stage, a step reruns, `fingerprint` is unique).
- `fingerprint(*parts)` hashes such descriptions (xxh3-128, hex).
- A done marker is one small JSON file, written atomically (whole or absent) after the work it
  certifies: ``{"format": MARKER_FORMAT, "kind": ..., "fingerprint": ..., "payload": {...}}``.
  `read_marker` treats a marker of another format or kind as absent, so a layout change makes the
  work rerun instead of half reusing it.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import functools
import inspect
import json
import logging
import os
import sys
import sysconfig
import time
import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import xxhash

from zephyr.fs import atomic_write, open_url, url_to_fs

__all__ = [
    "MARKER_FORMAT",
    "DoneMarker",
    "Undescribable",
    "describe",
    "undescribable",
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


@dataclass(frozen=True)
class DoneMarker:
    """A finished piece of work: what kind, which version (fingerprint), and what it reported."""

    kind: str
    fingerprint: str
    payload: dict[str, Any]
    written_at: float = 0.0
    format: int = MARKER_FORMAT


# ------------------------------------------------------------------------------------------ fingerprints
@dataclass(frozen=True)
class Undescribable:
    """Part of a description standing for what could not be described: `what`, and where it was read."""

    what: str

    def __repr__(self) -> str:
        return f"<undescribable: {self.what}>"


_RUN_NONCE = uuid.uuid4().hex  # makes `fingerprint` of something undescribable unique to this process


def fingerprint(*parts: Any) -> str:
    """The xxh3-128 hex digest of every part's description: equal for equal code and configuration.

    When a part cannot be described (`undescribable`), the digest is unique to this process, so no work
    is ever reused by it (and a warning says why): never equal by accident."""
    described = [describe(part) for part in parts]
    reasons = undescribable(described)
    if reasons:
        _log.warning("zephyr: not reusing earlier work: %s", reasons[0])
        described.append(_RUN_NONCE)
    return digest(described)


def digest(described: Any) -> str:
    """The xxh3-128 hex digest of values that are already descriptions (`describe` output, plain data).
    Callers that reuse work by it check `undescribable(described)` first."""
    return xxhash.xxh3_128_hexdigest(repr(described).encode())


def undescribable(described: Any) -> list[str]:
    """Why a description (`describe` output) cannot stand for the work: each `Undescribable` in it."""
    found: list[str] = []
    stack = [described]
    while stack:
        item = stack.pop()
        if isinstance(item, Undescribable):
            found.append(item.what)
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def describe(value: Any, where: str = "") -> Any:
    """A stable description of `value` for fingerprints: what the code computes, never object identity.

    - Plain data by value (containers element by element; dicts and sets in a stable order; a long
      str or bytes, and a large container of plain values, by a digest of its repr).
    - A function by its bytecode, defaults, keyword defaults, closure cells and, recursively, the
      module globals its code names: constants, containers, and the functions, classes and user
      modules (the attributes it reads of them) of the same script or project. A bound method adds
      its instance; `functools.partial` its arguments; a class its methods and attributes.
    - Installed code (the standard library, site-packages, Zephyr itself) by its distribution's name
      and version, not recursively: a module, a library function or class. Instances of library
      classes are still described by their state, since they carry configuration.
    - Any other object by what pickling it would save (`__reduce_ex__`: its class and state), or, for
      what cannot be pickled (an open file, a socket, a lock, a generator, a live client), by an
      `Undescribable` saying what and where.

    Cost, measured (CPU time, Python 3.11, 2 busy cores): a stage function of a script naming 10
    globals (a helper function, a class with three methods, constants, a 1,000-entry table) 0.4 ms,
    where describing its bytecode alone took 0.005 ms; `plan()` of a map -> group_by over it 0.8 ms
    (0.15 ms before); a dataclass holding a 1M-entry dict of tuples 0.7 s (1.3 s before: large plain
    containers are digested, not described item by item); a list of 100k small dicts 0.5 s. Bounded:
    at most `_MAX_OBJECTS` functions, classes and objects and `_MAX_CONTAINERS` containers per call,
    `_MAX_DEPTH` levels deep; beyond, the description is undescribable, so the work reruns rather than
    risk a false reuse. `where` names what is described, for the messages of what cannot be.
    """
    return _Describer().describe(value, where)


_PLAIN = (str, int, float, bool, bytes, type(None))
_MAX_OBJECTS = 10_000  # functions, classes and other objects one description may visit (containers: any)
_MAX_CONTAINERS = 200_000  # lists, dicts... (a large one of plain values counts once: it is digested)
_MAX_DEPTH = 100
_INLINE_CHARS = 2048  # str/bytes longer than this are described by a digest
_INLINE_ITEMS = 256  # plain containers larger than this are described by a digest of their repr
# what a class's own namespace holds that is no part of what it computes: documentation, and caches that
# pickling, abc and typing add to it as it is used (`__slotnames__` appears once an instance is pickled)
_CLASS_NOISE = frozenset(
    {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__", "__slots__"}
    | {"__dataclass_fields__", "__dataclass_params__", "__match_args__", "__firstlineno__", "__static_attributes__"}
    | {"__slotnames__", "_abc_impl", "__abstractmethods__", "__parameters__", "__orig_bases__"}
    | {"__protocol_attrs__", "_is_protocol", "__non_callable_proto_members__", "__callable_proto_members_only__"}
)


class _Describer:
    """One `describe` call: the objects (functions, classes, instances) seen so far, so that cycles end
    and an object reached twice is described once (then named by where it was first met), and how many.
    `where` says what is being described, for an `Undescribable`'s message."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self.keep: list[Any] = []  # seen objects stay alive, so their ids are not reused during the call
        self.active: set[int] = set()  # containers being described (a container holding itself)
        self.objects = 0
        self.containers = 0

    def describe(self, value: Any, where: str, depth: int = 0) -> Any:
        kind = type(value)
        if kind in _PLAIN:
            if kind in (str, bytes) and len(value) > _INLINE_CHARS:
                data = value.encode("utf-8", "surrogatepass") if kind is str else value  # xxhash hashes bytes only
                return [kind.__name__, len(value), xxhash.xxh3_128_hexdigest(data)]
            return value
        if depth > _MAX_DEPTH:
            return Undescribable(f"{where or 'a value'}: nested deeper than {_MAX_DEPTH} levels")
        if kind in (tuple, list, dict, set, frozenset):
            if id(value) in self.active:
                return ["cycle"]
            self.containers += 1
            if self.containers > _MAX_CONTAINERS:
                return Undescribable(f"{where or 'a value'}: holds more than {_MAX_CONTAINERS} containers")
            self.active.add(id(value))
            try:
                return self._container(value, where, depth + 1)
            finally:
                self.active.discard(id(value))
        first = self.seen.get(id(value))
        if first is not None:
            return ["seen", first]
        self.seen[id(value)] = where or "."
        self.keep.append(value)
        self.objects += 1
        if self.objects > _MAX_OBJECTS:
            return Undescribable(f"{where or 'a value'}: reaches more than {_MAX_OBJECTS} objects")
        return self._describe(value, where, depth + 1)

    def _container(self, value: Any, where: str, depth: int) -> Any:
        d = functools.partial(self.describe, where=where, depth=depth)
        unordered = isinstance(value, set | frozenset | dict)
        if (
            len(value) > _INLINE_ITEMS
            and _plain_items(value)
            and (not isinstance(value, dict) or _plain_items(value.values()))
        ):
            return ["items", type(value).__name__, len(value), _plain_digest(value, unordered)]
        if isinstance(value, tuple | list):
            return [d(v) for v in value]
        if isinstance(value, set | frozenset):  # repr order follows the per-process string hash seed
            return ["set", sorted(map(d, value), key=repr)]
        try:
            items = sorted(value.items(), key=lambda kv: kv[0])  # fast for keys of one type
        except TypeError:
            items = sorted(value.items(), key=lambda kv: repr(kv[0]))
        return {_key_text(k): d(v) for k, v in items}

    def _describe(self, value: Any, where: str, depth: int) -> Any:
        d = functools.partial(self.describe, depth=depth)
        if hasattr(type(value), "__fingerprint__") and not isinstance(value, type):
            return d(value.__fingerprint__(), where)  # a type that says what identifies it
        if isinstance(value, functools.partial | functools.partialmethod):
            return ["partial", d(value.func, where), d(value.args, where), d(value.keywords, where)]
        if isinstance(value, property):  # members of a class: what they compute
            return ["property", d(value.fget, where), d(value.fset, where), d(value.fdel, where)]
        if isinstance(value, functools.cached_property):
            return ["cached_property", d(value.func, where)]
        if inspect.ismethod(value):
            return ["method", d(value.__func__, where), d(value.__self__, f"{where}.__self__")]
        if inspect.isfunction(value):
            return self._function(value, where, depth)
        if isinstance(value, type):
            return self._class(value, where, depth)
        if isinstance(value, ModuleType):
            return ["module", value.__name__, _installed(value.__name__)]
        if inspect.isbuiltin(value) or inspect.ismethoddescriptor(value) or inspect.ismethodwrapper(value):
            owner = getattr(value, "__self__", None)  # a bound builtin (a dict's .get) reads its owner
            bound = None if owner is None or isinstance(owner, ModuleType | type) else d(owner, f"{where}.__self__")
            name = getattr(value, "__qualname__", None) or getattr(value, "__name__", repr(value))
            return ["builtin", getattr(value, "__module__", None), name, bound]
        if dataclasses.is_dataclass(value):
            return [d(type(value), where), *(d(getattr(value, f.name), where) for f in dataclasses.fields(value))]
        if hasattr(value, "to_arrow") and hasattr(value, "evaluate"):  # a filter expression
            return ["expr", repr(value)]
        wrapped = getattr(value, "__wrapped__", None)
        if wrapped is not None and callable(value):  # functools.lru_cache and other wrappers
            return ["wrapped", d(type(value), where), d(wrapped, where)]
        if type(value).__module__ == "numpy" and hasattr(value, "tobytes"):
            shape = list(getattr(value, "shape", ()))
            return ["ndarray", str(getattr(value, "dtype", "")), shape, xxhash.xxh3_128_hexdigest(value.tobytes())]
        return self._by_reduction(value, where, depth)

    def _function(self, fn: Any, where: str, depth: int) -> Any:
        d = functools.partial(self.describe, depth=depth)
        name = f"{where} > {fn.__qualname__}" if where else fn.__qualname__
        closure = [d(c.cell_contents, f"{name} closure") for c in (fn.__closure__ or ()) if _cell_ok(c)]
        data = [closure, d(fn.__defaults__, f"{name} defaults"), d(fn.__kwdefaults__, f"{name} defaults")]
        installed = _installed(fn.__module__)
        if installed is not None:  # library code: by name and version; what it was given still counts
            return [fn.__module__, fn.__qualname__, installed, *data]
        reads = {key: d(value, f"{name} global {key}") for key, value in _globals_read(fn).items()}
        return ["code", fn.__qualname__, code_digest(fn.__code__), *data, reads]

    def _class(self, cls: type, where: str, depth: int) -> Any:
        installed = _installed(cls.__module__)
        if installed is not None or cls.__module__ == "builtins":
            return ["class", cls.__module__, cls.__qualname__, installed]
        d = functools.partial(self.describe, depth=depth)
        bases = [d(base, where) for base in cls.__bases__ if base is not object]
        members = {
            key: d(getattr(member, "__func__", member), where)
            for key, member in sorted(vars(cls).items())
            if key not in _CLASS_NOISE and not (key == "__hash__" and member is None)
        }
        return ["class", cls.__qualname__, bases, members]

    def _by_reduction(self, value: Any, where: str, depth: int) -> Any:
        """An object by what pickling would save of it: its class, constructor arguments and state."""
        d = functools.partial(self.describe, depth=depth)
        try:
            reducer = copyreg.dispatch_table.get(type(value))  # how pickle reduces it (re.Pattern: here)
            reduced = reducer(value) if reducer is not None else value.__reduce_ex__(4)
        except Exception as error:  # noqa: BLE001 - whatever pickling refuses cannot be described either
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            return Undescribable(
                f"{where or 'value'} is a {type(value).__module__}.{type(value).__qualname__} ({first})"
            )
        if isinstance(reduced, str):  # pickled by reference: a module-level singleton
            return ["global", type(value).__module__, reduced, _installed(type(value).__module__)]
        parts = list(reduced) + [None] * (5 - len(reduced))
        _, args, state, items, entries = parts[:5]
        return [
            "object",
            d(type(value), where),
            d(args, where),
            d(state, where),
            None if items is None else d(list(items), where),
            None if entries is None else d(dict(entries), where),
        ]


def _plain_items(items: Any) -> bool:
    """Whether every item is a plain value or a tuple of plain values (described together, by repr)."""
    for item in items:
        kind = type(item)
        if kind in _PLAIN:
            continue
        if kind is tuple and all(type(v) in _PLAIN for v in item):
            continue
        return False
    return True


def _plain_digest(value: Any, unordered: bool) -> str:
    """A digest of a large container of plain values: of its repr, or (a dict or set, whose order must not
    count) of its items' sorted 64-bit digests: ~0.5 s for a million entries, where sorting the items
    themselves took several times that."""
    if not unordered:
        return xxhash.xxh3_128_hexdigest(repr(value).encode())
    items = value.items() if isinstance(value, dict) else value
    digests = (xxhash.xxh3_64_intdigest(repr(item).encode("utf-8", "surrogatepass")) for item in items)
    hashes = np.fromiter(digests, np.uint64, len(value))
    hashes.sort()
    return xxhash.xxh3_128_hexdigest(hashes.tobytes())


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else repr(key)


@functools.lru_cache(maxsize=4096)
def _code_names(code: Any) -> frozenset[str]:
    """The names a code object and the code nested in it (lambdas, comprehensions) look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return frozenset(names)


def _globals_read(fn: Any) -> dict[str, Any]:
    """The module globals `fn`'s code names (over-approximated by name: an attribute `self.x` also
    names a global `x`), and of a user module it names, the attributes the code names."""
    names = _code_names(fn.__code__)
    namespace = fn.__globals__
    found: dict[str, Any] = {}
    for name in sorted(names):
        if name not in namespace or name.startswith("__") and name.endswith("__"):
            continue
        value = namespace[name]
        if isinstance(value, ModuleType) and _installed(value.__name__) is None:
            found[name] = ["module", value.__name__]
            attributes = vars(value)
            found.update({f"{name}.{attr}": attributes[attr] for attr in sorted(names) if attr in attributes})
        else:
            found[name] = value
    return found


@functools.lru_cache(maxsize=1)
def _install_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    with contextlib.suppress(Exception):
        import site

        dirs.update(site.getsitepackages())
    return tuple(os.path.realpath(p) + os.sep for p in dirs)


@functools.lru_cache(maxsize=1024)
def _installed(module_name: str | None) -> str | None:
    """'name==version' of the distribution that installed `module_name` (the standard library counts as
    Python's; Zephyr as itself, even from a checkout), or None for user code: a script, a module of a
    project beside it."""
    if not module_name:
        return None
    top = module_name.partition(".")[0]
    if top == "zephyr":
        return f"zephyr=={_version_of('zephyr')}"
    if top in sys.stdlib_module_names or top == "builtins" or top in sys.builtin_module_names:
        return f"python=={sys.version.split()[0]}"
    module = sys.modules.get(module_name) or sys.modules.get(top)
    path = getattr(module, "__file__", None)
    if not path or not os.path.realpath(path).startswith(_install_dirs()):
        return None
    return f"{top}=={_version_of(top)}"


def _version_of(top: str) -> str:
    from importlib import metadata

    with contextlib.suppress(Exception):
        return metadata.version(top)
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return version
    with contextlib.suppress(Exception):
        return metadata.version(metadata.packages_distributions()[top][0])
    return "unknown"


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
