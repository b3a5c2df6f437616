"""The dataflow engine: lazy Dataset, planner, shuffle, executor and backends.

Its errors and counters are defined below every package, in `zephyr.errors` and `zephyr.counters`, and
spelled only there; `zephyr` exports them with the engine's front door (`from zephyr import Dataset,
counters, BadInputError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
    from zephyr.engine.context import ExecutionConfig, execution
    from zephyr.engine.dataset import Dataset

__all__ = ["Dataset", "ExecutionConfig", "execution"]

# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): one engine module never imports the others.
__getattr__, __dir__ = lazy_exports(__name__)
