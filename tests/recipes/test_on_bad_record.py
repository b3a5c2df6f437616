"""`on_bad_record='skip'`, which every bad-input message suggests, is reachable from recipes and the CLI
(issue #17 item 16)."""

from __future__ import annotations

import argparse

import orjson
import pytest
import zstandard

from zephyr import Dataset, execution
from zephyr.errors import BadInputError
from zephyr.tokenize import open_store
from zephyr.tokenize.cli import add_cli


@pytest.fixture
def inputs(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    good = b"\n".join(orjson.dumps({"id": str(i), "text": f"document number {i}"}) for i in range(5)) + b"\n"
    (folder / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(good))
    (folder / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(good)[:-7])  # cut off: truncated
    return folder


def test_the_execution_setting_reaches_file_sources(inputs, scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        with pytest.raises(BadInputError, match=r"b.jsonl.zst.*on_bad_record='skip'"):
            Dataset.from_files(str(inputs / "*.jsonl.zst")).count()
        with execution(on_bad_record="skip"):
            assert Dataset.from_files(str(inputs / "*.jsonl.zst")).count() >= 5
        assert Dataset.from_files(str(inputs / "*.jsonl.zst"), on_bad_record="skip").count() >= 5


def test_zephyr_tokenize_takes_on_bad_record(inputs, tmp_path, scratch, monkeypatch):
    monkeypatch.setenv("ZEPHYR_SCRATCH", scratch)
    parser = argparse.ArgumentParser(prog="zephyr")
    add_cli(parser.add_subparsers(dest="command", required=True))
    store = str(tmp_path / "store")
    args = parser.parse_args(["tokenize", str(inputs / "*.jsonl.zst"), store, "--backend", "local"])
    assert args.func(args) == 2
    args = parser.parse_args(
        ["tokenize", str(inputs / "*.jsonl.zst"), store, "--backend", "local", "--on-bad-record", "skip"]
    )
    assert args.func(args) == 0
    assert open_store(store).num_documents >= 5


@pytest.mark.parametrize("name", ["common_crawl", "datashop_edu", "nemotron_cc"])
def test_every_recipe_has_on_bad_record(load_recipe, name):
    recipe = load_recipe(name)
    parsed = recipe.parse_args(["--on-bad-record", "skip"])
    if isinstance(parsed, tuple):  # (config, engine settings)
        assert parsed[1]["on_bad_record"] == "skip"
    else:
        assert parsed.on_bad_record == "skip"
    with pytest.raises(SystemExit):
        recipe.parse_args(["--on-bad-record", "sometimes"])
