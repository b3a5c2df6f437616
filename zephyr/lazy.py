"""Lazy package exports: ``from zephyr import Dataset`` works, ``import zephyr.train.config`` stays light.

A package ``__init__`` that imports all of its submodules makes importing any one of them import
all the others (and what they import: the engine, JAX, Ray). A package therefore imports its exports
only under ``if TYPE_CHECKING:`` (so type checkers and IDEs see them) and lists them in ``__all__``;
`lazy_exports` reads those import lines and imports each name on first use (PEP 562 module
``__getattr__``). The import lines are the one map of name to module: ruff's F401 and F822 keep
``__all__`` equal to them, and adding an export is one import and one ``__all__`` entry.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports", "type_checking_imports"]

_MISSING = object()


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for `package`, exporting what its ``if TYPE_CHECKING:`` block imports
    (``from M import name``; a name that is a submodule of M is that module)."""
    namespace = importlib.import_module(package).__dict__
    exports = type_checking_imports(namespace["__file__"], package)

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = source
        module = importlib.import_module(module_name)
        # read the module's own namespace: getattr on a package would call its lazy __getattr__ again
        value = module.__dict__.get(attribute, _MISSING)
        if value is _MISSING:
            value = importlib.import_module(f"{module_name}.{attribute}")  # `from zephyr import counters`
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


def type_checking_imports(path: str, package: str) -> dict[str, tuple[str, str]]:
    """name -> (module, attribute) of each ``from M import attribute [as name]`` under the
    ``if TYPE_CHECKING:`` of the package ``__init__`` at `path`."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    exports: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                raise TypeError(
                    f"{path}:{statement.lineno}: a lazy export is imported as `from MODULE import NAME` under "
                    f"`if TYPE_CHECKING:`, got {ast.unparse(statement)!r}"
                )
            module = importlib.util.resolve_name("." * statement.level + (statement.module or ""), package)
            for alias in statement.names:
                exports[alias.asname or alias.name] = (module, alias.name)
    return exports
