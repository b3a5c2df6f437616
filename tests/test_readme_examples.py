"""The user documentation's Python code runs as it is pasted: every ```python block of README.md and of
docs/*.md is written to a file and run.

A new user's first pipeline came from the README and failed (`NameError: reduce_host`, then a field
nothing made). Each ```python block is run on its own, in a fresh folder, as `python block.py` would be
and as `zephyr run block.py` would (which also calls the `main()` a block defines). A block that is not
meant to run (a fragment, a sketch needing a cluster) says so with `<!-- readme: not run -->` on the
line above its fence; ```bash blocks are commands, never run here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_RUN = "<!-- readme: not run -->"


def python_blocks(markdown: str) -> list[tuple[int, str, bool]]:
    """(line number, code, meant to run) for every ```python block of `markdown`."""
    blocks = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        if re.fullmatch(r"```python\s*", lines[i]):
            start = i
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            marked = start > 0 and lines[start - 1].strip() == NOT_RUN
            blocks.append((start + 1, "\n".join(body) + "\n", not marked))
        i += 1
    return blocks


PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_BLOCKS = python_blocks(PAGES[0].read_text(encoding="utf-8"))
BLOCKS = [
    (f"{page.relative_to(REPO)} line {line}", code)
    for page in PAGES
    for line, code, run in python_blocks(page.read_text(encoding="utf-8"))
    if run
]


def test_the_readme_has_a_runnable_pipeline_with_a_reducer_and_a_join():
    runnable = [code for _, code, run in README_BLOCKS if run]
    assert runnable, "the README shows no Python block that runs"
    first = runnable[0]
    assert re.search(r"def \w+\(\w+: \w+, \w+: Iterator\[dict\]\)", first), "the reducer's signature is shown"
    assert ".group_by(" in first and ".sorted_merge_join(" in first


def test_the_marker_is_honoured():
    text = f"x\n{NOT_RUN}\n```python\nraise SystemExit(1)\n```\n```python\nprint(1)\n```\n"
    assert [(code, run) for _, code, run in python_blocks(text)] == [
        ("raise SystemExit(1)\n", False),
        ("print(1)\n", True),
    ]


@pytest.mark.parametrize("where, code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_readme_block_runs_as_pasted(tmp_path, where, code):
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_RUNS": str(tmp_path / "runs")}
    # as `python example.py`, and as `zephyr run example.py` (which calls a main() the block defines)
    for command in ([str(script)], ["-m", "zephyr.cli", "run", str(script)]):
        done = subprocess.run(
            [sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"the block at {where} failed:\n{done.stdout}\n{done.stderr}"
