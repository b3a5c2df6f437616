"""The language-id kernel (langid_kernel.c through langid_native.py) against py3langid itself: (language, score)
compared with ==, never approximately, on real pages and paragraphs and on edge texts."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter

import numpy as np
import pytest
from py3langid.langid import LanguageIdentifier, visit_counts

from zephyr.operators import langid_native
from zephyr.operators.extract import html_to_text
from zephyr.operators.langid import LanguageId, _load


@pytest.fixture(scope="module")
def kernel():
    if langid_native.kernel() is None:
        pytest.skip("zephyr.operators.langid_kernel is not built (make install builds it)")
    return langid_native.kernel()


@pytest.fixture(scope="module")
def model():
    return _load("py3langid", None)


@pytest.fixture(scope="module")
def real_texts(shared_data):
    """Every page of web-pages and aeb-dev as extracted text, whole and cut at LanguageId's 4,000
    characters, every paragraph of them, and aeb-dev's hand-labelled article bodies."""
    pages = [
        html_to_text(gzip.decompress(path.read_bytes()))
        for folder in ("web-pages", "aeb-dev/html")
        for path in sorted((shared_data / folder).glob("*.html.gz"))
    ]
    pages = [page for page in pages if page]
    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    bodies = [entry["articleBody"] for entry in truth.values()]
    paragraphs = [line for page in pages for line in page.split("\n") if line.strip()]
    return pages + [page[:4000] for page in pages] + bodies + paragraphs


def _edge_texts() -> list[str | bytes]:
    rng = random.Random(32)
    pool = list("abcxyz ÄÖÜßéèçñ АБВабв 中文日本語 한국어 عربي हिन्दी ΣΑΣ 😀\x00\t\n\u00a0\u3000") + [" "] * 4
    texts: list[str | bytes] = [
        "",
        " ",
        "\n\t \u3000",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "ÉCOLE NATIONALE SUPÉRIEURE",
        "Москва — столица России, крупнейший по численности населения город страны.",
        "北京是中华人民共和国的首都，也是全国的政治中心和文化中心。",
        "서울특별시는 대한민국의 수도이자 최대 도시이다.",
        "القاهرة هي عاصمة جمهورية مصر العربية وأكبر مدنها.",
        "दिल्ली भारत की राजधानी है।",
        "e\u0301cole cafe\u0301",  # NFC composes these
        "lone \ud800 surrogate \udfff here",
        "nul\x00bytes\x00\x00 in the middle",
        "😀" * 50,
        "Dies ist ein deutscher Satz. " * 400,  # far past max_chars
        "a",
        b"plain UTF-8 bytes, d\xc3\xa9j\xc3\xa0 vu",
        b"invalid \xff\xfe UTF-8 \x80 bytes",
        b"cut in a character \xe4\xb8",  # py3langid trims a partial last character
        b"",
    ]
    texts += ["".join(rng.choice(pool) for _ in range(rng.randrange(0, 200))) for _ in range(300)]
    texts += [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(100)]
    return texts


def _same(model, texts) -> None:
    got = langid_native.classify(model, texts)
    expected = [model.classify(text) for text in texts]
    mismatches = [(t[:60], g, e) for t, g, e in zip(texts, got, expected, strict=True) if g != e]
    assert not mismatches, mismatches[:5]


def test_real_pages_and_paragraphs_bit_for_bit(kernel, model, real_texts):
    assert len(real_texts) > 2000
    _same(model, real_texts)


def test_edge_texts_bit_for_bit(kernel, model):
    _same(model, _edge_texts())


def test_other_model_settings_bit_for_bit(kernel, model):
    """Raw scores (norm_probs=False, the empty text's floor), a confidence threshold, a float32 table
    (numpy gathers it) and a set_languages restriction (a column subset of the table)."""
    arrays = (model.nb_ptc, model.nb_pc, model.nb_classes, model.tk_nextmove, model.tk_output)
    texts = _edge_texts()[:60] + ["Ein kurzer Satz.", "A short sentence.", "Une phrase courte."]
    _same(LanguageIdentifier(*arrays, norm_probs=False, tk_row=model.tk_row), texts)
    _same(LanguageIdentifier(*arrays, norm_probs=True, min_confidence=0.9, tk_row=model.tk_row), texts)
    float32 = (model.nb_ptc.astype(np.float32), *arrays[1:])
    _same(LanguageIdentifier(*float32, norm_probs=True, tk_row=model.tk_row), texts)
    restricted = LanguageIdentifier(*arrays, norm_probs=True, tk_row=model.tk_row)
    restricted.set_languages(["en", "de", "fr", "sr"])  # sr: two columns (Latin and Cyrillic), folded
    assert restricted._alias_pairs
    _same(restricted, texts)


