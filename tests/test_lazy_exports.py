"""`zephyr.lazy`: a package's exports are its `if TYPE_CHECKING:` imports, imported on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zephyr.lazy import type_checking_imports

PACKAGES = [
    "zephyr",
    "zephyr.ablate",
    "zephyr.datashop",
    "zephyr.engine",
    "zephyr.operators",
    "zephyr.tokenize",
    "zephyr.train",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_resolves_to_the_object_its_import_line_names(package):
    module = importlib.import_module(package)
    exports = type_checking_imports(module.__file__, package)
    assert exports, f"{package} exports nothing lazily"
    assert set(exports) <= set(module.__all__)
    for name, (source, attribute) in exports.items():
        origin = importlib.import_module(source)
        expected = origin.__dict__.get(attribute) or importlib.import_module(f"{source}.{attribute}")
        assert getattr(module, name) is expected, (package, name)
    assert set(exports) <= set(dir(module))


def test_importing_a_package_imports_none_of_its_exports():
    code = (
        "import sys, zephyr.ablate, zephyr.tokenize; "
        "print(sorted(m for m in sys.modules if m.startswith(('zephyr.ablate.', 'zephyr.tokenize.', 'zephyr.engine'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_package_whose_lazy_block_holds_another_statement_is_refused(tmp_path: Path):
    init = tmp_path / "__init__.py"
    init.write_text(
        textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import json
    """)
    )
    with pytest.raises(TypeError, match=r"__init__.py:4: a lazy export is imported as `from MODULE import NAME`"):
        type_checking_imports(str(init), "pkg")


def test_relative_and_aliased_imports_map_to_the_module_and_attribute(tmp_path: Path):
    init = tmp_path / "__init__.py"
    init.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f as g\n    from . import b\n"
    )
    assert type_checking_imports(str(init), "pkg") == {"g": ("pkg.a", "f"), "b": ("pkg", "b")}
