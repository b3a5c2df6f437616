"""Lazy package exports: ``from zephyr import Dataset`` works, ``import zephyr.train.config`` stays light.

A package ``__init__`` that imports all of its submodules makes importing any one of them import
all the others (and what they import: the engine, JAX, Ray). Packages therefore name their exports
here and import each one on first use (PEP 562 module ``__getattr__``); the same names are imported
under ``if TYPE_CHECKING:`` so type checkers and IDEs still see them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for `package`: `exports` maps a public name to the module defining it
    (a name that is itself a module maps to that module)."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = (
            module if module_name.rsplit(".", 1)[-1] == name and not hasattr(module, name) else getattr(module, name)
        )
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
