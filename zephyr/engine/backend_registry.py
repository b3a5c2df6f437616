"""The backend registry: every backend shards can run on, by name, with its own options.

The names used to be spelled in six places (the config check, the CLI's choices, Datashop's CLI and
config, two recipes) and `make_backend` switched on them three times. Each backend is now one module
holding a class that implements the `Backend` protocol (`zephyr.engine.backends.api`), and one entry
here: its name, where its class lives (imported only when a run uses it, so Ray is not imported by a
run on processes), its options dataclass, and whether it runs shards in the driver's own process.
Everything else asks this table: `ExecutionConfig` checks the name, the CLIs offer `backend_names()`,
`make_backend` builds the one asked for.

A backend's options (`RayOptions` for Ray) live in `ExecutionConfig.backend_options`, read with
`config.options(RayOptions)`. They are defined here rather than in the backend's module when that
module imports a heavy optional package (Ray), so a config can be built and checked without it.
Their older keyword spellings (`execution(ray_address=...)`, `--address`) map onto their fields through
`KEYWORDS`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "BackendSpec",
    "RayOptions",
    "BACKENDS",
    "backend_names",
    "backend_spec",
    "options_keywords",
    "with_keywords",
]


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend joins a cluster and runs shards.

    address: the cluster ("auto", "ray://host:10001", "host:6379"); None starts a local Ray.
    dashboard: a local Ray serves its dashboard on http://127.0.0.1:8265.
    pool_idle_s: seconds the actor pool stays up after a run for the next run to reuse; 0 (the default)
        gives its CPUs back to the cluster the moment the run ends, as a job sharing a cluster must.
    mode: "actors" (a warm pool, each stage's functions loaded once per worker) or "tasks" (one plain Ray
        task per shard: nothing held between shards, more start-up per shard).
    """

    address: str | None = None
    dashboard: bool = False
    pool_idle_s: float = 0.0
    mode: str = "actors"

    # the keyword spellings `execution(...)`, `ExecutionConfig(...)` and the CLI (engine_overrides) use
    KEYWORDS: ClassVar[Mapping[str, str]] = {
        "ray_address": "address",
        "ray_dashboard": "dashboard",
        "ray_pool_idle_s": "pool_idle_s",
        "ray_mode": "mode",
    }

    def __post_init__(self) -> None:
        if self.mode not in ("actors", "tasks"):
            raise ValueError(f"RayOptions.mode: ray_mode must be 'actors' or 'tasks', got {self.mode!r}")
        if self.pool_idle_s < 0:
            raise ValueError(f"RayOptions.pool_idle_s (ray_pool_idle_s) must be >= 0, got {self.pool_idle_s}")


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend: `module.cls` implements the Backend protocol (and its classmethods `create`
    and `reuse_key_for`, see `zephyr.engine.backends.api`)."""

    name: str
    module: str
    cls: str
    help: str  # a few words for the CLI's --backend help
    options: type | None = None  # its options dataclass, kept in ExecutionConfig.backend_options
    in_process: bool = False  # shards run in the driver's process: one worker, and memory:// is shared
    install: str = ""  # how to get what the module imports, for the ImportError

    def load(self) -> Any:
        """The backend class (its module imported now)."""
        try:
            module = importlib.import_module(self.module)
        except ImportError as error:
            raise ImportError(f"the {self.name} backend needs {self.install or self.module} ({error})") from error
        return getattr(module, self.cls)


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            "local", "zephyr.engine.backends.local", "LocalBackend", "in-process, for debugging", in_process=True
        ),
        BackendSpec("processes", "zephyr.engine.backends.local", "ProcessBackend", "all cores of this machine"),
        BackendSpec(
            "ray",
            "zephyr.engine.backends.ray",
            "RayBackend",
            "a Ray cluster",
            RayOptions,
            install="pip install 'zephyr[ray]'",
        ),
    )
}
"""Every backend, by name (the first is for debugging, the second the default)."""


def backend_names() -> tuple[str, ...]:
    """The registered backend names, for choices and messages."""
    return tuple(BACKENDS)


def backend_spec(name: str) -> BackendSpec:
    """The registered backend `name`; ValueError naming the registered ones otherwise."""
    spec = BACKENDS.get(name)
    if spec is None:
        raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    return spec


def options_keywords() -> dict[str, tuple[type, str]]:
    """Every backend option's keyword spelling -> (its options class, its field), e.g. "ray_mode" ->
    (RayOptions, "mode")."""
    return {
        keyword: (spec.options, field)
        for spec in BACKENDS.values()
        if spec.options is not None
        for keyword, field in getattr(spec.options, "KEYWORDS", {}).items()
    }


def with_keywords(options: Any, keywords: Mapping[str, Any]) -> tuple[Any, ...]:
    """`options` (one instance per options class, or a single instance) with the fields that `keywords`
    (keyword spellings, see `options_keywords`; None values ignored) set, creating an options instance
    where there is none."""
    table = options_keywords()
    listed = options if isinstance(options, tuple | list) else (options,)
    by_class: dict[type, Any] = {type(option): option for option in listed}
    for keyword, value in keywords.items():
        if value is None:
            continue
        cls, field = table[keyword]
        current = by_class.get(cls) or cls()
        by_class[cls] = dataclasses.replace(current, **{field: value})
    return tuple(by_class.values())
