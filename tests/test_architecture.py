"""docs/architecture.md's import rules, checked on the source (ast), so a regression fails here, not in review.

- no import circles inside zephyr/ (module-level and function-local imports alike: a lazy import
  that closes a circle still ties the two modules together);
- no module imports another module's private name;
- dependencies point one way: errors/counters <- config <- fs <- versioning <- staged <- engine <- the
  feature packages; `train` reads only the token store and mixture modules of `tokenize`;
- done markers are written only through the staged-work helper (`zephyr.staged`);
- only training code imports JAX, and `zephyr --help` / `zephyr SUBCOMMAND --help` import none of
  JAX, pyarrow or Ray.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "zephyr"

# Area (first component under zephyr) -> the areas it may import besides itself. "base" modules sit
# below everything; the engine builds on them only; feature packages build on the engine.
BASE = {
    "errors",
    "counters",
    "config",
    "lazy",
    "cache",
    "progress",
    "fs",
    "versioning",
    "staged",
    "json_safe",
    "native",
    "text_table",
    "fmix64",
    "commands",
}
# The command line: the top layer, it may import anything.
CLI_AREAS = {"cli", "export_cli", "install_models", "recipe_cli"}
EVERYTHING = BASE | {
    "engine",
    "__init__",
    "operators",
    "tokenize",
    "datashop",
    "ui",
    "steps",
    "step_estimate",
    "train",
    "ablate",
}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "counters": set(),
    "lazy": set(),
    "json_safe": set(),
    "native": set(),
    "text_table": set(),
    "fmix64": set(),
    "cache": set(),
    "progress": set(),
    "config": {"errors"},
    "fs": {"errors", "counters"},
    "versioning": {"errors", "fs"},
    "staged": {"errors", "fs", "versioning"},
    "engine": BASE,
    "operators": BASE | {"engine", "__init__"},
    "tokenize": BASE | {"engine", "__init__"},
    "datashop": BASE | {"engine", "__init__", "operators", "tokenize"},
    "ui": BASE | {"engine", "__init__", "operators", "tokenize", "datashop", "ablate", "steps"},
    "steps": BASE | {"engine", "__init__", "step_estimate"},
    "step_estimate": BASE | {"engine"},  # `zephyr run --estimate` of a recipe's steps
    "train": BASE | {"tokenize"},  # and of tokenize only store/mixture: test_train_reads_only_the_token_store
    "ablate": BASE | {"engine", "__init__", "tokenize", "train"},
    "__init__": BASE | {"engine"},
    **{area: EVERYTHING | CLI_AREAS for area in CLI_AREAS},
    "__main__": {"cli"},
}
TRAIN_MAY_READ = {"zephyr.tokenize.store", "zephyr.tokenize.mixture"}
JAX_PACKAGES = {"jax", "jaxlib", "equinox", "optax", "jaxtyping"}
TRAINING_AREAS = {"train", "ablate"}


@cache
def modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


@cache
def imports() -> dict[str, list[tuple[str, list[str], bool, int]]]:
    """module -> [(imported module, names taken from it, at module level?, line)]; TYPE_CHECKING excluded."""
    mods = modules()
    out: dict[str, list[tuple[str, list[str], bool, int]]] = defaultdict(list)
    for module, (path, is_package) in mods.items():

        def visit(node: ast.AST, top: bool, module: str = module, is_package: bool = is_package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        out[module].append((alias.name, [], top, child.lineno))
                elif isinstance(child, ast.ImportFrom):
                    base = _absolute(module, is_package, child.level, child.module)
                    for alias in child.names:
                        sub = f"{base}.{alias.name}"
                        if sub in mods:  # `from package import submodule`
                            out[module].append((sub, [], top, child.lineno))
                        else:
                            out[module].append((base, [alias.name], top, child.lineno))
                inner = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(child, inner)

        visit(ast.parse(path.read_text(), str(path)), True)
    return out


def _zephyr_target(name: str) -> str | None:
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges(module_level_only: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, found in imports().items():
        for target, _, top, _ in found:
            if target.startswith("zephyr") and (top or not module_level_only):
                resolved = _zephyr_target(target)
                if resolved and resolved != module:
                    graph[module].add(resolved)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(modules()):
        if v not in index:
            strong(v)
    return found


def test_no_import_circles():
    assert _cycles(_edges()) == [], "modules importing each other (directly or through others)"


def test_no_module_imports_another_modules_private_name():
    bad = []
    for module, found in imports().items():
        for target, names, _, line in found:
            if not target.startswith("zephyr") or _zephyr_target(target) == module:
                continue
            bad += [
                f"{module}:{line} imports {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")
            ]
    # and `module._name` on an imported zephyr module
    for module, (path, _) in modules().items():
        tree = ast.parse(path.read_text())
        aliases = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if f"{_absolute(module, modules()[module][1], node.level, node.module)}.{alias.name}" in modules()
        } | {
            alias.asname
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.asname and alias.name in modules()
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert bad == []


def test_dependencies_point_down():
    bad = []
    for module, found in imports().items():
        area = _area(module)
        for target, _, _, line in found:
            resolved = _zephyr_target(target) if target.startswith("zephyr") else None
            if resolved is None:
                continue
            other = _area(resolved)
            if area not in ALLOWED:
                bad.append(f"{module}: new top-level area {area!r}: say in ALLOWED what it may import")
            elif other != area and other not in ALLOWED[area]:
                bad.append(f"{module}:{line} ({area}) imports {resolved} ({other})")
    assert bad == [], "see docs/architecture.md, 'Imports point one way'"


# Done markers are written by the one staged-work helper (zephyr/staged.py); the exceptions say why.
MARKER_WRITERS = {
    "zephyr.staged": "the staged-work helper itself",
    "zephyr.operators.fuzzy_dedup": "a work_dir's settings record, compared by value, not a piece of work",
    "zephyr.ablate.runner": "ablation runs: not moved onto zephyr.staged yet",
}


def test_done_markers_are_written_only_through_the_staged_work_helper():
    writers = {
        module
        for module, found in imports().items()
        for target, names, _, _ in found
        if target == "zephyr.versioning" and {"write_marker", "remove_marker"} & set(names)
    }
    assert writers <= set(MARKER_WRITERS), sorted(writers - set(MARKER_WRITERS))


def test_train_reads_only_the_token_store_and_mixtures():
    bad = [
        f"{module}:{line} imports {target}"
        for module, found in imports().items()
        if _area(module) == "train"
        for target, _, _, line in found
        if target.startswith("zephyr.tokenize") and _zephyr_target(target) not in TRAIN_MAY_READ
    ]
    assert bad == []


def test_only_training_code_imports_jax():
    """No module outside train/ablate imports JAX, directly or through the modules it imports at load."""
    graph = _edges(module_level_only=True)
    direct = {
        module
        for module, found in imports().items()
        for target, _, top, _ in found
        if top and target.split(".")[0] in JAX_PACKAGES
    }
    bad = []
    for module in modules():
        if _area(module) in TRAINING_AREAS:
            continue
        seen, todo = set(), [module]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in direct:
                bad.append(f"{module} loads JAX through {current}")
                break
            todo.extend(graph.get(current, ()))
        for target, _, top, line in imports()[module]:
            resolved = _zephyr_target(target) if target.startswith("zephyr") else None
            if not top and resolved and _area(resolved) == "train" and _area(module) not in CLI_AREAS:
                bad.append(f"{module}:{line} imports {resolved} (training code) outside train/ablate")
    assert bad == []


@pytest.mark.parametrize("command", [[], ["run"], ["tokenize"], ["inspect"], ["train"], ["datashop"], ["ablate"]])
def test_cli_help_loads_no_heavy_library(command):
    code = (
        "import contextlib, io, sys\n"
        "from zephyr.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({command + ['--help']!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('jax', 'pyarrow', 'ray', 'torch', 'zephyr.engine.dataset') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
