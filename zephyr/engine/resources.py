"""What a stage asks of the worker that runs one of its shards: CPUs, GPUs, memory, custom Ray resources.

A narrow op carries its request (`ds.map(fn, resources={"gpus": 1})`); the planner's stage merges the
requests of its fused ops (the largest of each), and the backend runs the stage on workers of that shape:
Ray starts a pool of actors asking for exactly that, the processes backend honours what one machine can
(CPUs per task, one task per GPU device) and warns about what it cannot (memory, custom resources).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Resources", "merge_requests", "effective"]

_KNOWN = ("cpus", "gpus", "memory")


@dataclass(frozen=True)
class Resources:
    """A request; None fields take the run's defaults (`worker_cpus`, `worker_gpus`, `memory_per_worker`).

    custom: Ray custom resources as sorted (name, amount) pairs, e.g. (("node_a", 1.0),).
    """

    cpus: float | None = None
    gpus: float | None = None
    memory: int | None = None
    custom: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for name, value in (("cpus", self.cpus), ("gpus", self.gpus), ("memory", self.memory)):
            if value is not None and value < 0:
                raise ValueError(f"resources: {name} must be >= 0, got {value}")
        for name, amount in self.custom:
            if amount <= 0:
                raise ValueError(f"resources: custom resource {name!r} must be > 0, got {amount}")

    @classmethod
    def of(cls, value: Resources | Mapping[str, Any] | None) -> Resources | None:
        """A `Resources` from a dict such as {"gpus": 1, "memory": "8GB", "node_a": 1} (other keys are
        custom Ray resources), or the value itself."""
        if value is None or isinstance(value, Resources):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"resources must be a dict like {{'cpus': 2, 'gpus': 1, 'memory': '8GB', 'my_resource': 1}} "
                f"or zephyr.engine.resources.Resources, got {type(value).__name__}"
            )
        from zephyr.engine.context import parse_size

        memory = value.get("memory")
        custom = value.get("custom", {})
        custom = dict(custom) | {k: v for k, v in value.items() if k not in (*_KNOWN, "custom")}
        return cls(
            cpus=None if value.get("cpus") is None else float(value["cpus"]),
            gpus=None if value.get("gpus") is None else float(value["gpus"]),
            memory=None if memory is None else parse_size(memory),
            custom=tuple(sorted((str(k), float(v)) for k, v in custom.items())),
        )

    def describe(self) -> str:
        parts = [f"{name}={getattr(self, name)}" for name in _KNOWN if getattr(self, name) is not None]
        parts += [f"{name}={amount:g}" for name, amount in self.custom]
        return ", ".join(parts) or "defaults"


def merge_requests(requests: Iterable[Resources | None]) -> Resources | None:
    """One shard task runs every fused op, so it needs the largest request of each kind."""
    merged: Resources | None = None
    for request in requests:
        if request is None:
            continue
        if merged is None:
            merged = request
            continue
        custom = dict(merged.custom)
        for name, amount in request.custom:
            custom[name] = max(custom.get(name, 0.0), amount)
        merged = Resources(
            _max(merged.cpus, request.cpus),
            _max(merged.gpus, request.gpus),
            _max(merged.memory, request.memory),
            tuple(sorted(custom.items())),
        )
    return merged


def effective(request: Resources | None, config: Any) -> Resources:
    """The request with the run's defaults filled in: what one worker of this stage holds."""
    request = request or Resources()
    return Resources(
        cpus=float(config.worker_cpus) if request.cpus is None else request.cpus,
        gpus=float(config.worker_gpus) if request.gpus is None else request.gpus,
        memory=config.memory_per_worker if request.memory is None else request.memory,
        custom=request.custom,
    )


def stage_request(stage: Any) -> Resources | None:
    """The merged request of a stage's ops (`resources` on map/flat_map/map_batches/map_shard), which the
    planner carries in `Stage.resources` in op order."""
    return merge_requests(stage.resources)


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
