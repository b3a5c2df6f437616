"""Zephyr: raw web data to pretraining token mixtures, tested with small training runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
    from zephyr import counters
    from zephyr.engine.context import ExecutionConfig, execution
    from zephyr.engine.dataset import Dataset
    from zephyr.engine.expr import col, lit
    from zephyr.errors import BadInputError, PlanError, UserCodeError, ZephyrError

__version__ = "0.1.0"
"""The release, the one place it is written (pyproject.toml reads it; see CHANGELOG.md)."""

__all__ = [
    "__version__",
    "Dataset",
    "ExecutionConfig",
    "execution",
    "counters",
    "col",
    "lit",
    "ZephyrError",
    "BadInputError",
    "UserCodeError",
    "PlanError",
]

# Imported on first use (zephyr.lazy), so `import zephyr.train` or `zephyr --help` never loads the engine.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Dataset": "zephyr.engine.dataset",
        "ExecutionConfig": "zephyr.engine.context",
        "execution": "zephyr.engine.context",
        "counters": "zephyr.counters",
        "col": "zephyr.engine.expr",
        "lit": "zephyr.engine.expr",
        "ZephyrError": "zephyr.errors",
        "BadInputError": "zephyr.errors",
        "UserCodeError": "zephyr.errors",
        "PlanError": "zephyr.errors",
    },
)
