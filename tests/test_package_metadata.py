"""What a packaged library promises: a version to ask for, type information, a changelog."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import zephyr

REPO = Path(__file__).resolve().parents[1]


def test_version_is_one_value_everywhere(capsys):
    import pytest

    from zephyr.cli import main
    from zephyr.engine.run.record import RunRecorder

    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-].+)?", zephyr.__version__)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "zephyr.__version__"}
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"zephyr {zephyr.__version__}"
    assert RunRecorder().record["versions"]["zephyr"] == zephyr.__version__


def test_the_package_declares_its_types_and_keeps_a_changelog():
    assert (REPO / "zephyr" / "py.typed").is_file()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["zephyr"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## Unreleased" in changelog
