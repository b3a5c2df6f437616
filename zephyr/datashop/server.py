"""A small OpenAI-compatible completions server over a local `transformers` model.

Lets the `openai` backend (and anything else that speaks the API) use the offline model, and gives
tests and benchmarks a real HTTP server on 127.0.0.1. Implements `POST /v1/completions` (prompt as
a string or list, `max_tokens`, `logprobs`, greedy only), `GET /v1/models` and `GET /health`;
requests are served one at a time (the model is not thread-safe), each as one batch.

    python -m zephyr.datashop.server --model smollm2-135m-instruct --port 8000
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from zephyr.datashop.config import LabelerConfig

__all__ = ["CompletionServer", "start_server", "main"]


@dataclass
class CompletionServer:
    """A running server: `url` is the API base (`http://127.0.0.1:PORT/v1`); call `stop()` when done."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread
    model_name: str

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def __enter__(self) -> CompletionServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(backend: Any, model_name: str, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") in ("/health", ""):
                self._send(200, {"status": "ok"})
            elif self.path.rstrip("/") == "/v1/models":
                self._send(
                    200, {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "zephyr"}]}
                )
            else:
                self._error(404, f"no route {self.path}; try POST /v1/completions")

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") != "/v1/completions":
                self._error(404, f"no route {self.path}; try POST /v1/completions")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                prompts = body.get("prompt")
                if isinstance(prompts, str):
                    prompts = [prompts]
                if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
                    raise ValueError("`prompt` must be a non-empty string or list of strings")
                max_tokens = int(body.get("max_tokens", 16))
                top_k = body.get("logprobs")
                top_k = 0 if top_k is None else int(top_k)
                if max_tokens < 1 or not 0 <= top_k <= 20:
                    raise ValueError("need max_tokens >= 1 and 0 <= logprobs <= 20")
                if float(body.get("temperature", 0.0) or 0.0) != 0.0:
                    raise ValueError("this server only decodes greedily: send temperature 0")
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                self._error(400, str(exc))
                return
            with lock:
                generated = backend.generate_with_logprobs(prompts, max_tokens, top_k)
            choices = []
            for i, g in enumerate(generated):
                logprobs = None
                if top_k:
                    offsets, pos = [], 0
                    for token in g.tokens:
                        offsets.append(pos)
                        pos += len(token)
                    logprobs = {
                        "tokens": list(g.tokens),
                        "token_logprobs": list(g.token_logprobs),
                        "top_logprobs": list(g.top_logprobs),
                        "text_offset": offsets,
                    }
                finish = "stop" if g.stopped else "length"
                choices.append({"index": i, "text": g.text, "logprobs": logprobs, "finish_reason": finish})
            self._send(
                200,
                {
                    "id": f"cmpl-{uuid.uuid4().hex}",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": model_name,
                    "choices": choices,
                },
            )

    return Handler


def start_server(model: str = "smollm2-135m-instruct", *, host: str = "127.0.0.1", port: int = 0) -> CompletionServer:
    """Load `model` (see `LabelerConfig.model`) and serve it in a background thread; port 0 picks a free one."""
    from zephyr.datashop.backend_transformers import TransformersBackend

    backend = TransformersBackend(LabelerConfig(backend="transformers", model=model))
    httpd = ThreadingHTTPServer((host, port), _handler(backend, model, threading.Lock()))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="zephyr-completions", daemon=True)
    thread.start()
    return CompletionServer(httpd, thread, model)


def main(argv: list[str] | None = None) -> int:
    """Serve a local transformers model on an OpenAI-compatible completions API (for testing the `openai` labeling
    backend without a remote server)."""
    parser = argparse.ArgumentParser(
        description="Serve a local transformers model on an OpenAI-compatible completions API"
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    server = start_server(args.model, host=args.host, port=args.port)
    print(f"serving {args.model} at {server.url}", flush=True)
    try:
        server.thread.join()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
