"""`zephyr ui`: a local web app over a recipe output root or any folder of Zephyr outputs.

Pages (each also at `/api/...` as JSON): Runs (steps, live run records), Documents (paged, filtered with
the engine's `col` expressions), Removed-and-why (lineage side outputs, keeper side by side), Token stores
and mixtures, Ablations and training curves. Built on Starlette + uvicorn (`pip install 'zephyr[ui]'`);
every asset is served from this package (no CDN).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "serve"]


def create_app(root: str) -> Any:
    """The Starlette app over `root` (a local path or a gs://, s3://, memory:// URL)."""
    from zephyr.ui.app import create_app as _create

    return _create(root)


def serve(root: str, *, host: str = "127.0.0.1", port: int = 8265, log_level: str = "warning") -> None:
    """Serve the UI until interrupted (Ctrl-C)."""
    import uvicorn

    uvicorn.run(create_app(root), host=host, port=port, log_level=log_level)
