"""`zephyr export hf` writes the tokenizer that made the training data, so `AutoTokenizer` loads the export.

A user's exported model had weights and a config but no tokenizer files: `AutoTokenizer.from_pretrained`
failed, and picking a tokenizer by hand risks one whose ids differ from the training data's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")


def test_the_export_loads_with_autotokenizer_and_gives_the_stores_ids(tiny_run, hf_export):
    from zephyr.tokenize import open_store
    from zephyr.tokenize.tokenizer import load_tokenizer

    config, _result = tiny_run
    out, stdout = hf_export
    assert "AutoTokenizer" in stdout
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    store = open_store(config.data.train["articles"][0])
    ours = load_tokenizer(store.tokenizer["source"])
    assert len(tokenizer) == ours.info.vocab_size == json.loads((out / "config.json").read_text())["vocab_size"]
    assert tokenizer.eos_token == store.tokenizer["eos_token"]
    # the ids of the training data: a store document decodes, and re-encodes, the same both ways
    ids = np.asarray(store.document(0)).tolist()
    text = ours.decode(ids)
    assert tokenizer.decode(ids) == text
    for sample in (text[:2000], "Zephyr turns raw web data into tokens. Ünïcödé, 12345, <|endoftext|> as text."):
        assert tokenizer(sample, add_special_tokens=False)["input_ids"] == ours.encode(sample).tolist()


def test_a_tokenizer_that_changed_since_the_store_is_refused(article_stores, tmp_path):
    import shutil

    from zephyr.tokenize.export import export_tokenizer_hf

    store = tmp_path / "store"
    shutil.copytree(article_stores["train"], store)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["tokenizer"]["content_hash"] = "0" * 32
    (store / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="has changed since"):
        export_tokenizer_hf([str(store)], tmp_path / "out")
