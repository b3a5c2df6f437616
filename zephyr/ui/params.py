"""Query parameters of the UI's pages, checked: a bad value is a clear 400, not a traceback."""

from __future__ import annotations

from starlette.requests import Request

__all__ = ["query_int", "query_param"]


def query_int(request: Request, name: str, default: int, lo: int = 0, hi: int = 10**12) -> int:
    """An integer parameter in lo..hi (absent or empty: `default`)."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name}={raw!r} must be an integer") from None
    if not lo <= value <= hi:
        raise ValueError(f"query parameter {name}={value} must be in {lo}..{hi}")
    return value


def query_param(request: Request, name: str, required: bool = False) -> str:
    """A text parameter (absent: ''; an error when `required`)."""
    value = request.query_params.get(name, "")
    if required and not value:
        raise ValueError(f"query parameter {name!r} is required")
    return value
