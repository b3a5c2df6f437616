"""How a pipeline executes: backend, workers, memory, scratch space; set with `execution(...)`."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ExecutionConfig", "InputSample", "execution", "current_config", "parse_size"]

BACKENDS = ("local", "processes", "ray")


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
    ray_address: str | None = None
    summary: bool = True
    on_bad_record: str = "raise"  # for file sources that do not set it: "raise" or "skip" (count and skip)
    # what one worker asks for by default (a stage may ask for more: `map(fn, resources={...})`)
    worker_cpus: float = 1.0
    worker_gpus: float = 0.0
    ray_dashboard: bool = False  # a local Ray cluster serves its dashboard on http://127.0.0.1:8265
    # seconds the Ray actor pool stays up after a run for the next run to reuse; 0 (the default) gives
    # its CPUs back to the cluster the moment the run ends, as a job sharing a cluster must
    ray_pool_idle_s: float = 0.0
    # how the Ray backend runs shards: "actors" (a warm pool, each stage's functions loaded once per worker)
    # or "tasks" (one plain Ray task per shard: nothing held between shards, more start-up per shard)
    ray_mode: str = "actors"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.on_bad_record not in ("raise", "skip"):
            raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {self.on_bad_record!r}")
        if self.memory_per_worker < 16 << 20:
            raise ValueError(f"memory_per_worker must be at least 16MB, got {self.memory_per_worker} bytes")
        if self.ray_mode not in ("actors", "tasks"):
            raise ValueError(f"ray_mode must be 'actors' or 'tasks', got {self.ray_mode!r}")
        if self.worker_cpus < 0 or self.worker_gpus < 0 or self.ray_pool_idle_s < 0:
            raise ValueError(
                f"worker_cpus, worker_gpus and ray_pool_idle_s must be >= 0, got {self.worker_cpus}, "
                f"{self.worker_gpus} and {self.ray_pool_idle_s}"
            )

    @property
    def num_workers(self) -> int:
        if self.backend == "local":
            return 1
        return self.workers or os.cpu_count() or 1

    @property
    def scratch_url(self) -> str:
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
    token = _config.set(dataclasses.replace(base, **overrides))
    try:
        yield _config.get()
    finally:
        _config.reset(token)
