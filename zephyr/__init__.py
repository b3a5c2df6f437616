"""Zephyr: raw web data to pretraining token mixtures, tested with small training runs."""

from zephyr.engine import (
    BadInputError,
    Dataset,
    ExecutionConfig,
    PlanError,
    UserCodeError,
    ZephyrError,
    counters,
    execution,
)

__all__ = [
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


def __getattr__(name: str):
    # col/lit live in zephyr.engine.expr; imported lazily so `import zephyr` stays light
    if name in ("col", "lit"):
        from zephyr.engine import expr

        return getattr(expr, name)
    raise AttributeError(f"module 'zephyr' has no attribute {name!r}")
