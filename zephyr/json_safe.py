"""One converter from Python values to what strict JSON can hold (`json.dumps(..., allow_nan=False)`).

Reports (ablations, scaling ladders) and the UI's JSON API all carry floats that may be NaN or infinite (a
p-value of a single seed, an open interval); JSON has neither. They differ only in how an infinity is
written: as the strings "inf"/"-inf" (kept for a reader that wants the direction) or as null.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["json_safe"]


def json_safe(
    value: Any, *, infinity: Literal["string", "null"] = "string", leaf: Callable[[Any], Any] | None = None
) -> Any:
    """`value` with every NaN as None and every infinity as "inf"/"-inf" (`infinity="string"`) or None
    (`infinity="null"`), through nested dicts (keys as str), lists and tuples (as lists).

    `leaf`, when given, converts every other value first (e.g. numpy scalars to Python numbers); without it
    other values are returned as they are.
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v, infinity=infinity, leaf=leaf) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, infinity=infinity, leaf=leaf) for v in value]
    if leaf is not None and not isinstance(value, float):
        value = leaf(value)
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value) or infinity == "null":
            return None
        return "inf" if value > 0 else "-inf"
    return value
