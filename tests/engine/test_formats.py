"""File formats: round trips, pushdown equal to Python filtering, and every kind of bad input."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import uuid

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from zephyr import counters
from zephyr.engine.expr import col
from zephyr.engine.io import (
    SchemaMismatchError,
    WriteStats,
    infer_format,
    read_batches,
    read_records,
    write_records,
)
from zephyr.errors import BadInputError

RECORDS = [
    {
        "id": f"doc-{i}",
        "text": ["héllo wörld ✓", "日本語のテキスト", "emoji 🎉 text", "plain ascii"][i % 4] + f" #{i}",
        "lang": ["en", "fr", "ja", "en", None][i % 5],
        "score": round(i / 37, 4),
        "n": i,
        "metadata": {"url": f"https://example.com/{i}", "tags": ["a", "b"][: i % 3], "depth": {"level": i % 2}},
    }
    for i in range(3000)
]

ALL_EXTENSIONS = ["jsonl", "json", "ndjson", "jsonl.gz", "jsonl.zst", "jsonl.bz2", "jsonl.xz", "parquet", "vortex"]
COMPRESSORS = {
    "jsonl.gz": gzip.compress,
    "jsonl.zst": lambda data: zstandard.ZstdCompressor(level=3).compress(data),
    "jsonl.bz2": bz2.compress,
    "jsonl.xz": lzma.compress,
}


@pytest.fixture(autouse=True)
def _fresh_counters():
    counters.reset()
    yield
    counters.reset()


def _jsonl_bytes(records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _no_temp_files(directory) -> bool:
    return not [name for name in os.listdir(directory) if name.startswith(".tmp")]


# ------------------------------------------------------------------------------------ names
@pytest.mark.parametrize(
    "path, expected",
    [
        ("a.jsonl", "jsonl"),
        ("gs://b/x/a.json.gz", "jsonl"),
        ("a.ndjson.zst", "jsonl"),
        ("A.JSONL.BZ2", "jsonl"),
        ("a.jsonl.xz", "jsonl"),
        ("s3://b/a.parquet", "parquet"),
        ("a.vortex", "vortex"),
    ],
)
def test_infer_format(path, expected) -> None:
    assert infer_format(path) == expected


@pytest.mark.parametrize("path", ["a.csv", "a.txt.gz", "a.parquet.gz", "noext"])
def test_infer_format_rejects_unknown_names_with_the_fix(path) -> None:
    with pytest.raises(BadInputError, match=r"format='jsonl'\|'parquet'\|'vortex'") as info:
        infer_format(path)
    assert path in str(info.value)


# ------------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("ext", ALL_EXTENSIONS)
def test_round_trip_local(tmp_path, ext) -> None:
    path = str(tmp_path / f"part.{ext}")
    stats = write_records(iter(RECORDS), path)
    assert stats == WriteStats(path=path, records=len(RECORDS), bytes=os.path.getsize(path))
    assert list(read_records(path)) == RECORDS
    batches = list(read_batches(path, batch_size=1000))
    assert all(b.num_rows <= 1000 for b in batches)
    assert [r for b in batches for r in b.to_pylist()] == RECORDS
    assert all(not pa.types.is_string_view(f.type) for b in batches for f in b.schema)
    assert _no_temp_files(tmp_path)


@pytest.mark.parametrize("ext", ["jsonl.zst", "jsonl.gz", "parquet", "vortex"])
def test_round_trip_through_fsspec_memory(ext) -> None:
    url = f"memory://zephyr-formats-{uuid.uuid4().hex}/out/part.{ext}"
    stats = write_records(RECORDS[:500], url)
    assert stats.records == 500 and stats.bytes > 0
    assert list(read_records(url)) == RECORDS[:500]
    kept = list(read_records(url, columns=["id"], filter=col("lang") == "fr"))
    assert kept == [{"id": r["id"]} for r in RECORDS[:500] if r["lang"] == "fr"]


def test_zstd_level_3_output_is_standard_zstd(tmp_path) -> None:
    path = tmp_path / "a.jsonl.zst"
    write_records(RECORDS, str(path))
    raw = zstandard.ZstdDecompressor().stream_reader(path.open("rb")).read()
    assert raw == _jsonl_bytes(RECORDS)


def test_gzip_output_is_standard_gzip(tmp_path) -> None:
    path = tmp_path / "a.jsonl.gz"
    write_records(RECORDS, str(path))
    assert gzip.decompress(path.read_bytes()) == _jsonl_bytes(RECORDS)


def test_empty_input_writes_nothing(tmp_path) -> None:
    for ext in ("jsonl.zst", "parquet", "vortex"):
        path = tmp_path / f"empty.{ext}"
        assert write_records(iter([]), str(path)) == WriteStats(path=str(path), records=0, bytes=0)
        assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_writes_record_batches_and_dicts_mixed(tmp_path) -> None:
    batch = pa.RecordBatch.from_pylist(RECORDS[:100])
    for ext in ("jsonl", "parquet", "vortex"):
        path = str(tmp_path / f"mixed.{ext}")
        stats = write_records([batch, *RECORDS[100:200], pa.RecordBatch.from_pylist(RECORDS[200:300])], path)
        assert stats.records == 300
        assert list(read_records(path)) == RECORDS[:300]


def test_failed_write_leaves_no_file(tmp_path) -> None:
    path = tmp_path / "out.jsonl.zst"

    def items():
        yield from RECORDS[:10]
        raise RuntimeError("upstream failure")

    with pytest.raises(RuntimeError, match="upstream failure"):
        write_records(items(), str(path))
    assert os.listdir(tmp_path) == []


def test_jsonl_reads_multi_member_gzip_and_multi_frame_zstd(tmp_path) -> None:
    a, b = _jsonl_bytes(RECORDS[:1000]), _jsonl_bytes(RECORDS[1000:])
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(a) + gzip.compress(b))
    cctx = zstandard.ZstdCompressor()
    (tmp_path / "m.jsonl.zst").write_bytes(cctx.compress(a) + cctx.compress(b))
    for name in ("m.jsonl.gz", "m.jsonl.zst"):
        assert list(read_records(str(tmp_path / name))) == RECORDS


def test_jsonl_tolerates_crlf_blank_lines_and_no_final_newline(tmp_path) -> None:
    path = tmp_path / "loose.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\r\n   \n{"a": 2}\n\n{"a": 3}')
    assert list(read_records(str(path))) == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_jsonl_line_longer_than_the_read_chunks(tmp_path) -> None:
    big = {"id": "big", "text": "x" * 3_000_000}
    records = [RECORDS[0], big, RECORDS[1]]
    for ext in ("jsonl", "jsonl.zst"):
        path = str(tmp_path / f"long.{ext}")
        write_records(records, path)
        assert list(read_records(path)) == records


def test_jsonl_columns_give_none_for_missing_fields(tmp_path) -> None:
    path = str(tmp_path / "a.jsonl")
    write_records([{"a": 1, "b": 2}, {"a": 3}], path)
    assert list(read_records(path, columns=["b", "a"])) == [{"b": 2, "a": 1}, {"b": None, "a": 3}]


# ----------------------------------------------------------------------------------- pushdown
FILTERS = [
    col("lang") == "en",
    (col("lang") == "en") & (col("score") > 40),
    (col("n") >= 2990) | (col("lang").is_null() & (col("n") < 30)),
    col("lang").isin(["fr", "ja"]) & ~(col("n") > 100),
    col("text").str_contains("🎉"),
    col("text").length() > 18,
    (col("n") / 7) > 420,
]


@pytest.mark.parametrize("ext", ["jsonl.zst", "parquet", "vortex"])
@pytest.mark.parametrize("expr", FILTERS, ids=repr)
def test_filter_and_columns_equal_python_filtering(tmp_path_factory, ext, expr) -> None:
    path = str(tmp_path_factory.getbasetemp() / f"pushdown.{ext}")
    if not os.path.exists(path):
        write_records(RECORDS, path)
    expected = [{"id": r["id"], "n": r["n"]} for r in RECORDS if expr.matches(r)]
    assert expected, "each filter should keep something"
    assert list(read_records(path, columns=["id", "n"], filter=expr)) == expected
    batches = list(read_batches(path, columns=["id", "n"], filter=expr, batch_size=256))
    assert [r for b in batches for r in b.to_pylist()] == expected
    assert list(read_records(path, filter=expr)) == [r for r in RECORDS if expr.matches(r)]


def test_parquet_filter_skips_row_groups(tmp_path) -> None:
    """The filter reaches the scan: row groups whose statistics exclude a match are not decoded."""
    path = tmp_path / "sorted.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), path, row_group_size=100)
    fragment = next(iter(pa.dataset.dataset(str(path)).get_fragments()))
    assert len(fragment.row_groups) == 30
    kept = fragment.subset(filter=(col("n") >= 2950).to_arrow())
    assert len(kept.row_groups) == 1
    assert [r["n"] for r in read_records(str(path), filter=col("n") >= 2950)] == list(range(2950, 3000))


@pytest.mark.parametrize("ext", ["parquet", "vortex"])
def test_filter_on_a_field_the_file_lacks_reads_it_as_null(tmp_path, ext) -> None:
    path = str(tmp_path / f"a.{ext}")
    write_records(RECORDS[:50], path)
    # a field read by value that the file lacks is an error, not a silent empty result (#17 item 3) ...
    with pytest.raises(BadInputError, match=r"reads field\(s\) 'nope', which the file does not have"):
        list(read_records(path, filter=col("nope") == 1))
    # ... while testing it for null reads it as null
    kept = list(read_records(path, columns=["n"], filter=col("nope").is_null() & (col("n") < 3)))
    assert kept == [{"n": 0}, {"n": 1}, {"n": 2}]


@pytest.mark.parametrize("ext", ["parquet", "vortex"])
def test_missing_column_names_the_file_and_its_columns(tmp_path, ext) -> None:
    path = str(tmp_path / f"a.{ext}")
    write_records(RECORDS[:5], path)
    with pytest.raises(BadInputError, match=r"no column 'txet'.*'text'") as info:
        list(read_records(path, columns=["id", "txet"]))
    assert path in str(info.value)


# ---------------------------------------------------------------------- heterogeneous writes
def test_parquet_schema_is_the_union_of_the_first_records(tmp_path) -> None:
    records = [{"a": 1}, {"b": "x", "a": 2}, {"c": None, "nested": {"p": 1}}, {"nested": {"q": "z"}}]
    path = str(tmp_path / "u.parquet")
    write_records(records, path)
    back = list(read_records(path))
    assert back[1] == {"a": 2, "b": "x", "c": None, "nested": None}
    assert back[3]["nested"] == {"p": None, "q": "z"}


def test_later_records_may_lack_fields_or_widen_int_to_float(tmp_path) -> None:
    first = [{"id": i, "score": 1.5, "meta": {"k": "v"}} for i in range(9000)]  # > one 8192-record block
    later = [{"id": 9000, "score": 2}, {"id": 9001, "meta": {}}]
    for ext in ("parquet", "vortex"):
        path = str(tmp_path / f"w.{ext}")
        assert write_records(first + later, path).records == 9002
        tail = list(read_records(path))[-2:]
        assert tail == [{"id": 9000, "score": 2.0, "meta": None}, {"id": 9001, "score": None, "meta": {"k": None}}]


@pytest.mark.parametrize("ext", ["parquet", "vortex"])
def test_new_field_after_the_first_block_names_field_and_records(tmp_path, ext) -> None:
    records = [{"id": i} for i in range(8192)] + [{"id": 8192, "surprise": "x"}]
    path = tmp_path / f"bad.{ext}"
    with pytest.raises(SchemaMismatchError, match=r"records 8193-8193: field 'surprise'.*schema=") as info:
        write_records(records, str(path))
    assert str(path) in str(info.value)
    assert not path.exists() and _no_temp_files(tmp_path)


def test_incompatible_type_names_the_field(tmp_path) -> None:
    records = [{"id": i, "score": 1} for i in range(8192)] + [{"id": 1, "score": "high"}]
    with pytest.raises(SchemaMismatchError, match=r"field 'score' is string here but int64"):
        write_records(records, str(tmp_path / "t.parquet"))
    with pytest.raises(SchemaMismatchError, match=r"field 'score' holds values of several types \(int, str\)"):
        write_records([{"score": 1}, {"score": "high"}], str(tmp_path / "t2.parquet"))


def test_explicit_schema_fixes_an_all_null_first_block(tmp_path) -> None:
    records = [{"id": i, "note": None} for i in range(8192)] + [{"id": 8192, "note": "late"}]
    path = str(tmp_path / "s.parquet")
    with pytest.raises(SchemaMismatchError, match="note"):
        write_records(records, path)
    schema = pa.schema([("id", pa.int64()), ("note", pa.string())])
    assert write_records(records, path, schema=schema).records == 8193
    assert list(read_records(path))[-1] == {"id": 8192, "note": "late"}


def test_jsonl_write_rejects_non_json_values_naming_the_field(tmp_path) -> None:
    with pytest.raises(TypeError, match=r"record 2 \(field 'blob'\) is not JSON-serializable"):
        write_records([{"a": 1}, {"a": 2, "blob": {1, 2}}], str(tmp_path / "x.jsonl"))
    with pytest.raises(TypeError, match="record 1 is a str"):
        write_records(["not a dict"], str(tmp_path / "y.jsonl"))


def test_read_batches_names_a_field_with_mixed_types(tmp_path) -> None:
    path = str(tmp_path / "mixed.jsonl")
    write_records([{"v": 1}, {"v": "one"}], path)
    assert list(read_records(path)) == [{"v": 1}, {"v": "one"}]  # records keep each value as it is
    with pytest.raises(BadInputError, match=r"records 1-2: field 'v' holds values of several types"):
        list(read_batches(path))


# ---------------------------------------------------------------------------------- bad input
def _write_truncated(tmp_path, ext) -> tuple[str, int]:
    """A real compressed file cut at 60% of its bytes; returns the path and the record count it held."""
    data = _jsonl_bytes(RECORDS)
    compressed = COMPRESSORS[ext](data)
    path = tmp_path / f"cut.{ext}"
    path.write_bytes(compressed[: int(len(compressed) * 0.6)])
    return str(path), len(RECORDS)


@pytest.mark.parametrize("ext", list(COMPRESSORS))
def test_truncated_compressed_jsonl_raises(tmp_path, ext) -> None:
    path, _ = _write_truncated(tmp_path, ext)
    with pytest.raises(BadInputError) as info:
        list(read_records(path))
    message = str(info.value)
    assert path in message
    assert "truncated" in message and "end marker" in message
    assert "lines 1-" in message or "no complete line" in message
    assert "on_bad_record='skip'" in message


@pytest.mark.parametrize("ext", list(COMPRESSORS))
def test_truncated_compressed_jsonl_skip_keeps_the_records_before(tmp_path, ext) -> None:
    path, total = _write_truncated(tmp_path, ext)
    kept = list(read_records(path, on_bad_record="skip"))
    assert kept == RECORDS[: len(kept)]  # an exact prefix: nothing invented, nothing reordered
    assert len(kept) < total
    if ext != "jsonl.bz2":  # bzip2 emits output per 900 kB block, so a cut file may yield nothing
        assert len(kept) > 0
    assert counters.snapshot() == {"bad_files/truncated": 1}


def test_truncated_zstd_is_detected_where_zstandards_stream_reader_is_silent(tmp_path) -> None:
    path, _ = _write_truncated(tmp_path, "jsonl.zst")
    with open(path, "rb") as handle:  # the trap this module avoids: no error, just less data
        silent = zstandard.ZstdDecompressor().stream_reader(handle, read_across_frames=True).read()
    assert 0 < len(silent) < len(_jsonl_bytes(RECORDS))
    with pytest.raises(BadInputError, match="zstd stream ends without its end marker"):
        list(read_batches(path))


def test_truncated_plain_jsonl_points_at_the_last_line(tmp_path) -> None:
    path = tmp_path / "cut.jsonl"
    data = _jsonl_bytes(RECORDS[:10])
    path.write_bytes(data[:-15])
    with pytest.raises(BadInputError, match=r"line 10: invalid JSON .*no newline: the file may be truncated"):
        list(read_records(str(path)))
    assert list(read_records(str(path), on_bad_record="skip")) == RECORDS[:9]
    assert counters.snapshot() == {"bad_records/invalid_json": 1}


BAD_LINES = [
    (b'{"id": 2, "text": "unterminated}', "invalid_json", r"invalid JSON"),
    (b'{"id": 2, "text": "caf\xe9"}', "invalid_utf8", r"invalid UTF-8 \(byte 22"),
    (b'["a", "list"]', "not_an_object", r"a JSON list where an object was expected"),
    (b'"a string"', "not_an_object", r"a JSON str where an object was expected"),
    (b"42", "not_an_object", r"a JSON int"),
    (b"null", "not_an_object", r"a JSON null"),
]


@pytest.mark.parametrize("ext", ["jsonl", "jsonl.zst", "jsonl.gz"])
@pytest.mark.parametrize("line, reason, pattern", BAD_LINES, ids=[b[1] + str(i) for i, b in enumerate(BAD_LINES)])
def test_bad_line_raises_naming_file_and_line(tmp_path, ext, line, reason, pattern) -> None:
    body = _jsonl_bytes(RECORDS[:3]) + line + b"\n" + _jsonl_bytes(RECORDS[3:6])
    path = tmp_path / f"bad.{ext}"
    path.write_bytes(COMPRESSORS.get(ext, lambda b: b)(body))
    with pytest.raises(BadInputError, match=pattern) as info:
        list(read_records(str(path)))
    message = str(info.value)
    assert message.startswith(f"{path}, line 4: ")
    assert f"bad_records/{reason}" in message and "on_bad_record='skip'" in message
    assert list(read_records(str(path), on_bad_record="skip")) == RECORDS[:6]
    assert counters.snapshot() == {f"bad_records/{reason}": 1}


def test_skip_counts_each_bad_line_across_chunks(tmp_path) -> None:
    lines = []
    for i, record in enumerate(RECORDS):
        lines.append(orjson.dumps(record))
        if i % 500 == 0:
            lines.extend([b"{broken", b"\xff\xfe{}", b"[1]"])
    path = tmp_path / "many.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n"))
    assert list(read_records(str(path), on_bad_record="skip")) == RECORDS
    assert counters.snapshot() == {
        "bad_records/invalid_json": 6,
        "bad_records/invalid_utf8": 6,
        "bad_records/not_an_object": 6,
    }


def test_json_array_file_gets_a_hint(tmp_path) -> None:
    path = tmp_path / "array.json"
    path.write_text('[{"a": 1}, {"a": 2}]\n')
    with pytest.raises(BadInputError, match=r"line 1: a JSON list .*JSON Lines"):
        list(read_records(str(path)))


@pytest.mark.parametrize("ext", ["jsonl.zst", "jsonl.gz", "parquet", "vortex"])
def test_empty_file_raises_and_skip_counts_it(tmp_path, ext) -> None:
    path = tmp_path / f"empty.{ext}"
    path.write_bytes(b"")
    with pytest.raises(BadInputError, match=r"the file is empty \(0 bytes\)") as info:
        list(read_records(str(path)))
    assert str(path) in str(info.value) and "bad_files/empty" in str(info.value)
    assert list(read_records(str(path), on_bad_record="skip")) == []
    assert list(read_batches(str(path), on_bad_record="skip")) == []
    assert counters.snapshot() == {"bad_files/empty": 2}


def test_empty_plain_jsonl_holds_no_records(tmp_path) -> None:
    # 0 bytes is a complete plain JSON Lines file (an empty shard's output); compressed, it is damage (above)
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert list(read_records(str(path))) == [] and list(read_batches(str(path))) == []


def test_valid_compressed_stream_of_nothing_is_not_an_error(tmp_path) -> None:
    path = tmp_path / "nothing.jsonl.gz"
    path.write_bytes(gzip.compress(b""))
    assert list(read_records(str(path))) == []


def test_misnamed_compression_is_reported_as_corrupt(tmp_path) -> None:
    path = tmp_path / "plain.jsonl.gz"
    path.write_bytes(_jsonl_bytes(RECORDS[:3]))
    with pytest.raises(BadInputError, match=r"gzip data is corrupt near compressed byte 0.*rename it"):
        list(read_records(str(path)))
    assert list(read_records(str(path), on_bad_record="skip")) == []
    assert counters.snapshot() == {"bad_files/corrupt": 1}


@pytest.mark.parametrize("ext", ["parquet", "vortex"])
def test_truncated_columnar_file_raises_and_skips(tmp_path, ext) -> None:
    good = tmp_path / f"good.{ext}"
    write_records(RECORDS, str(good))
    cut = tmp_path / f"cut.{ext}"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(BadInputError, match=rf"not a readable {ext} file") as info:
        list(read_records(str(cut)))
    assert str(cut) in str(info.value) and "bad_files/corrupt" in str(info.value)
    assert list(read_records(str(cut), on_bad_record="skip")) == []
    assert counters.snapshot() == {"bad_files/corrupt": 1}


def test_missing_file_is_a_clear_error(tmp_path) -> None:
    for ext in ("jsonl.zst", "parquet", "vortex"):
        with pytest.raises(BadInputError, match="no such file"):
            list(read_records(str(tmp_path / f"absent.{ext}")))
    with pytest.raises(BadInputError, match="memory://nowhere/absent.vortex: no such file"):
        list(read_records("memory://nowhere/absent.vortex"))


def test_option_values_are_checked() -> None:
    with pytest.raises(ValueError, match="on_bad_record must be 'raise' or 'skip'"):
        list(read_records("a.jsonl", on_bad_record="ignore"))
    with pytest.raises(ValueError, match="format must be one of"):
        list(read_records("a.jsonl", format="csv"))


# ------------------------------------------------------------------------- object storage
def test_every_format_through_a_real_s3_server(s3_env, monkeypatch) -> None:
    """moto's S3 server through s3fs and our fs layer: vortex is read by range through fsspec."""
    from zephyr.fs import open_url

    monkeypatch.setenv("ZEPHYR_REGION", "us-east-1")
    bucket = s3_env.create_bucket("us-east-1")
    expr = (col("lang") == "ja") & (col("n") < 400)
    expected = [{"id": r["id"]} for r in RECORDS[:800] if expr.matches(r)]
    for ext in ("jsonl.zst", "parquet", "vortex"):
        url = f"s3://{bucket}/formats/part.{ext}"
        assert write_records(RECORDS[:800], url).records == 800
        assert list(read_records(url)) == RECORDS[:800]
        assert list(read_records(url, columns=["id"], filter=expr)) == expected
    cut = f"s3://{bucket}/formats/cut.jsonl.zst"
    with open_url(cut, "wb", compression=None) as handle:
        handle.write(zstandard.ZstdCompressor().compress(_jsonl_bytes(RECORDS))[:5000])
    with pytest.raises(BadInputError, match=rf"^{cut}: the zstd stream ends without its end marker"):
        list(read_records(cut))


# ------------------------------------------------------------------------------- the path format
def test_the_path_format_reads_each_file_as_a_record_naming_it(tmp_path, scratch) -> None:
    from zephyr import Dataset, execution

    for name in ("a.warc.gz", "b.pdf", "sub/c.bin"):
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / name).write_bytes(b"x" * 10)
    with execution(backend="local", scratch=scratch, progress=False, summary=False):
        run = Dataset.from_files(str(tmp_path / "in"), format="path").execute()
    assert run.outputs == [{"path": str(tmp_path / "in" / n)} for n in ("a.warc.gz", "b.pdf", "sub/c.bin")]
    assert run.stages[0].shards == 3 and run.stages[0].bytes_in == 30
    with pytest.raises(ValueError, match="the 'path' format is only read"):
        write_records([{"path": "x"}], str(tmp_path / "out.txt"), format="path")
    with pytest.raises(ValueError, match="choose one of jsonl, parquet, vortex, arrow$"):
        Dataset.from_list([{"a": 1}]).write(str(tmp_path / "part-{shard}.txt"), format="path")
