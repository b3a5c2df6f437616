"""The dataflow engine: lazy Dataset, planner, shuffle, executor and backends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
    from zephyr.engine import counters
    from zephyr.engine.context import ExecutionConfig, execution
    from zephyr.engine.dataset import Dataset
    from zephyr.engine.errors import (
        BadInputError,
        PlanError,
        UserCodeError,
        ZephyrError,
    )

__all__ = [
    "Dataset",
    "ExecutionConfig",
    "execution",
    "counters",
    "ZephyrError",
    "BadInputError",
    "UserCodeError",
    "PlanError",
]

# Imported on first use (zephyr.lazy): importing one engine module never imports the others.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Dataset": "zephyr.engine.dataset",
        "ExecutionConfig": "zephyr.engine.context",
        "execution": "zephyr.engine.context",
        "counters": "zephyr.engine.counters",
        "ZephyrError": "zephyr.errors",
        "BadInputError": "zephyr.errors",
        "UserCodeError": "zephyr.errors",
        "PlanError": "zephyr.errors",
    },
)
