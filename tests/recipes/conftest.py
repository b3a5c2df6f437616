"""Recipes are scripts, not package modules: tests load them from recipes/ by file name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _load(name: str) -> ModuleType:
    module_name = f"zephyr_recipe_{name}_under_test"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, RECIPES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@pytest.fixture(scope="session")
def load_recipe():
    """`load_recipe("nemotron_cc")` -> the recipe module, imported once per session."""
    return _load
