"""`quality_signals` (word statistics in the C kernel or, without it, NumPy; one lowering; reordered C4
skips) equals the plain-Python version it replaced (`tests/quality_reference.py`) on every real page
and on the edge cases the rewrite could get wrong: ties of the most frequent n-gram, very short
documents, repeats, huge vocabularies, pathological repeats, whitespace and case mapping outside
ASCII. Every test runs on both paths."""

from __future__ import annotations

import gzip
import json
import random
import re
import sys

import pytest
from quality_reference import reference_quality_signals

from zephyr.operators import quality, quality_words
from zephyr.operators.extract import ExtractText
from zephyr.operators.quality import _POLICY, _POLICY_HINTS, _PUNCT_STRIP, STOP_WORDS, quality_signals

LANGS = ("en", "de", None, "zz")  # English, another list, the default, a language without a list


@pytest.fixture(autouse=True, params=["kernel", "numpy"])
def word_path(request, monkeypatch) -> str:
    """Each test once with the C kernel (skipped when it is not built) and once on the NumPy fallback."""
    if request.param == "kernel":
        if quality._kernel() is None:
            pytest.skip("zephyr.operators.quality_kernel is not built")
    else:
        monkeypatch.setattr(quality, "_kernel", lambda: None)
    return request.param


def _assert_same(text: str, lang: str | None = "en") -> None:
    got, want = quality_signals(text, lang=lang), reference_quality_signals(text, lang=lang)
    assert list(got) == list(want)
    diff = {k: (got[k], want[k]) for k in want if got[k] != want[k] or type(got[k]) is not type(want[k])}
    assert not diff, f"(new, reference) differ on {text[:80]!r}...: {diff}"


@pytest.fixture(scope="module")
def page_texts(shared_data) -> list[str]:
    """Every HTML page of shared/data, extracted; plus the aeb-dev article bodies."""
    extract = ExtractText()
    texts = []
    for path in sorted(shared_data.rglob("*.html*")):
        raw = path.read_bytes()
        html = gzip.decompress(raw) if path.suffix == ".gz" else raw
        texts.append(extract({"id": path.name, "html": html})["text"])
    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    texts += [v["articleBody"] for v in truth.values() if v.get("articleBody")]
    assert len(texts) >= 200
    return texts


@pytest.fixture(scope="module")
def real_words(page_texts) -> list[str]:
    return [w for t in page_texts[:40] for w in t.split()]


def test_every_real_page_in_every_language_setting(page_texts):
    for text in page_texts:
        for lang in LANGS:
            _assert_same(text, lang)


def test_real_pages_through_the_dense_and_argsort_paths(page_texts, monkeypatch, word_path):
    """Shrinking the int64 budget forces NumPy's dense gram ids after every size and the stable argsort
    instead of the packed sort: the paths a huge vocabulary or a multi-million-word text take."""
    if word_path == "kernel":
        pytest.skip("NumPy path only")
    for budget in (2**40, 2**20):
        monkeypatch.setattr(quality_words, "_INT64_END", budget)
        for text in page_texts[::3]:
            _assert_same(text)


def test_empty_whitespace_and_tiny_documents(real_words):
    for text in ("", " ", "\n", "\n\n\n", " \t\r\n\x0b\x0c\u3000\u2028\x85 ", ".", "...", "- * -", "#"):
        for lang in LANGS:
            _assert_same(text, lang)
    for n in (1, 2, 3, 4, 5, 6, 9, 10, 11, 12):
        _assert_same(" ".join(real_words[100 : 100 + n]))
        _assert_same(" ".join(["the"] * n))  # one word repeated: every gram repeats
        _assert_same(" ".join(["!!"] * n))  # words that strip to nothing


def test_ties_of_the_most_frequent_ngram_pick_the_first_inserted():
    # (x, yy), (yy, zzz), (zzz, wwww) all occur twice; the first inserted is not the longest
    _assert_same("x yy zzz wwww x yy zzz wwww")
    # the later tie group has longer words and occurs first only after an unrelated gram
    _assert_same("q rrrrrr q rrrrrr a b a b ccccccc dd ccccccc dd q rrrrrr a b ccccccc dd")
    for n in (2, 3, 4):
        short = " ".join(f"s{i}" for i in range(n))
        long = " ".join(f"long{'o' * 9}{i}" for i in range(n))
        _assert_same(f"{short} z {long} z {short} z {long} z")
        _assert_same(f"{long} z {short} z {long} z {short} z")


