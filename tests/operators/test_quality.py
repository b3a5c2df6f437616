"""Gopher / C4 / FineWeb rules on real article text, real full-page text, and targeted edits of them."""

from __future__ import annotations

import gzip
import json

import pytest
from selectolax.lexbor import LexborHTMLParser

from zephyr import counters
from zephyr.operators.extract import html_to_text
from zephyr.operators.quality import (
    C4Quality,
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
    QualityFilter,
    quality_signals,
)


@pytest.fixture(scope="module")
def english_articles(shared_data):
    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    english_sites = (
        "nytimes.com",
        "latimes.com",
        "cnn.com",
        "reuters.com",
        "smithsonianmag.com",
        "quantamagazine.org",
        "livescience.com",
        "cnbc.com",
        "politifact.com",
        "spokesman.com",
        "aljazeera.com",
        "thesun.co.uk",
    )
    return [v["articleBody"] for v in truth.values() if any(s in v["url"] for s in english_sites)]


def _full_page_text(path) -> str:
    """What a naive extractor returns: every text node of the body, navigation and all."""
    tree = LexborHTMLParser(gzip.decompress(path.read_bytes()).decode("utf-8", "replace"))
    for node in reversed(tree.css("script, style, noscript")):
        node.decompose()
    return tree.body.text(separator="\n") if tree.body else ""


def test_clean_english_articles_pass(english_articles):
    assert len(english_articles) >= 12
    reasons = [QualityFilter()({"text": t}).get("filter_reason") for t in english_articles]
    assert sum(r is None for r in reasons) >= 0.85 * len(reasons), reasons


def test_naive_full_page_text_mostly_fails(shared_data):
    pages = sorted((shared_data / "web-pages").glob("*.html.gz"))[::4]
    reasons = [QualityFilter()({"text": _full_page_text(p)}).get("filter_reason") for p in pages]
    assert sum(r is not None for r in reasons) >= 0.8 * len(reasons), reasons
    # repeated navigation lines are what trips Wikipedia's full page; its main content passes
    wiki = shared_data / "web-pages" / "en.wikipedia.org.tsne.html.gz"
    assert QualityFilter()({"text": _full_page_text(wiki)})["filter_reason"] == "gopher_rep_dup_line_frac"
    assert "filter_reason" not in QualityFilter()({"text": html_to_text(gzip.decompress(wiki.read_bytes()))})


def test_german_page_fails_english_stop_words_unless_disabled(shared_data):
    text = html_to_text(gzip.decompress((shared_data / "web-pages" / "heise.de.lithium.html.gz").read_bytes()))
    assert QualityFilter()({"text": text})["filter_reason"] == "gopher_stop_words"
    rules = (GopherRepetition(), GopherQuality(min_stop_words=None), C4Quality(), FineWebQuality())
    assert "filter_reason" not in QualityFilter(rules=rules)({"text": text})
    # with the language known, the German stop-word list applies and the page passes
    tagged = QualityFilter()({"text": text, "lang": "de"})
    assert "filter_reason" not in tagged and tagged["quality_signals"]["stop_words_lang"] == "de"
    # a language without a list skips the rule rather than failing everything
    assert QualityFilter()({"text": text, "lang": "sw"})["quality_signals"]["stop_words"] is None


def test_german_web_pages_pass_with_their_language(shared_data):
    from zephyr.operators.langid import LanguageId

    pages = [p for p in sorted((shared_data / "web-pages").glob("*.de.*html.gz"))][:12]
    docs = LanguageId().batch([{"text": html_to_text(gzip.decompress(p.read_bytes()))} for p in pages])
    german = [d for d in docs if d["lang"] == "de"]
    assert len(german) >= 8
    reasons = [QualityFilter()(d).get("filter_reason") for d in german]
    assert "gopher_stop_words" not in reasons, reasons


def _reason(text: str, rule) -> str | None:
    return rule.check(quality_signals(text))


