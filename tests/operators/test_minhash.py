"""MinHash signatures: normalization, shingles, estimator quality, determinism, LSH banding."""

from __future__ import annotations

import random

import numpy as np
import pytest
from minhash_corpus import article_chunks, load_article_bodies

from zephyr.operators import minhash as mh
from zephyr.operators import minhash_native
from zephyr.operators.minhash import (
    EMPTY_HASH,
    MinHashConfig,
    band_hashes,
    jaccard,
    lsh_candidate_probability,
    minhash_signatures,
    normalize_text,
    optimal_bands,
    shingle_set,
    sketch_documents,
)


@pytest.fixture(scope="module")
def articles(shared_data) -> list[str]:
    return load_article_bodies(shared_data / "aeb-dev" / "ground-truth.json")


@pytest.fixture(scope="module")
def chunks(articles) -> list[str]:
    return article_chunks(articles)


def _edit(text: str, rate: float, rng: random.Random) -> str:
    words = text.split()
    vocabulary = words
    out = []
    for word in words:
        roll = rng.random()
        if roll >= rate:
            out.append(word)
        elif roll < rate / 3:
            out.append(rng.choice(vocabulary))
        elif roll >= 2 * rate / 3:
            out.extend((word, rng.choice(vocabulary)))
    return " ".join(out)


# --------------------------------------------------------------------------- normalization


def test_normalize_lowercases_strips_punctuation_collapses_space():
    assert normalize_text("Hello,   World!  It's\n5 o'clock.") == "hello world it s 5 o clock"
    assert normalize_text("“Ça va?” — Très\u00a0bien… 20€ ©2024 snake_case") == "ça va très bien 20 2024 snake case"
    assert normalize_text("ПРИВЕТ, мир!「東京」、한국어。") == "привет мир 東京 한국어"
    assert normalize_text("  \t\n ,.;\u3000\u200b") == ""
    assert normalize_text("emoji 😀 stays") == "emoji 😀 stays"  # beyond U+FFFF nothing is a separator


def test_byte_paths_agree_with_the_plain_rule(articles):
    # _words works on UTF-8 bytes (table translate + trie regex); it must give exactly the words of
    # the character-by-character rule, on real text and on adversarial mixtures of scripts.
    for text in articles:
        assert mh._words(text) == mh._words_reference(text)
    pool = (
        [chr(c) for c in range(0, 128)]
        + list("éÉßøŒæ’‘“”—–…«»•·€£©®™°\u00a0\u2009\u202f\u200b\u3000、。，\ufeff¹²³µºª¼½×÷İ")
        + list("приветМИР中文字日本語한국어ήλιοςאבגعربي")
        + ["\x1c", "\x1f", "\x85", "\u2028", "_", "-", "😀", "𝐀", "\u0301", "\uffff", "\ufffd"]
    )
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 40)))
        assert mh._words(text) == mh._words_reference(text), repr(text)
    rng_all = random.Random(1)
    for _ in range(300):  # any BMP character, surrogates excluded
        chars = [chr(rng_all.randrange(0, 0x10000)) for _ in range(30)]
        text = "".join(c for c in chars if not 0xD800 <= ord(c) <= 0xDFFF)
        assert mh._words(text) == mh._words_reference(text), repr(text)


# --------------------------------------------------------------------------- shingles


def _python_word_shingles(text: str, n: int) -> set[tuple[str, ...]]:
    words = "".join(" " if mh._is_separator(c) else c for c in text.lower()).split()
    if 0 < len(words) < n:
        return {tuple(words)}
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_word_shingle_jaccard_equals_python_sets(chunks):
    rng = random.Random(1)
    config = MinHashConfig()
    for text in chunks[:40]:
        other = _edit(text, 0.03, rng)
        expected_a, expected_b = _python_word_shingles(text, 5), _python_word_shingles(other, 5)
        set_a, set_b = shingle_set(text, config), shingle_set(other, config)
        assert len(set_a) == len(expected_a) and len(set_b) == len(expected_b)  # no hash collisions
        exact = len(expected_a & expected_b) / len(expected_a | expected_b)
        assert jaccard(set_a, set_b) == pytest.approx(exact)


