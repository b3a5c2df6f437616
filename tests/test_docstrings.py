"""Every public function and class of `zephyr` has a docstring, so the API reference (`make docs`) is complete.

Public: defined at a module's top level under a name without a leading underscore (what `from module import
name` offers). Read from the source (ast), so the check costs no import and sees every module.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "zephyr"


def _undocumented() -> list[str]:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if ast.get_docstring(tree) is None:
            missing.append(f"{relative} (the module)")
        for node in tree.body:
            public = isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ) and not node.name.startswith("_")
            if public and ast.get_docstring(node) is None:
                missing.append(f"{relative}:{node.lineno} {node.name}")
    return missing


def test_every_public_function_and_class_has_a_docstring():
    missing = _undocumented()
    assert not missing, f"{len(missing)} public names without a docstring (say why they exist):\n" + "\n".join(missing)
