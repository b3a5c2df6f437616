"""What a sink leaves on disk (issue #17 items 6, 7, 8, 11): one schema per folder, a file for every shard,
directory inputs, and no reader ever taking a killed writer's temporary file for data."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from zephyr import Dataset, execution
from zephyr.engine.io import SchemaMismatchError, read_records
from zephyr.engine.io.partitioned import read_partition_manifests

RECORDS = [
    {"id": 1, "text": "a"},
    {"id": 2, "text": "b", "filter_reason": "short"},
    {"id": 3, "text": "c", "score": 0.5},
]


@pytest.fixture
def local(scratch):
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        yield


@pytest.mark.parametrize("fmt", ["parquet", "vortex"])
def test_a_written_folder_has_one_schema(local, tmp_path, fmt):
    # 4 shards over 3 records: fields present in some shards only, and one empty shard
    paths = (
        Dataset.from_list(RECORDS, num_shards=4)
        .write(str(tmp_path / fmt / f"part-{{shard:05d}}.{fmt}"))
        .execute()
        .outputs
    )
    assert len(paths) == 4
    rows = sorted(Dataset.from_files(str(tmp_path / fmt / f"*.{fmt}")).collect(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "text": "a", "filter_reason": None, "score": None},
        {"id": 2, "text": "b", "filter_reason": "short", "score": None},
        {"id": 3, "text": "c", "filter_reason": None, "score": 0.5},
    ]
    if fmt == "parquet":
        frame = pl.read_parquet(str(tmp_path / fmt / "*.parquet"))
        assert frame.height == 3 and frame.columns == ["id", "text", "filter_reason", "score"]
        table = pads.dataset(str(tmp_path / fmt), format="parquet").to_table()
        assert table.num_rows == 3 and table.column("filter_reason").to_pylist().count("short") == 1


def test_a_partitioned_parquet_output_has_one_schema(local, tmp_path):
    records = [{"lang": "en", "id": 1}, {"lang": "fr", "id": 2, "extra": "x"}, {"lang": "en", "id": 3, "score": 0.5}]
    pattern = str(tmp_path / "p" / "{lang}" / "part-{shard}.parquet")
    Dataset.from_list(records, num_shards=3).write(pattern, partition_by="lang").execute()
    table = pads.dataset(str(tmp_path / "p"), format="parquet").to_table()
    assert table.num_rows == 3 and {"extra", "score"} <= set(table.schema.names)


def test_schema_given_is_every_file_schema(local, tmp_path):
    schema = pa.schema(
        [("id", pa.int64()), ("text", pa.string()), ("filter_reason", pa.string()), ("score", pa.float64())]
    )
    Dataset.from_list(RECORDS, num_shards=4).write_parquet(str(tmp_path / "p" / "part-{shard}.parquet"), schema=schema)
    assert pads.dataset(str(tmp_path / "p"), format="parquet").schema == schema
    assert pl.read_parquet(str(tmp_path / "p" / "*.parquet")).height == 3


def test_types_that_cannot_be_unified_name_the_field_and_the_fix(local, tmp_path):
    with pytest.raises(SchemaMismatchError, match=r"disagree on field 'v': int64 in .* string in .*pass schema="):
        Dataset.from_list([{"v": 1}, {"v": "x"}], num_shards=2).write_parquet(
            str(tmp_path / "p" / "part-{shard}.parquet")
        )


@pytest.mark.parametrize("ext", ["jsonl", "jsonl.zst", "parquet", "vortex"])
def test_an_empty_shard_writes_its_empty_file(local, tmp_path, ext):
    pattern = str(tmp_path / "out" / f"part-{{shard:05d}}-of-{{total:05d}}.{ext}")
    paths = Dataset.from_list([{"id": 1}], num_shards=3).write(pattern).execute().outputs
    assert [Path(p).name for p in paths] == [f"part-0000{i}-of-00003.{ext}" for i in range(3)]
    assert all(Path(p).is_file() for p in paths)
    assert [r for p in paths for r in read_records(p)] == [{"id": 1}]
    assert Dataset.from_files(str(tmp_path / "out")).count() == 1


def _keep_but_shard_2(record: dict) -> bool:
    return record["id"] not in (4, 5)  # from_list(8 records, 4 shards): shard 2 holds ids 4 and 5


@pytest.mark.parametrize("ext", ["jsonl.zst", "parquet"])
def test_a_partitioned_output_tells_an_empty_shard_from_a_lost_file(local, tmp_path, ext):
    records = [{"id": i, "lang": "en" if i % 2 else "de", "text": f"t{i}"} for i in range(8)]
    pattern = str(tmp_path / "out" / "docs" / "lang={lang}" / f"part-{{shard:05d}}-of-{{total:05d}}.{ext}")
    paths = (
        Dataset.from_list(records, num_shards=4)
        .filter(_keep_but_shard_2)
        .write(pattern, partition_by="lang")
        .execute()
        .outputs
    )
    assert len(paths) == 6  # shards 0, 1, 3 x {de, en}; shard 2 wrote no file
    manifests = read_partition_manifests(pattern)
    assert [m["shard"] for m in manifests] == [0, 1, 2, 3]  # every shard finished, the empty one too
    assert manifests[2]["records"] == 0 and manifests[2]["files"] == []
    listed = sorted(f["path"] for m in manifests for f in m["files"])
    assert listed == sorted(paths)
    for m in manifests:
        for f in m["files"]:
            rows = list(read_records(f["path"]))
            assert len(rows) == f["records"] and {r["lang"] for r in rows} == {f["value"]}
    assert sum(m["records"] for m in manifests) == 6
    # beside the root, not in it: the folder reads as before in polars and pyarrow.dataset
    assert (tmp_path / "out" / "docs.partitions" / "shard-00002-of-00004.json").is_file()
    assert not [p for p in (tmp_path / "out" / "docs").rglob("*") if p.is_file() and p.suffix == ".json"]
    if ext == "parquet":
        assert pl.read_parquet(str(tmp_path / "out" / "docs") + "/").height == 6
        table = pads.dataset(str(tmp_path / "out" / "docs"), format="parquet", partitioning="hive").to_table()
        assert table.num_rows == 6 and sorted(set(table.column("lang").to_pylist())) == ["de", "en"]
    else:
        assert pl.read_ndjson(sorted(paths)).height == 6
    assert Dataset.from_files(str(tmp_path / "out" / "docs")).count() == 6
    # a rerun with another shard count: its manifests are the ones read (the old ones stay beside them)
    Dataset.from_list(records, num_shards=2).write(pattern, partition_by="lang").execute()
    assert [(m["shard"], m["total"], m["records"]) for m in read_partition_manifests(pattern)] == [(0, 2, 4), (1, 2, 4)]
    paths = sorted(f["path"] for m in read_partition_manifests(pattern) for f in m["files"])
    # a lost file is now visible: listed by its shard's manifest, missing on disk
    os.remove(paths[0])
    missing = [f["path"] for m in read_partition_manifests(pattern) for f in m["files"] if not Path(f["path"]).exists()]
    assert missing == [paths[0]]


def test_a_partitioned_write_removes_dead_temp_files_in_every_partition(local, tmp_path):
    pattern = str(tmp_path / "out" / "{lang}" / "part-{shard:05d}.jsonl")
    dead = "0123456789abcdef0123456789abcdef"
    # a killed attempt of shard 1 left temp files in partitions this run's shard 1 writes (en) and does not (xx)
    for lang in ("en", "xx"):
        (tmp_path / "out" / lang).mkdir(parents=True)
        (tmp_path / "out" / lang / f".tmp-{dead}-part-00001.jsonl").write_text('{"id": 99}\n')
    other = tmp_path / "out" / "xx" / f".tmp-{dead}-notes.jsonl"  # not a temp file of this output's shards
    other.write_text("{}\n")
    Dataset.from_list([{"id": i, "lang": "en"} for i in range(4)], num_shards=2).write(
        pattern, partition_by="lang"
    ).execute()
    assert sorted(p.name for p in (tmp_path / "out").rglob(".tmp-*")) == [other.name]
    assert Dataset.from_files(str(tmp_path / "out")).count() == 4


def test_a_directory_is_read_recursively_without_hidden_files(local, tmp_path, caplog):
    Dataset.from_list([{"i": i} for i in range(4)], num_shards=2).write_jsonl(
        str(tmp_path / "data" / "a" / "p-{shard}.jsonl")
    )
    Dataset.from_list([{"i": 9}], num_shards=1).write_parquet(str(tmp_path / "data" / "b" / "p-{shard}.parquet"))
    (tmp_path / "data" / "README.md").write_text("not data")
    (tmp_path / "data" / "_SUCCESS").write_text("")
    (tmp_path / "data" / "a" / ".tmp-0123456789abcdef0123456789abcdef-p-0.jsonl").write_text('{"i": 100}\n')
    with caplog.at_level(logging.WARNING, logger="zephyr"):
        values = sorted(r["i"] for r in Dataset.from_files(str(tmp_path / "data") + "/").collect())
    assert values == [0, 1, 2, 3, 9]
    assert "skipped 1 file(s) whose format the name does not tell: .md (1)" in caplog.text
    assert sorted(r["i"] for r in Dataset.from_files(str(tmp_path / "data" / "**")).collect()) == [0, 1, 2, 3, 9]
    assert sorted(r["i"] for r in Dataset.from_files(str(tmp_path / "data" / "a" / "*.jsonl")).collect()) == [
        0,
        1,
        2,
        3,
    ]


_SLOW_WRITER = textwrap.dedent("""
    import sys, time
    from zephyr import Dataset, execution

    def slow(record):
        if record["shard"] == 1 and record["i"] >= 8500:  # after the first 8192-record block opened the file
            time.sleep(0.002)
        return record

    if __name__ == "__main__":
        out, scratch = sys.argv[1], sys.argv[2]
        records = [{"shard": s, "i": i} for s in range(3) for i in range(9000)]
        with execution(backend="local", scratch=scratch, summary=False, progress=False):
            Dataset.from_list(records, num_shards=3).map(slow).write_jsonl(out + "/part-{shard:05d}.jsonl.zst")