def test_walk_visits_features_in_first_visit_order(kernel):
    """A random automaton: the kernel's features and counts are py3langid's Counter, in its order."""
    rng = np.random.default_rng(7)
    states, rows = 50, 20
    nextmove = rng.integers(0, states, size=rows * 256, dtype=np.uint32)
    row_of = rng.integers(0, rows, size=states, dtype=np.uint32)
    output = rng.integers(-1, 30, size=states, dtype=np.int32)
    walker = kernel.new_walker(nextmove, row_of, output)
    nm, rowbase = nextmove.tolist(), [int(r) << 8 for r in row_of]
    # more texts than the kernel walks side by side, of unequal lengths (empty ones too)
    texts = [rng.integers(0, 256, size=size, dtype=np.uint8).tobytes() for size in (0, 1, 5, 300, 5000, 0, 7, 2) * 3]
    features, counts, sizes = kernel.visit_counts(walker, texts)
    features, counts = np.frombuffer(features, np.int64).tolist(), np.frombuffer(counts, np.float32).tolist()
    start = 0
    for text, size in zip(texts, np.frombuffer(sizes, np.int64).tolist(), strict=True):
        expected = visit_counts(nm, rowbase, output.tolist(), text) or Counter()
        assert features[start : start + size] == list(expected)
        assert counts[start : start + size] == list(expected.values())
        start += size
    assert start == len(features)
    # a bytearray and a memoryview are texts too
    assert kernel.visit_counts(walker, [bytearray(b"abc")]) == kernel.visit_counts(walker, [memoryview(b"abc")])
    assert kernel.visit_counts(walker, []) == (b"", b"", b"")


def test_float16_rows_convert_exactly(kernel):
    """Every float16 bit pattern, as numpy converts it (a signalling NaN comes back quiet from F16C)."""
    table = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(256, 256)
    rows = np.array([255, 0, 7, 7], dtype=np.int64)
    got = np.frombuffer(kernel.gather_rows(table, rows), dtype=np.float32).reshape(4, 256)
    expected = table[rows].astype(np.float32)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))
    assert kernel.gather_rows(table, np.array([], dtype=np.int64)) == b""


def test_argument_checks(kernel):
    nextmove = np.zeros(256, dtype=np.uint32)
    one = np.zeros(1, dtype=np.uint32)
    output = np.full(1, -1, dtype=np.int32)
    with pytest.raises(ValueError, match="whole 256-transition rows"):
        kernel.new_walker(np.zeros(100, dtype=np.uint32), one, output)
    with pytest.raises(ValueError, match="one row and one output per state"):
        kernel.new_walker(nextmove, np.zeros(2, dtype=np.uint32), output)
    with pytest.raises(ValueError, match=r"nextmove \(uint32\): 6 bytes"):
        kernel.new_walker(b"\0" * 6, one, output)
    with pytest.raises(ValueError, match=r"nextmove\[3\] = 1, but there are 1 states"):
        kernel.new_walker(np.where(np.arange(256) == 3, 1, 0).astype(np.uint32), one, output)
    with pytest.raises(ValueError, match=r"rows\[0\] = 1, but nextmove holds 1 rows"):
        kernel.new_walker(nextmove, np.ones(1, dtype=np.uint32), output)
    with pytest.raises(ValueError, match=r"output\[0\] = -2"):
        kernel.new_walker(nextmove, one, np.full(1, -2, dtype=np.int32))
    walker = kernel.new_walker(nextmove, one, output)
    with pytest.raises(TypeError, match=r"texts\[1\] is a str, expected a bytes-like object"):
        kernel.visit_counts(walker, [b"abc", "a str, not its UTF-8"])
    with pytest.raises(TypeError, match="a sequence of bytes-like texts"):
        kernel.visit_counts(walker, 3)
    with pytest.raises(TypeError, match=r"a walker from new_walker\(\), got object"):
        kernel.visit_counts(object(), [b"abc"])
    table = np.zeros((3, 4), dtype=np.float16)
    with pytest.raises(ValueError, match="2-d float16 table"):
        kernel.gather_rows(table.astype(np.float32), np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="2-d float16 table"):
        kernel.gather_rows(table.ravel(), np.zeros(1, dtype=np.int64))
    with pytest.raises(IndexError, match=r"features\[1\] = 3 is outside the table's 3 rows"):
        kernel.gather_rows(table, np.array([0, 3], dtype=np.int64))
    with pytest.raises(ValueError, match=r"features \(int64\)"):
        kernel.gather_rows(table, np.zeros(1, dtype=np.int32))


def test_fallback_without_the_kernel_gives_the_same(monkeypatch):
    texts = [t for t in _edge_texts()[:40] if isinstance(t, str)]
    with_kernel = LanguageId().predict(texts)
    monkeypatch.setattr(langid_native, "kernel", lambda: None)
    assert LanguageId().predict(texts) == with_kernel
