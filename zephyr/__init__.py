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

# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): `zephyr --help` never loads the engine.
__getattr__, __dir__ = lazy_exports(__name__)