""")


def test_a_run_killed_while_writing_leaves_nothing_a_rerun_or_reader_takes_for_data(tmp_path):
    script = tmp_path / "slow_writer.py"
    script.write_text(_SLOW_WRITER)
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, str(script), str(out), str(scratch)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob(".tmp-*part-00001.jsonl.zst")):
            assert proc.poll() is None and time.monotonic() < deadline, "the writer never wrote shard 1"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # kill -9 while shard 1 is being written
    finally:
        proc.wait()
    assert list(out.glob(".tmp-*")), "the killed run left its temporary file"
    with execution(backend="local", scratch=str(tmp_path / "reader"), summary=False, progress=False):
        # a next step's glob reads the finished shard 0 only, not the dead attempt's temporary file
        assert Dataset.from_files(str(out / "*")).count() == 9000
    rerun = subprocess.run([sys.executable, str(script), str(out), str(scratch)], env=env)
    assert rerun.returncode == 0
    clean = tmp_path / "clean"
    with execution(backend="local", scratch=str(tmp_path / "scratch2"), summary=False, progress=False):
        records = [{"shard": s, "i": i} for s in range(3) for i in range(9000)]
        Dataset.from_list(records, num_shards=3).write_jsonl(str(clean / "part-{shard:05d}.jsonl.zst"))
    assert (
        sorted(p.name for p in out.iterdir())
        == sorted(p.name for p in clean.iterdir())
        == [f"part-0000{i}.jsonl.zst" for i in range(3)]
    )
    for name in (f"part-0000{i}.jsonl.zst" for i in range(3)):
        assert list(read_records(str(out / name))) == list(read_records(str(clean / name)))


def test_a_rerun_with_fewer_shards_removes_the_earlier_runs_files(local, tmp_path, capsys):
    """Writing 4 shards, then 2 to the same pattern, left part-00002/3 of the first run: a reader of the
    folder got 60 records instead of the new run's 10. The new run's files replace the old run's."""
    pattern = str(tmp_path / "out" / "part-{shard:05d}.jsonl")
    Dataset.from_list([{"i": i} for i in range(100)], num_shards=4).write_jsonl(pattern)
    (tmp_path / "out" / "notes.txt").write_text("the user's own file")
    (tmp_path / "out" / "part-00009.jsonl.bak").write_text("not of the pattern")
    Dataset.from_list([{"i": i} for i in range(10)], num_shards=2).write_jsonl(pattern)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "notes.txt",
        "part-00000.jsonl",
        "part-00001.jsonl",
        "part-00009.jsonl.bak",
    ]
    assert sorted(r["i"] for r in Dataset.from_files(str(tmp_path / "out" / "*.jsonl")).collect()) == list(range(10))
    assert "removed 2 file(s) an earlier run wrote" in capsys.readouterr().err


def test_a_partitioned_rerun_with_fewer_shards_removes_the_earlier_runs_files(local, tmp_path):
    pattern = str(tmp_path / "out" / "{lang}" / "part-{shard:05d}-of-{total:05d}.parquet")
    records = [{"id": i, "lang": "en" if i % 3 else "fr"} for i in range(30)]
    Dataset.from_list(records, num_shards=3).write(pattern, format="parquet", partition_by="lang").execute()
    Dataset.from_list(records[:10], num_shards=1).write(pattern, format="parquet", partition_by="lang").execute()
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.parquet")) == [
        "en/part-00000-of-00001.parquet",
        "fr/part-00000-of-00001.parquet",
    ]
    assert pl.read_parquet(tmp_path / "out" / "**" / "*.parquet").height == 10