def test_repeated_paragraphs_lines_and_ngrams(page_texts):
    para = next(t for t in page_texts if len(t) > 2000)[:1500]
    for sep in ("\n", "\n\n", "\n\n\n", "\n\n\n\n\n", " \n \n ", "\r\n\r\n"):
        _assert_same(sep.join([para, para, para[:700], para]))
    sentence = "The same ten words appear here again and again, over and over."
    _assert_same(" ".join([sentence] * 30) + " " + para)
    # overlapping repeats of 5..10-grams, periods 1..12
    words = para.split()
    for period in range(1, 13):
        _assert_same(" ".join((words[:period] * (60 // period + 2))[:60] + words[50:120]))


def test_seeded_random_documents_over_a_small_real_vocabulary(real_words):
    """Small vocabularies make every n-gram size repeat and tie; punctuation and odd whitespace
    exercise stripping, the lines, paragraphs and the C4 rules."""
    rng = random.Random(32)
    seps = [" "] * 12 + ["\n", "\n\n", "\n\n\n", "\t", "\u3000", "\xa0"]
    extras = ["...", "!", "?!", "\u2026", "[1]", "[edit]", "{", "lorem ipsum", "javascript", "#", "42", "-", "\u2022"]
    for _ in range(400):
        vocab = rng.sample(real_words, rng.choice((2, 3, 5, 20, 200))) + rng.sample(extras, 3)
        n = rng.choice((1, 2, 4, 5, 10, 11, 50, 300))
        text = "".join(rng.choice(vocab) + rng.choice(seps) for _ in range(n))
        _assert_same(text, rng.choice(LANGS))


def test_a_70k_word_vocabulary_takes_the_dense_ids(real_words):
    """~70,000 distinct words: 70k**5 does not fit int64, so gram ids are re-numbered densely; some
    spans repeat so that every signal is non-trivial."""
    base = sorted(set(real_words))[:500]
    words = [f"{base[i % len(base)]}{i // len(base)}" for i in range(70_000)]
    text = " ".join(words + words[1000:1400] + words[5:8] * 20 + words[:70])
    _assert_same(text)


def test_pathological_repeats_and_long_tokens():
    line = "Buy the best cheap watches online today. " * 25_000  # a 1 MB line
    _assert_same(line + "\n" + line)
    _assert_same("1 " * 200_000)  # every word without a letter
    _assert_same("x" * 300_000 + " and the end." * 5)  # one 300 KB word
    _assert_same("a." * 2_000 + " b c d.")  # sentence marks that are not followed by a space
    _assert_same(("word " * 250 + "x" * 1200 + " fin.\n") * 3)  # C4: a line with a word over 1,000 chars


def test_case_mapping_and_whitespace_outside_ascii():
    texts = [
        "ΟΔΟΣ ΟΔΟΣ ΟΔΟΣ ΟΔΟΣ ΟΔΟΣ ΟΔΟΣ. ΣΟΦΟΣ Σ ΑΣ'Σ ΑΣ.",  # Greek final sigma depends on neighbours
        "İstanbul İSTANBUL istanbul ISTANBUL. Straße STRASSE ẞ.",  # lower() that grows a word
        "Привет мир! Привет мир! Это тест, это тест.",
        "東京は 日本の 首都です。 東京は 日本の 首都です。",
        "مرحبا بالعالم. مرحبا بالعالم.",
        "a\u2028b\u2029c\x1cd\x1de\x1ef\x1fg\x85h\u200bi\u180ej\ufeffk",  # separators str.split does/doesn't cut at
        "e\u0301cole E\u0301COLE \U0001f600 \U0001f600 \U0001f600 ² ½ ⅰ Ⅰ Ⓐ _ __ 1_a",
    ]
    for text in texts:
        for lang in LANGS:
            _assert_same(text, lang)
            _assert_same(f"{text}\n\n{text}\n{text}", lang)


def test_stop_word_lists_are_counted_per_language():
    text = "Der Hund und die Katze. The dog and the cat, with THE bird! de la le et."
    for lang in (*STOP_WORDS, None, "zz"):
        _assert_same(text, lang)


def test_every_policy_phrase_contains_a_hint():
    """The C4 policy test looks for the phrases only on lines with one of the hints."""
    assert all(any(hint in phrase for hint in _POLICY_HINTS) for phrase in _POLICY)


def test_the_shortcuts_hold_for_every_code_point(word_path):
    """What lets `quality_signals` lower the whole text before splitting it, and count the words
    without a letter among the stripped lowered words instead of the text's tokens; and the kernel's
    letter test (alnum, not a decimal digit, not "_") is re's [^\\W\\d_] for every code point."""
    letter, space = re.compile(r"[^\W\d_]"), re.compile(r"\s")
    if word_path == "kernel":
        kernel = quality._kernel()
        for c in map(chr, range(sys.maxunicode + 1)):
            if not c.isspace():
                assert kernel.word_statistics(c, "", None)[3] == (letter.match(c) is None), hex(ord(c))
        return
    for c in map(chr, range(sys.maxunicode + 1)):
        lowered = c.lower()
        assert bool(space.match(c)) == c.isspace(), hex(ord(c))
        assert (lowered == c) if c.isspace() else not any(x.isspace() for x in lowered), hex(ord(c))
        assert bool(letter.search(c)) == bool(letter.search(lowered)), hex(ord(c))
        for text in (f"AΣ{c}A", f"A{c}ΣA", f"A'Σ'{c}'A"):  # final sigma looks past case-ignorable marks only
            assert text.lower().split() == [w.lower() for w in text.split()], hex(ord(c))
    assert not any(letter.match(c) for c in _PUNCT_STRIP)


def test_the_kernel_names_what_it_expects(word_path):
    if word_path == "numpy":
        pytest.skip("kernel only")
    with pytest.raises(TypeError, match=r"word_statistics\(text: str, strip_chars: str"):
        quality._kernel().word_statistics(["a", "list"], "", None)
    with pytest.raises(TypeError, match=r"stop_words must be str"):
        quality._kernel().word_statistics("a b", "", (1,))
