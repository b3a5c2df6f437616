"""WARC/WET/ARC reading on warcio's real test files, including the broken ones."""

from __future__ import annotations

import gzip
import io

import pytest

from zephyr import counters
from zephyr.operators.warc import ReadWarc, WarcReadConfig, read_warc


def _read(path, config: WarcReadConfig | None = None):
    config = config if config is not None else WarcReadConfig()
    counters.reset()
    docs = list(read_warc(str(path), config))
    return docs, counters.reset()


def test_gzip_per_record_warc_yields_html_response(shared_data):
    docs, seen = _read(shared_data / "warc" / "example.warc.gz")
    assert len(docs) == 1
    doc = docs[0]
    assert doc["id"] == "<urn:uuid:a9c51e3e-0221-11e7-bf66-0242ac120005>"
    assert doc["url"] == "http://example.com/"
    assert "<title>Example Domain</title>" in doc["html"]  # gzip Content-Encoding decoded
    assert doc["metadata"]["http_status"] == 200
    assert doc["source"].endswith("example.warc.gz")
    # warcinfo x2, request x2 and a revisit are skipped, and counted
    assert seen == {"warc/records": 6, "warc/skipped_type": 5, "warc/documents": 1}


def test_chunked_transfer_encoding_is_decoded(shared_data):
    docs, _ = _read(shared_data / "warc" / "example-iana.org-chunked.warc")
    assert len(docs) == 1
    assert docs[0]["html"].lstrip().startswith("<!doctype html>")  # no chunk-size line left


def test_non_200_and_non_html_are_skipped_with_counters(shared_data):
    docs, seen = _read(shared_data / "warc" / "example-bad.warc.gz.bad")
    assert [d["url"] for d in docs] == ["http://example.com?example=1"]
    assert seen["warc/skipped_status"] == 1  # the 302 to iana.org
    docs, seen = _read(shared_data / "warc" / "post-test.warc.gz")
    assert docs == [] and seen["warc/skipped_non_html"] == 3  # application/json responses
    docs, seen = _read(shared_data / "warc" / "post-test.warc.gz", WarcReadConfig(html_only=False))
    assert len(docs) == 3 and '"args"' in docs[0]["html"]


def test_truncated_warc_counts_malformed_and_keeps_earlier_records(shared_data, caplog):
    docs, seen = _read(shared_data / "warc" / "example-trunc.warc")
    assert len(docs) == 1  # the record before the damage survives
    assert seen["warc/malformed"] == 1
    assert "example-trunc.warc" in caplog.text and "malformed" in caplog.text


def test_every_real_file_is_read_without_raising(shared_data):
    total = {}
    for path in sorted((shared_data / "warc").iterdir()):
        _, seen = _read(path)
        counters.merge(total, seen)
    assert total["warc/documents"] >= 10
    assert total["warc/malformed"] >= 2  # example-trunc.warc and bad.arc


def test_arc_files_go_through_warcio(shared_data):
    docs, seen = _read(shared_data / "warc" / "example.arc.gz")
    assert [d["url"] for d in docs] == ["http://example.com/"]
    assert "Example Domain" in docs[0]["html"]
    docs, seen = _read(shared_data / "warc" / "bad.arc")
    assert docs == [] and seen["warc/malformed"] == 3  # records with broken lengths/status lines


def test_wet_conversion_records(tmp_path, shared_data):
    warcio = pytest.importorskip("warcio")
    from warcio.warcwriter import WARCWriter

    text = gzip.decompress((shared_data / "web-pages" / "heise.de.lithium.html.gz").read_bytes())[:2000]
    path = tmp_path / "sample.warc.wet.gz"
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for i, lang in enumerate(("deu", "eng")):
            record = writer.create_warc_record(
                f"http://example.org/{i}",
                "conversion",
                payload=io.BytesIO(text.decode("utf-8", "replace").encode("utf-8")),
                warc_headers_dict={"Content-Type": "text/plain", "WARC-Identified-Content-Language": lang},
            )
            writer.write_record(record)
    assert warcio.__name__
    docs, seen = _read(path)
    assert [d["url"] for d in docs] == ["http://example.org/0", "http://example.org/1"]
    assert docs[0]["text"] and "html" not in docs[0]
    assert docs[1]["metadata"]["identified_language"] == "eng"
    assert seen == {"warc/records": 2, "warc/documents": 2}


def test_read_warc_step_validates_its_input(shared_data):
    step = ReadWarc()
    assert len(list(step({"path": str(shared_data / "warc" / "example.warc")}))) == 1
    with pytest.raises(KeyError, match="path_field"):
        step({"file": "x.warc.gz"})
    with pytest.raises(ValueError, match="max_payload_bytes"):
        WarcReadConfig(max_payload_bytes=0)


def test_resynchronises_at_next_gzip_member_after_corruption(shared_data, tmp_path):
    good = (shared_data / "warc" / "example.warc.gz").read_bytes()
    other = (shared_data / "warc" / "example-wget-bad-target-uri.warc.gz").read_bytes()
    garbage = b"\x1f\x8b\x08\x00" + bytes(range(256)) * 3  # a gzip header followed by junk
    spliced = tmp_path / "spliced.warc.gz"
    spliced.write_bytes(good + garbage + other)
    docs, seen = _read(spliced)
    assert [d["url"] for d in docs] == ["http://example.com/", "http://example.com/"]
    assert docs[1]["metadata"]["offset"] > len(good)  # offsets stay file-absolute after the resync
    assert seen["warc/malformed"] == 1 and seen["warc/documents"] == 2
    truncated = tmp_path / "truncated.warc.gz"
    truncated.write_bytes(good[: len(good) // 2] + other)  # a record cut in the middle of its member
    docs, seen = _read(truncated)
    assert len(docs) == 1 and seen["warc/malformed"] == 1
