"""Derived stores on a real token store: token-shuffled copies and matched-exposure subsets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from zephyr.ablate.config import ExposureSpec
from zephyr.ablate.stores import (
    eval_bytes_per_token,
    exposure_cap,
    store_summary,
    write_capped_store,
    write_shuffled_store,
)
from zephyr.tokenize import TokenStore, load_tokenizer, verify_store


def test_shuffled_store_keeps_each_documents_tokens_and_boundaries(ablation_stores, tmp_path: Path) -> None:
    src = TokenStore(ablation_stores.prose)
    eos = src.tokenizer["eos_id"]
    out = write_shuffled_store(ablation_stores.prose, tmp_path / "shuffled", seed=3)
    assert verify_store(out).ok
    shuffled = TokenStore(out)
    assert (shuffled.num_documents, shuffled.num_tokens) == (src.num_documents, src.num_tokens)
    assert shuffled.tokenizer == src.tokenizer
    assert np.array_equal(shuffled.document_lengths(), src.document_lengths())
    moved = 0
    for i in range(src.num_documents):
        a, b = np.asarray(src.document(i)), np.asarray(shuffled.document(i))
        assert Counter(a.tolist()) == Counter(b.tolist())  # same bag of tokens
        assert b[-1] == eos == a[-1]  # the document boundary stays
        moved += int((a != b).sum())
    assert moved > 0.9 * src.num_tokens  # word order is gone
    # Deterministic, and reused when asked again with the same inputs.
    again = write_shuffled_store(ablation_stores.prose, tmp_path / "again", seed=3)
    assert (Path(again) / "shards/00000/tokens.bin").read_bytes() == (
        Path(out) / "shards/00000/tokens.bin"
    ).read_bytes()
    mtime = (Path(out) / "manifest.json").stat().st_mtime_ns
    write_shuffled_store(ablation_stores.prose, out, seed=3)
    assert (Path(out) / "manifest.json").stat().st_mtime_ns == mtime
    other = write_shuffled_store(ablation_stores.prose, tmp_path / "seed4", seed=4)
    assert (Path(other) / "shards/00000/tokens.bin").read_bytes() != (
        Path(out) / "shards/00000/tokens.bin"
    ).read_bytes()
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    assert manifest["config"]["derivation"] == {"kind": "token_shuffle", "scope": "document", "seed": 3}
    # The shuffled text is still decodable: real tokens in a scrambled order.
    text = load_tokenizer(ablation_stores.tokenizer).decode(shuffled.document(0)[:50])
    assert text and text != load_tokenizer(ablation_stores.tokenizer).decode(src.document(0)[:50])


def test_capped_store_is_an_exact_deterministic_nested_subset(ablation_stores, tmp_path: Path) -> None:
    src = TokenStore(ablation_stores.code)
    eos = src.tokenizer["eos_id"]
    originals = {np.asarray(src.document(i)).tobytes() for i in range(src.num_documents)}
    small = TokenStore(write_capped_store(ablation_stores.code, tmp_path / "small", max_tokens=5_000, seed=1))
    large = TokenStore(write_capped_store(ablation_stores.code, tmp_path / "large", max_tokens=20_000, seed=1))
    assert verify_store(small.path).ok and verify_store(large.path).ok
    assert small.num_tokens == 5_000 and large.num_tokens == 20_000
    for store in (small, large):
        docs = [np.asarray(store.document(i)) for i in range(store.num_documents)]
        assert all(d[-1] == eos for d in docs)
        assert sum(d.tobytes() in originals for d in docs) >= len(docs) - 1  # whole documents, the last one cut
    # A smaller cap takes a prefix of a larger cap's documents (same seed).
    for i in range(small.num_documents - 1):
        assert np.array_equal(small.document(i), large.document(i))
    again = TokenStore(write_capped_store(ablation_stores.code, tmp_path / "again", max_tokens=5_000, seed=1))
    assert np.array_equal(np.asarray(again.tokens(0, 5_000)), np.asarray(small.tokens(0, 5_000)))
    everything = TokenStore(write_capped_store(ablation_stores.code, tmp_path / "all", max_tokens=10**9))
    assert everything.num_tokens == src.num_tokens and everything.num_documents == src.num_documents


def test_exposure_cap_matches_production_epochs() -> None:
    # Production: 1T tokens, 10% from a 20B-token dataset = 5 epochs. Ablation: 1B tokens at 10% = 100M
    # tokens of it, so keeping 20M unique tokens gives 5 epochs too.
    cap = exposure_cap(
        "wiki",
        unique_tokens=20_000_000_000,
        share=0.1,
        ablation_tokens=1_000_000_000,
        spec=ExposureSpec(production_tokens=1e12),
    )
    assert cap.production_epochs == pytest.approx(5.0)
    assert cap.cap_tokens == 20_000_000 and cap.ablation_epochs == pytest.approx(5.0)
    # Production gives the dataset another share than the ablation mixture does.
    other = exposure_cap(
        "wiki",
        unique_tokens=20_000_000_000,
        share=0.1,
        ablation_tokens=1_000_000_000,
        spec=ExposureSpec(production_tokens=1e12, production_weight=0.02),
    )
    assert other.production_epochs == pytest.approx(1.0) and other.cap_tokens == 100_000_000
    direct = exposure_cap(
        "code", unique_tokens=50_000, share=0.5, ablation_tokens=40_000, spec=ExposureSpec(production_epochs=4)
    )
    assert direct.cap_tokens == 5_000 and direct.ablation_epochs == pytest.approx(4.0)
    # Production repeats less than even the full dataset allows here: nothing to cap, and the report says so.
    over = exposure_cap(
        "code", unique_tokens=10_000, share=0.5, ablation_tokens=100_000, spec=ExposureSpec(production_epochs=2)
    )
    assert over.cap_tokens is None and over.ablation_epochs == pytest.approx(5.0) and "cannot match" in over.note


def test_eval_bytes_per_token_counts_the_evaluated_targets(ablation_stores) -> None:
    val = ablation_stores.prose + "/validation"
    bpt = eval_bytes_per_token(val, seq_len=64, batch_size=4, eval_batches=2)
    store = TokenStore(val)
    ids = np.asarray(store.tokens(1, 8 * 64 + 1))
    tok = load_tokenizer(ablation_stores.tokenizer)
    nbytes = len(tok.hf.decode(ids.tolist(), skip_special_tokens=True).encode())
    assert bpt == pytest.approx(nbytes / len(ids))
    assert 1.5 < bpt < 6.0  # a 1k-entry BPE holds a few bytes per token (about 1.9 on markup-heavy READMEs)
    summary = store_summary(ablation_stores.prose)
    assert summary.vocab_size == 1024 and summary.eos_id == tok.info.eos_id and summary.tokens > 50_000
