"""How a pipeline executes: backend, workers, memory, scratch space; set with `execution(...)`."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import re
from collections.abc import Iterator
from dataclasses import InitVar, dataclass
from typing import Any, TypeVar

from zephyr.engine.backend_registry import backend_spec, options_keywords, with_keywords

__all__ = ["ExecutionConfig", "InputSample", "execution", "current_config", "parse_size"]

_Options = TypeVar("_Options")


def parse_size(text: str | int) -> int:
    """'512MB', '2GiB', '1.5G' or a plain byte count -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b?)\s*", str(text).lower())
    if not match:
        raise ValueError(f"cannot parse size {text!r}: expected e.g. '512MB', '2GiB' or a byte count")
    number, unit, _ = match.groups()
    return int(float(number) * 1024 ** " kmgt".index(unit or " "))


@dataclass(frozen=True)
class InputSample:
    """What `--estimate`'s sample runs read of each source (`zephyr.engine.estimate.sample_plan`): `fraction`
    of its shards, evenly spread (at least two when it has two or more; with `half`, every other one of
    those, so that two runs read nested samples), except sources whose files all lie under a path in
    `exempt` (the estimate's own step outputs), which are read whole."""

    fraction: float
    half: bool = False
    exempt: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"InputSample.fraction must be in (0, 1], got {self.fraction!r}")


@dataclass(frozen=True)
class ExecutionConfig:
    """Execution settings; every field has a sensible default for one machine.

    memory_per_worker bounds the shuffle: the scatter buffer flushes at a quarter of it and the gather
    merges at most as many run files at once as fit in half of it (an external merge does the rest).

    backend names a registered backend (`zephyr.engine.backend_registry`: local, processes, ray);
    backend_options holds the backends' own options, one instance per options class (e.g.
    `RayOptions(address="auto")`; a single instance is accepted too), read with `options(RayOptions)`.
    The Ray options may also be given by their keyword spellings (`ray_address=`, `ray_dashboard=`,
    `ray_pool_idle_s=`, `ray_mode=`), here and in `execution(...)`; they are folded into `RayOptions` and
    are not attributes of the config.
    """

    backend: str = "processes"
    workers: int | None = None  # None: all cores
    memory_per_worker: int = 1 << 30
    scratch: str | None = None  # None: $ZEPHYR_SCRATCH or ./.zephyr/scratch
    dry_run: bool = False
    estimate: bool = False  # with dry_run: run a sample of the input shards, print full-size estimates
    sample: InputSample | None = None  # read only a sample of each source's shards (--estimate's sample runs)
    max_user_retries: int = 1
    max_infra_retries: int = 3
    retry_backoff_s: float = 0.5
    progress: bool | None = None  # None: when stderr is a terminal
    keep_scratch: bool = False
    summary: bool = True
    on_bad_record: str = "raise"  # for file sources that do not set it: "raise" or "skip" (count and skip)
    # what one worker asks for by default (a stage may ask for more: `map(fn, resources={...})`)
    worker_cpus: float = 1.0
    worker_gpus: float = 0.0
    backend_options: Any = ()  # the backends' own options (RayOptions, ...), one per options class
    # keyword spellings of RayOptions' fields (see the class docstring): folded into backend_options
    ray_address: InitVar[str | None] = None
    ray_dashboard: InitVar[bool | None] = None
    ray_pool_idle_s: InitVar[float | None] = None
    ray_mode: InitVar[str | None] = None

    def __post_init__(
        self,
        ray_address: str | None,
        ray_dashboard: bool | None,
        ray_pool_idle_s: float | None,
        ray_mode: str | None,
    ) -> None:
        backend_spec(self.backend)  # a registered name, or a ValueError naming them
        keywords = {
            "ray_address": ray_address,
            "ray_dashboard": ray_dashboard,
            "ray_pool_idle_s": ray_pool_idle_s,
            "ray_mode": ray_mode,
        }
        object.__setattr__(self, "backend_options", with_keywords(self.backend_options, keywords))
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.on_bad_record not in ("raise", "skip"):
            raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {self.on_bad_record!r}")
        if self.memory_per_worker < 16 << 20:
            raise ValueError(f"memory_per_worker must be at least 16MB, got {self.memory_per_worker} bytes")
        if self.worker_cpus < 0 or self.worker_gpus < 0:
            raise ValueError(f"worker_cpus and worker_gpus must be >= 0, got {self.worker_cpus} and {self.worker_gpus}")

    def options(self, cls: type[_Options]) -> _Options:
        """The options of class `cls` (e.g. RayOptions) this config holds, or its defaults."""
        return next((option for option in self.backend_options if isinstance(option, cls)), None) or cls()

    @property
    def num_workers(self) -> int:
        """Shards run at once: 1 for a backend that runs them in this process, else `workers` or all cores."""
        if backend_spec(self.backend).in_process:
            return 1
        return self.workers or os.cpu_count() or 1

    @property
    def scratch_url(self) -> str:
        """Where shuffle files and checkpoints go: `scratch`, else $ZEPHYR_SCRATCH, else ./.zephyr/scratch."""
        return self.scratch or os.environ.get("ZEPHYR_SCRATCH") or os.path.abspath(".zephyr/scratch")


_config: contextvars.ContextVar[ExecutionConfig] = contextvars.ContextVar("zephyr_execution")


def current_config() -> ExecutionConfig:
    """The innermost `execution(...)` config, or the defaults (overridable by ZEPHYR_BACKEND)."""
    config = _config.get(None)
    if config is None:
        backend = os.environ.get("ZEPHYR_BACKEND", "processes")
        config = ExecutionConfig(backend=backend)
    return config


@contextlib.contextmanager
def execution(config: ExecutionConfig | None = None, **overrides) -> Iterator[ExecutionConfig]:
    """Run the pipelines inside this block with `config` (or the current one) changed by `overrides`.

    >>> with execution(backend="local"):
    ...     Dataset.from_list([1, 2, 3]).map(lambda x: x * 2).collect()
    [2, 4, 6]
    """
    if isinstance(overrides.get("memory_per_worker"), str):
        overrides["memory_per_worker"] = parse_size(overrides["memory_per_worker"])
    base = config or current_config()
    keywords = {key: overrides.pop(key) for key in list(overrides) if key in options_keywords()}
    if keywords:  # backend options by their keyword spellings (ray_address=...): merged into base's options
        overrides["backend_options"] = with_keywords(overrides.get("backend_options", base.backend_options), keywords)
    token = _config.set(dataclasses.replace(base, **overrides))
    try:
        yield _config.get()
    finally:
        _config.reset(token)