def test_char_shingles_match_python_sets():
    config = MinHashConfig(shingle="char", ngram_size=4)
    a, b = "The quick brown fox jumps.", "the quick, brown fox jumped!"
    norm_a, norm_b = normalize_text(a), normalize_text(b)
    grams_a = {norm_a[i : i + 4] for i in range(len(norm_a) - 3)}
    grams_b = {norm_b[i : i + 4] for i in range(len(norm_b) - 3)}
    assert len(shingle_set(a, config)) == len(grams_a)
    assert jaccard(shingle_set(a, config), shingle_set(b, config)) == pytest.approx(
        len(grams_a & grams_b) / len(grams_a | grams_b)
    )


def test_short_and_empty_documents():
    config = MinHashConfig()
    sigs = minhash_signatures(["", "  !!! ", "two words", "two words", "Two, WORDS!", "three small words"], config)
    assert (sigs[0] == EMPTY_HASH).all() and (sigs[1] == EMPTY_HASH).all()
    # fewer words than the n-gram size: one shingle of all the words
    assert len(shingle_set("two words", config)) == 1
    assert (sigs[2] == sigs[3]).all() and (sigs[2] == sigs[4]).all()
    assert not (sigs[2] == sigs[5]).all()
    keys, counts, sets = sketch_documents(["", "two words", "a b c d e f"], config, with_sets=True)
    assert counts.tolist() == [0, 1, 2] and [len(s) for s in sets] == [0, 1, 2]
    assert jaccard(sets[0], sets[0]) == 0.0  # documents without shingles are never near-duplicates


# --------------------------------------------------------------------------- signatures


def _reference_signature(text: str, config: MinHashConfig) -> np.ndarray:
    """Straight from the definition: min over shingles of (a * h + b) mod 2^32, per permutation."""
    a, b = mh._permutations(config)
    hashes = (shingle_set(text, config) >> np.uint64(32)).astype(np.uint64)
    values = (hashes[None, :] * a[:, None].astype(np.uint64) + b[:, None].astype(np.uint64)) & np.uint64(0xFFFFFFFF)
    return values.min(axis=1).astype(np.uint32)


def test_batched_chunked_signatures_equal_the_definition(chunks):
    config = MinHashConfig()
    long_doc = " ".join(chunks[:12])  # > 4096 shingles: spans several MinHash chunks
    texts = [chunks[0], "", "short one", long_doc, chunks[1], chunks[0]]
    sigs = minhash_signatures(texts, config)
    assert sigs.shape == (6, 112) and sigs.dtype == np.uint32
    for text, sig in zip(texts, sigs, strict=False):
        if text:
            assert np.array_equal(sig, _reference_signature(text, config))
        # a document's signature does not depend on the batch it was computed in
        assert np.array_equal(sig, minhash_signatures([text], config)[0])


def test_seeded_and_deterministic(chunks):
    first = minhash_signatures(chunks[:5], MinHashConfig(seed=7))
    again = minhash_signatures(chunks[:5], MinHashConfig(seed=7))
    other = minhash_signatures(chunks[:5], MinHashConfig(seed=8))
    assert np.array_equal(first, again)
    assert (first != other).mean() > 0.99
    # constants come from splitmix64 in pure Python, pinned here so they never drift silently
    a, b = mh._permutations(MinHashConfig(seed=1))
    assert int(a[0]) == (mh._splitmix64(1, 1)[0] >> 32) | 1 and int(b[0]) == mh._splitmix64(1, 1)[0] & 0xFFFFFFFF


