"""The dataflow engine: lazy Dataset, planner, shuffle, executor and backends."""

from zephyr.engine import counters
from zephyr.engine.context import ExecutionConfig, execution
from zephyr.engine.dataset import Dataset
from zephyr.engine.errors import BadInputError, PlanError, UserCodeError, ZephyrError

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
