"""Pathological text has a bounded cost per document, and what was capped is counted (issue #17 item 15)."""

from __future__ import annotations

import numpy as np

from zephyr import counters
from zephyr.operators.minhash import MinHashConfig, minhash_signatures, shingle_set
from zephyr.tokenize import TokenizerSpec, load_tokenizer


def test_a_word_longer_than_256_bytes_is_hashed_whole_in_one_step():
    counters.reset()
    long_a, long_b = "x" * 300_000, "x" * 299_999 + "y"  # one 300 KB "word" each (was ~3 s each)
    sets = [shingle_set(t) for t in (long_a, long_a, long_b)]
    assert np.array_equal(sets[0], sets[1]) and not np.array_equal(sets[0], sets[2])
    assert counters.snapshot()["minhash/long_words"] == 3
    # words up to 256 bytes keep their hashes: a text of short words is not touched by this path
    counters.reset()
    shingle_set("short words " * 100 + "y" * 256)
    assert "minhash/long_words" not in counters.snapshot()


def test_documents_over_the_token_cap_are_shingled_on_their_first_tokens_and_counted():
    config = MinHashConfig(max_tokens_per_document=50)
    words = [f"w{i}" for i in range(80)]
    counters.reset()
    capped, head = minhash_signatures([" ".join(words), " ".join(words[:50])], config)
    assert np.array_equal(capped, head)
    assert counters.snapshot() == {"minhash/documents_capped": 1, "minhash/tokens_not_shingled": 30}


def test_a_text_without_safe_spaces_is_tokenized_in_bounded_chunks_and_the_cuts_counted():
    tok = load_tokenizer(TokenizerSpec(max_chunk_chars=1000))
    counters.reset()
    chunks = tok.split_long_text("a" * 25_000)  # no space at all: cut anyway while over 10 chunk lengths remain
    assert max(map(len, chunks)) <= 10 * 1000 and "".join(chunks) == "a" * 25_000
    assert counters.snapshot() == {"tokenize/unsafe_cuts": len(chunks) - 1}
    assert len(chunks) - 1 == 15  # 1000-character cuts until 10,000 are left
    flat, lengths = tok.encode_flat(["a" * 25_000])
    assert int(lengths[0]) == len(flat) > 0
    # ordinary text is still cut only at id-preserving spaces, and not counted
    counters.reset()
    text = "plain words here " * 3000
    assert len(tok.split_long_text(text)) > 1 and counters.snapshot() == {}
    assert np.array_equal(tok.encode_flat([text])[0], np.asarray(tok.hf.encode(text, add_special_tokens=False).ids))
    # a stretch without spaces shorter than 10 chunk lengths is only cut at the next safe space (exact ids)
    counters.reset()
    assert tok.split_long_text("b" * 5000 + " c") == ["b" * 5000, " c"] and counters.snapshot() == {}
