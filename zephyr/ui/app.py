"""The Starlette application: every page at `/<page>` (HTML) and its data at `/api/<page>` (JSON).

Pages render on the server from the same dict their JSON endpoint returns, so what a test reads from
`/api/...` is what the browser shows. Handlers are plain functions: Starlette runs them in its thread
pool, so a slow scan of one page never blocks the live view's refreshes.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from zephyr.json_safe import json_safe
from zephyr.ui import pages, pages_runs
from zephyr.ui.filters import FilterSyntaxError
from zephyr.ui.source import Root

__all__ = ["create_app"]

STATIC = Path(__file__).resolve().parent / "static"


def _json_leaf(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class JSON(Response):
    """A JSON response for values `json` refuses: numpy scalars, bytes (as UTF-8 text), NaN (null) and infinities
    ("inf")."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(json_safe(content, leaf=_json_leaf), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _endpoints(
    root: Root, data: Callable[[Root, Request], dict], render: Callable[[Root, dict], str], title: str, active: str
) -> tuple[Callable, Callable]:
    def api(request: Request) -> Response:
        try:
            return JSON(data(root, request))
        except (FilterSyntaxError, ValueError) as exc:
            return JSON({"error": str(exc)}, status_code=400)
        except KeyError as exc:
            return JSON({"error": exc.args[0] if exc.args else str(exc)}, status_code=404)

    def html_page(request: Request) -> Response:
        from zephyr.ui.html import esc, page

        try:
            body = render(root, data(root, request))
            status = 200
        except (FilterSyntaxError, ValueError) as exc:
            body, status = f"<p class=error>{esc(exc)}</p>", 400
        except KeyError as exc:
            body, status = f"<p class=error>{esc(exc.args[0] if exc.args else exc)}</p>", 404
        return HTMLResponse(page(title, active, body, root=root.url), status_code=status)

    return api, html_page


def _warm_up(root: Root) -> None:
    """In the background, load what the first pair and token pages need (MinHash shingling pulls in the
    operators package; a token page, the tokenizer its stores name), so the first such page does not wait."""

    def load() -> None:
        try:
            import zephyr.operators.minhash  # noqa: F401
            from zephyr.ui import stores

            found = stores.list_stores(root)
            if found:
                stores.warm_tokenizer(root, found[0]["path"])
        except Exception:  # noqa: BLE001 - best effort: the page that needs it reports the error itself
            return

    threading.Thread(target=load, name="zephyr-ui-warm-up", daemon=True).start()


def create_app(root_url: str) -> Starlette:
    """The web app over `root_url` (a recipe output root or any folder of Zephyr outputs)."""
    root = Root(root_url)
    routes: list[Any] = []
    for path, data, render, title, active in pages.PAGES:
        api, html_page = _endpoints(root, data, render, title, active)
        routes.append(Route(path, html_page))
        routes.append(Route("/api" + ("/runs" if path == "/" else path), api))
    live_api, _ = _endpoints(root, pages_runs.live_data, pages_runs.render_live, "Live", "runs")
    routes.append(Route("/api/runs/live", live_api))

    def live_fragment(request: Request) -> Response:
        return HTMLResponse(pages_runs.render_live(pages_runs.live_data(root, request)))

    def health(request: Request) -> Response:
        return JSON({"ok": True, "root": root.url})

    def runs_fragment(request: Request) -> Response:
        try:
            return HTMLResponse(pages_runs.render_runs(root, pages_runs.runs_data(root, request)))
        except KeyError as exc:
            from zephyr.ui.html import esc

            return HTMLResponse(f"<p class=error>{esc(exc.args[0] if exc.args else exc)}</p>", status_code=404)

    routes.append(Route("/fragments/live", live_fragment))
    routes.append(Route("/fragments/runs", runs_fragment))
    routes.append(Route("/api/health", health))
    routes.append(Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        _warm_up(root)
        yield

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.root = root
    return app
