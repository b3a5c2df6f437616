"""A small real pipeline on the engine: WARC -> extract -> language -> quality -> PII -> dedup."""

from __future__ import annotations

from zephyr import Dataset, execution
from zephyr.operators import (
    ExtractConfig,
    ExtractText,
    LanguageId,
    PiiRedactor,
    QualityFilter,
    ReadWarc,
    dedup_documents,
    keep,
)


def test_warc_to_filtered_documents(shared_data, scratch):
    files = sorted(str(p) for p in (shared_data / "warc").iterdir())
    source = Dataset.from_list([{"path": f} for f in files], num_shards=3)
    pipeline = (
        source.flat_map(ReadWarc())
        .map(ExtractText(config=ExtractConfig(min_text_chars=50)))
        .map_shard(LanguageId(languages=("en",)).map_shard)
        .map(QualityFilter())
        .map(PiiRedactor())
    )
    with execution(backend="local", scratch=scratch, summary=False):
        result = pipeline.execute()
        deduped = dedup_documents(pipeline).filter(lambda d: d["dup_keep"]).collect()
    docs = result.outputs
    c = result.counters
    # every real HTML 200 response became a document; broken files were counted, not fatal
    assert c["warc/documents"] == len(docs) >= 10
    assert c["warc/malformed"] >= 2 and c["warc/skipped_status"] >= 1 and c["warc/skipped_non_html"] == 3
    assert c["extract/documents"] == len(docs)
    assert all(d["lang"] == "en" for d in docs if d["text"])
    assert all("quality_signals" in d and "html" not in d for d in docs)
    iana = next(d for d in docs if "iana.org" in d["url"])
    assert "key ceremonies" in iana["text"] and "iana.org" in iana["url"]  # the home page's news items
    # the example.com pages are tiny: the quality rules must say why they go
    tiny = next(d for d in docs if d["url"].startswith("http://example.com"))
    assert tiny["filter_reason"] == "gopher_too_few_words"
    assert all(not keep(d) for d in docs if d["quality_signals"]["words"] < 50)
    # the same example.com page is in many files: exact dedup keeps one per distinct text
    assert len(deduped) == len({d["dup_cluster"] for d in deduped}) < len(docs)


def test_warc_dataset_one_shard_per_file(shared_data, scratch):
    from zephyr.operators import warc_dataset

    pattern = str(shared_data / "warc" / "example*.warc.gz")
    with execution(backend="local", scratch=scratch, summary=False):
        result = warc_dataset(pattern).map(ExtractText(config=ExtractConfig(min_text_chars=50))).execute()
    assert len(result.outputs) == result.counters["warc/documents"] == 4  # 6 files; two hold only resource records
    assert all("Example Domain" in d["metadata"]["title"] for d in result.outputs if "example.com" in d["url"])