def test_each_rule_reports_its_stable_reason(english_articles):
    article = max(english_articles, key=len)
    lines = article.split("\n")
    assert _reason(article, GopherRepetition()) is None
    assert _reason(article, GopherQuality()) is None
    assert _reason(article, C4Quality()) is None
    assert _reason(article, FineWebQuality()) is None
    # repetition: the same paragraph block three times
    assert _reason("\n".join(lines[:6] * 3), GopherRepetition()) == "gopher_rep_dup_line_frac"
    words = article.split()
    assert _reason(" ".join(words[:40]), GopherQuality()) == "gopher_too_few_words"
    assert _reason(" ".join(w[:2] for w in words[:300]), GopherQuality()) == "gopher_short_mean_word_length"
    assert _reason(" ".join("#" + w for w in words[:300]), GopherQuality()) == "gopher_hash_ratio"
    assert _reason("\n".join("- " + ln for ln in lines if ln), GopherQuality()) == "gopher_bullet_lines"
    assert _reason(" ".join(w + " ..." for w in words[:300]), GopherQuality()) == "gopher_ellipsis_ratio"
    assert _reason("\n".join(ln[:-1] + "…" for ln in lines if ln), GopherQuality()) == "gopher_ellipsis_lines"
    assert _reason(" ".join("1234 5678 " + w for w in words[:300]), GopherQuality()) == "gopher_alpha_words"
    assert _reason(article + "\nLorem ipsum dolor sit amet, consectetur.", C4Quality()) == "c4_lorem_ipsum"
    assert _reason(article + "\nThe config is {a: 1} in this file.", C4Quality()) == "c4_curly_bracket"
    assert _reason(" ".join(words[:300]), C4Quality()) == "c4_too_few_sentences"  # one line, no end punct
    assert _reason("\n".join(w for w in words[:300]), FineWebQuality()) == "fineweb_line_punct_ratio"
    short_lines = "\n".join(" ".join(words[i : i + 3]) + "." for i in range(0, 600, 3))
    assert _reason(short_lines, FineWebQuality()) == "fineweb_short_line_ratio"
    assert _reason(article + "\n" + lines[0], FineWebQuality()) == "fineweb_char_dup_ratio"
    listy = "\n".join(" ".join(words[i : i + 2]) + "." for i in range(0, 600, 2))
    lenient = FineWebQuality(max_short_lines_ratio=1.0, max_dup_line_char_frac=1.0)
    assert _reason(listy, lenient) == "fineweb_list_ratio"


def test_ngram_signals_measure_repetition(english_articles):
    article = english_articles[0]
    clean = quality_signals(article)
    spam = quality_signals(article + (" buy cheap watches online now today" * 60))
    assert spam["dup_5gram_char_frac"] > 0.15 > clean["dup_5gram_char_frac"]
    assert spam["top_2gram_char_frac"] > clean["top_2gram_char_frac"]
    assert _reason(article + (" buy cheap watches online now today" * 60), GopherRepetition()).startswith("gopher_rep_")


def test_filter_fields_counters_and_signal_reuse(english_articles):
    counters.reset()
    qf = QualityFilter(all_reasons=True)
    good = qf({"id": "a", "text": english_articles[0]})
    assert "filter_reason" not in good and good["quality_reasons"] == []
    assert set(good["quality_signals"]) >= {"words", "dup_line_frac", "c4_sentences", "short_lines_ratio"}
    bad = qf({"id": "b", "text": "too short"})
    assert bad["filter_reason"] == "gopher_too_few_words" and len(bad["quality_reasons"]) >= 2
    # stored signals are reused: different thresholds, no recomputation
    reused = QualityFilter(rules=(GopherQuality(min_words=1, min_stop_words=None),))({**bad, "filter_reason": None})
    assert reused["quality_signals"] is bad["quality_signals"]
    kept = QualityFilter()({"id": "c", "text": "x", "filter_reason": "lang_not_allowed"})
    assert kept["filter_reason"] == "lang_not_allowed"
    seen = counters.reset()
    assert seen["quality/passed"] == 2 and seen["quality/dropped/gopher_too_few_words"] == 1
    with pytest.raises(ValueError, match="n in 2..4"):
        GopherRepetition(top_ngram_char_frac=((7, 0.1),))
