"""What a path that matches nothing was relative to (#31 item 5)."""

from __future__ import annotations

import pytest

from zephyr import Dataset
from zephyr.errors import BadInputError
from zephyr.fs import expand_glob


def test_a_relative_pattern_that_matches_nothing_names_the_working_folder(tmp_path, monkeypatch):
    """`no files match 'data/*.jsonl'` from another working folder did not say where `data/` was looked for."""
    (tmp_path / "project" / "data").mkdir(parents=True)
    (tmp_path / "project" / "data" / "a.jsonl").write_text('{"a": 1}\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInputError) as error:
        Dataset.from_files("data/*.jsonl").collect()
    assert f"no files match 'data/*.jsonl' (relative to the working folder {tmp_path})" in str(error.value)
    monkeypatch.chdir(tmp_path / "project")
    assert expand_glob("data/*.jsonl") == [str(tmp_path / "project" / "data" / "a.jsonl")]


def test_an_absolute_or_remote_pattern_is_not_said_to_be_relative(tmp_path):
    for pattern in (str(tmp_path / "none" / "*.jsonl"), "memory://zephyr-nothing-here/*.jsonl"):
        with pytest.raises(BadInputError, match="no files match") as error:
            expand_glob(pattern)
        assert "relative to" not in str(error.value)
