"""recipes/nemotron_cc.py on records that lack what it needs: checked where they enter, with the recipe's flags."""

from __future__ import annotations

import orjson
import pytest
import zstandard

from zephyr import execution
from zephyr.engine.io import read_records
from zephyr.errors import BadInputError


def _write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(b"".join(orjson.dumps(r) + b"\n" for r in records)))


def _text(i):
    return f"document {i} says something of its own about the number {i} " * 8


def _run(recipe, tmp_path, *flags):
    argv = ["--input", str(tmp_path / "in" / "*" / "*.jsonl.zst"), "--output", str(tmp_path / "out"), "--no-train"]
    scratch = str(tmp_path / "scratch")
    with execution(backend="local", scratch=scratch, summary=False, progress=False, max_user_retries=1):
        return recipe.run(recipe.parse_args([*argv, *flags]))


def test_a_record_without_an_id_fails_at_normalize_naming_the_input_file_and_the_recipes_flags(load_recipe, tmp_path):
    """Records without `warc_record_id` passed normalize and exact dedup, then failed in fuzzy dedup as the user's
    code, naming an intermediate file, retried once though deterministic, with a fix the recipe user cannot reach
    (`FuzzyDedupConfig(id_field=...)`)."""
    recipe = load_recipe("nemotron_cc")
    source = tmp_path / "in" / "high_actual" / "part-0.jsonl.zst"
    records = [{"text": _text(i), "warc_record_id": f"<urn:{i}>"} for i in range(4)]
    records[2] = {"text": _text(2), "url": "https://example.org/2"}
    _write(source, records)
    with pytest.raises(BadInputError) as error:  # bad input: never retried, not the user's code
        _run(recipe, tmp_path)
    message = str(error.value)
    assert f"shard 0 ({source})" in message and "on record #2" in message
    assert "'warc_record_id'" in message and "'url'" in message  # what was expected, what the record has
    assert "--id-field" in message and "--on-bad-record skip" in message
    assert not list((tmp_path / "out").glob("exact_dedup-*"))

    outputs = _run(recipe, tmp_path, "--on-bad-record", "skip")
    normalize = outputs["normalize"].summary
    assert (normalize["documents_in"], normalize["documents_out"]) == (4, 3)
    assert normalize["dropped"] == {"no_id": 1}


def test_id_field_names_where_the_records_keep_their_id(load_recipe, tmp_path):
    recipe = load_recipe("nemotron_cc")
    _write(tmp_path / "in" / "medium" / "part-0.jsonl.zst", [{"text": _text(i), "doc": f"d{i}"} for i in range(3)])
    outputs = _run(recipe, tmp_path, "--id-field", "doc")
    assert outputs["normalize"].summary["documents_out"] == 3
    removed = outputs["fuzzy_dedup"].summary
    assert removed["documents_in"] == 3


def test_text_that_is_not_a_string_is_counted_apart_from_empty_text(load_recipe, tmp_path):
    """An int, list, dict or bool `text` was counted as normalize/dropped_empty_text."""
    recipe = load_recipe("nemotron_cc")
    records = [{"text": _text(i), "warc_record_id": f"<urn:{i}>"} for i in range(3)]
    records += [
        {"text": value, "warc_record_id": f"<urn:bad-{i}>"} for i, value in enumerate([7, ["a"], {"b": 1}, True])
    ]
    records += [{"text": value, "warc_record_id": f"<urn:empty-{i}>"} for i, value in enumerate(["", "  \n", None])]
    records += [{"warc_record_id": "<urn:no-text>"}]
    _write(tmp_path / "in" / "high_actual" / "part-0.jsonl.zst", records)
    outputs = _run(recipe, tmp_path)
    normalize = outputs["normalize"].summary
    assert (normalize["documents_in"], normalize["documents_out"]) == (11, 3)
    assert normalize["dropped"] == {"text_not_a_string": 4, "text_empty": 4}


def test_a_document_over_max_document_chars_is_cut_and_counted(load_recipe, tmp_path):
    """One 175 MB document made the workers of exact dedup, fuzzy dedup and tokenize peak at 1.38, 3.12 and
    1.79 GB against --memory-per-worker 1GB (338, 353 and 470 MB with the default 1,000,000-character cap)."""
    recipe = load_recipe("nemotron_cc")
    long_text = " ".join(f"word{i}" for i in range(2_000))  # 17,889 characters
    records = [{"text": _text(i), "warc_record_id": f"<urn:{i}>"} for i in range(3)]
    records.append({"text": long_text, "warc_record_id": "<urn:long>"})
    _write(tmp_path / "in" / "medium" / "part-0.jsonl.zst", records)
    outputs = _run(recipe, tmp_path, "--max-document-chars", "5000")
    normalize = outputs["normalize"].summary
    assert (normalize["documents_out"], normalize["capped"]) == (4, 1)
    paths = sorted((tmp_path / "out").glob("normalize-*/medium/*.jsonl.zst"))
    docs = [doc for path in paths for doc in read_records(str(path))]
    (long_doc,) = [d for d in docs if d["id"] == "<urn:long>"]
    assert 4500 < len(long_doc["text"]) <= 5000 and long_text.startswith(long_doc["text"])
    assert not long_doc["text"].endswith(" ") and long_text[len(long_doc["text"])] == " "  # cut at a space
