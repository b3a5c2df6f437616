"""`zephyr ui [ROOT] [--host 127.0.0.1] [--port 8265]`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zephyr.commands import add_command

__all__ = ["add_cli", "main"]


def add_cli(subparsers: Any) -> None:
    """Register `zephyr ui ROOT [--host] [--port]`."""
    parser = add_command(subparsers, "ui", main)
    parser.add_argument(
        "root", nargs="?", default="out", help="output root: a local folder or gs://, s3:// URL (default: out)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=8265, help="port (default 8265)")


def main(args: argparse.Namespace) -> int:
    """a local web UI over a recipe output root or any folder of Zephyr outputs

    Serve Zephyr's web UI: runs (live), documents, removed documents and why, token stores, ablations.
    Open http://HOST:PORT in a browser.

    examples:
      zephyr ui out/nemotron_cc              # after `make run`; then open http://127.0.0.1:8265
      zephyr ui out/nemotron_cc --port 9000  # another port
      zephyr ui gs://bucket/out              # a bucket root, read through the region guard
      zephyr ui out --host 0.0.0.0           # reachable from other machines (no authentication: trusted networks only)

    Every page has a JSON twin under /api (e.g. /api/runs, /api/documents?dataset=...&filter=...).
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(f"zephyr ui needs {exc.name}: pip install 'zephyr[ui]' (starlette, uvicorn)", file=sys.stderr)
        return 2
    from zephyr.fs import url_to_fs
    from zephyr.ui import serve

    fs, path = url_to_fs(args.root)
    if not fs.exists(path):
        print(
            f"zephyr ui: {args.root} does not exist; give an output root, e.g. `zephyr ui out/nemotron_cc` "
            "after `make run`",
            file=sys.stderr,
        )
        return 2
    print(f"Zephyr UI over {args.root}: http://{args.host}:{args.port}  (Ctrl-C stops)", file=sys.stderr)
    serve(args.root, host=args.host, port=args.port)
    return 0