def test_estimator_is_unbiased_with_binomial_spread(chunks):
    # Our cheap 32-bit universal permutations must estimate Jaccard like ideal random permutations:
    # mean error ~0 and z-scores (error / sqrt(J(1-J)/k)) with unit spread; datasketch on the same
    # pairs for scale.
    from datasketch import MinHash

    rng = random.Random(2)
    config = MinHashConfig()
    pairs = [(t, _edit(t, rate, rng)) for t in chunks[:60] for rate in (0.01, 0.04, 0.1)]
    exact = np.array([jaccard(shingle_set(a), shingle_set(b)) for a, b in pairs])
    ours, peer = [], []
    for seed in (1, 2):
        cfg = MinHashConfig(seed=seed)
        sig_a = minhash_signatures([a for a, _ in pairs], cfg)
        sig_b = minhash_signatures([b for _, b in pairs], cfg)
        ours.append((sig_a == sig_b).mean(axis=1))
        for a, b in pairs:
            m = [MinHash(num_perm=112, seed=seed), MinHash(num_perm=112, seed=seed)]
            for sketch, text in zip(m, (a, b), strict=False):
                words = normalize_text(text).split()
                sketch.update_batch([" ".join(words[i : i + 5]).encode() for i in range(len(words) - 4)])
            peer.append(m[0].jaccard(m[1]))
    err = np.concatenate(ours) - np.tile(exact, 2)
    z = err / np.sqrt(np.maximum(np.tile(exact * (1 - exact), 2), 1e-9) / config.num_perm)
    peer_err = np.array(peer) - np.tile(exact, 2)
    assert abs(err.mean()) < 0.01
    assert 0.8 < z.std() < 1.2
    assert np.sqrt((err**2).mean()) < 1.25 * np.sqrt((peer_err**2).mean())


def test_unrelated_documents_rarely_agree(chunks):
    sigs = minhash_signatures(chunks[:50], MinHashConfig())
    agree = [(sigs[i] == sigs[j]).mean() for i in range(50) for j in range(i + 1, 50)]
    assert max(agree) < 0.1


# --------------------------------------------------------------------------- LSH banding


def test_band_keys_match_exactly_when_band_rows_match():
    config = MinHashConfig()
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(1, 112), dtype=np.uint32)
    other = sig.copy()
    other[0, 8 * 3 + 5] ^= 1  # one row of band 3 differs
    keys, keys_other = band_hashes(sig, config), band_hashes(other, config)
    assert keys.shape == (1, 14) and keys.dtype == np.uint64
    assert [bool(x) for x in keys[0] == keys_other[0]] == [i != 3 for i in range(14)]
    # identical row values in different bands never share a key
    same_rows = np.tile(sig[:, :8], (1, 14))
    assert len(set(band_hashes(same_rows, config)[0].tolist())) == 14
    with pytest.raises(ValueError, match="shape"):
        band_hashes(sig[:, :100], config)


def test_optimal_bands_match_datasketch():
    from datasketch.lsh import _optimal_param

    for threshold in (0.5, 0.7, 0.8, 0.9):
        for num_perm in (64, 112, 128):
            assert optimal_bands(threshold, num_perm) == _optimal_param(threshold, num_perm, 0.5, 0.5)
    config = MinHashConfig.for_threshold(0.7, num_perm=128)
    assert (config.num_bands, config.rows_per_band) == (14, 9)
    assert lsh_candidate_probability(0.8, 14, 8) == pytest.approx(0.9236, abs=1e-3)
    assert lsh_candidate_probability(0.5, 14, 8) < 0.06


def test_config_errors_say_what_to_do():
    with pytest.raises(ValueError, match="'word' or 'char'"):
        MinHashConfig(shingle="token")
    with pytest.raises(ValueError, match="num_bands must be a positive int"):
        MinHashConfig(num_bands=0)
    with pytest.raises(ValueError, match="threshold must be in"):
        optimal_bands(1.5, 112)


def test_batched_word_hashes_are_per_word_and_collision_free(articles):
    texts = articles[:30] + ["", "  !!! ", "Ünïcödé — wörds, “quoted” ＦＵＬＬ width", "x" * 5000 + " y", "x" * 5001]
    tokens, lengths = mh._word_tokens(texts)
    assert lengths.tolist() == [len(mh._words(t)) for t in texts]
    # a word's hash depends on the word alone, not on its batch or its position
    for text, part in zip(texts, np.split(tokens, np.cumsum(lengths)[:-1]), strict=False):
        alone, _ = mh._word_tokens([text])
        assert np.array_equal(part, alone)
    words = [w for t in texts for w in mh._words(t)]
    by_hash = dict(zip(tokens.tolist(), words, strict=False))
    assert len(by_hash) == len(set(words))  # equal words, equal hashes; distinct words, distinct hashes
    # words that differ only in length, zero-padding or chunk order
    tricky = ["a", "a0", "ab", "ba", "abcdefgh", "abcdefgh0", "abcdefghabcdefgh", "abcdefgh" * 3, "0", "00"]
    assert len(set(mh._word_tokens([" ".join(tricky)])[0].tolist())) == len(tricky)


# --------------------------------------------------------------------------- the C kernel


@pytest.fixture
def native():
    if minhash_native.kernel() is None:
        pytest.skip("zephyr.operators.minhash_kernel is not built (make install builds it)")
    return minhash_native.kernel()


def _numpy_sketch(texts: list[str], config: MinHashConfig) -> tuple[np.ndarray, ...]:
    signatures, counts, shingles = mh._signatures(texts, config)
    return (signatures, counts, *mh._sorted_sets(shingles, counts))


def test_native_kernel_gives_the_numpy_bits(native, articles):
    """Signatures, shingle counts and sorted 64-bit sets, bit for bit, on real text and on what the kernel
    treats apart: texts without words or shorter than n, words over 256 bytes (hashed whole by xxh3),
    Unicode whose lowercase is context-dependent or two characters (final sigma, U+0130), characters
    beyond the plane, separators of every kind, repeated text (equal hashes in the sort) and a cap."""
    rng = random.Random(3)
    pool = list("abc xyz ΣΑΣ ΟΔΟΣ İı ßẞ ǅǆ Ω𐐀𐐨 😀 ’“—\u00a0\u2028\u3000。，\x1c\x85\ufeff_-é") + [" ", " ", " "]
    texts = articles[:40] + ["", "  !!! ", "a", "a b c d", "x" * 300 + " y", "z" * 5000, "la " * 30000]
    texts += ["".join(rng.choice(pool) for _ in range(rng.randrange(0, 80))) for _ in range(400)]
    texts += [" ".join(rng.choice("abcdef") for _ in range(rng.randrange(0, 3000))) for _ in range(40)]
    for config in (
        MinHashConfig(),
        MinHashConfig(ngram_size=3, num_bands=4, rows_per_band=3, seed=9, max_tokens_per_document=50),
    ):
        got = mh._native_sketch(texts, config, True)
        for mine, reference in zip(got, _numpy_sketch(texts, config), strict=True):
            assert mine.dtype == reference.dtype and np.array_equal(mine, reference)


def test_native_kernel_counts_what_the_numpy_path_counts(native):
    from zephyr import counters

    texts = ["one " * 30 + "w" * 400, "short text here"]
    before = counters.snapshot()
    mh._native_sketch(texts, MinHashConfig(max_tokens_per_document=10), False)
    after = counters.snapshot()
    found = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert found.get("minhash/long_words", 0) == 0  # the long word comes after the cap: never hashed
    assert found["minhash/documents_capped"] == 1 and found["minhash/tokens_not_shingled"] == 21
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate fails as str.encode does on the numpy path
        mh._native_sketch(["bad \ud800 text"], MinHashConfig(), False)


def test_shingle_sets_of_a_batch_are_each_documents_shingle_set(chunks):
    texts = [*chunks[:20], "", "two words", "!!!", chunks[0]]
    values, offsets = mh.shingle_sets(texts)
    assert offsets[0] == 0 and offsets[-1] == len(values) and values.dtype == np.uint64
    for i, text in enumerate(texts):
        assert np.array_equal(values[offsets[i] : offsets[i + 1]], shingle_set(text))
