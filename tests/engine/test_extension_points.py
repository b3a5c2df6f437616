"""Where a newcomer extends the engine (docs/architecture.md): a file format is one `Format` plus one line in the
format registry, a backend one class plus one line in the backend registry; the executor asks outputs, inputs
and backends only what their protocols say."""

from __future__ import annotations

import ast
import csv
import io
import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from zephyr import Dataset, execution
from zephyr.engine.backend_registry import BACKENDS, BackendSpec, RayOptions
from zephyr.engine.backends.api import Backend, Outcome
from zephyr.engine.context import ExecutionConfig
from zephyr.engine.expr import Expr, col
from zephyr.engine.io import FORMATS, infer_format, read_records, write_records
from zephyr.engine.io.format import Format
from zephyr.engine.io.sink import CountingSink, WriteStats
from zephyr.engine.worker import ShardTask, run_task
from zephyr.fs import atomic_write, open_url

EXECUTOR = Path(__file__).resolve().parents[2] / "zephyr" / "engine" / "executor.py"


# ------------------------------------------------------------------------------------- a new format
def _write_tsv(blocks: Iterator[Any], url: str) -> WriteStats:
    records, fields = 0, None
    with atomic_write(url, "wb", compression=None) as raw:
        sink = CountingSink(raw)
        text = io.TextIOWrapper(sink, encoding="utf-8", newline="")
        writer = None
        for block in blocks:
            rows = block.to_pylist() if isinstance(block, pa.RecordBatch) else block
            for row in rows:
                if writer is None:
                    fields = list(row)
                    writer = csv.DictWriter(text, fields, delimiter="\t")
                    writer.writeheader()
                writer.writerow(row)
                records += 1
        text.flush()
        text.detach()
    return WriteStats(url, records, sink.count)


def _read_tsv(
    url: str, columns: Sequence[str] | None, filter: Expr | None, skip: bool, compression: str | None
) -> Iterator[list[dict]]:
    keep = filter.compile() if filter is not None else None
    with open_url(url, "rt", compression=None) as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if keep is None or keep(r) is True]
    yield [{c: r.get(c) for c in columns} for r in rows] if columns is not None else rows


TSV = Format("tsv", (".tsv",), write=_write_tsv, record_lists=_read_tsv)


@pytest.fixture
def tsv_registered(monkeypatch):
    monkeypatch.setitem(FORMATS, "tsv", TSV)  # the one registration a new format needs


def test_a_format_registered_once_is_read_written_and_filtered_everywhere(tsv_registered, scratch, tmp_path):
    records = [{"id": str(i), "lang": "en" if i % 3 else "fr"} for i in range(20)]
    assert infer_format("data/part-0.tsv") == "tsv"
    assert write_records(records[:5], str(tmp_path / "one.tsv")).records == 5
    assert list(read_records(str(tmp_path / "one.tsv"), columns=["id"])) == [{"id": str(i)} for i in range(5)]
    with execution(backend="local", scratch=scratch, progress=False, summary=False):
        written = Dataset.from_list(records, num_shards=3).write(str(tmp_path / "out" / "part-{shard}.tsv")).execute()
        assert len(written.outputs) == 3
        french = Dataset.from_files(str(tmp_path / "out")).filter(col("lang") == "fr").collect()
    assert sorted(french, key=lambda r: int(r["id"])) == [r for r in records if r["lang"] == "fr"]


def test_an_unregistered_format_names_the_registered_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown output format 'tsv': choose one of jsonl, parquet, vortex"):
        Dataset.from_list([{"a": 1}]).write(str(tmp_path / "part-{shard}.tsv"), format="tsv")


# ------------------------------------------------------------------------------------ a new backend
class ReversedBackend(Backend):
    """Holds up to three tasks and runs them in this process, last submitted first, when waited on."""

    capacity = 3

    def __init__(self) -> None:
        self.queued: deque[ShardTask] = deque()

    @classmethod
    def create(cls, config: Any) -> ReversedBackend:
        return cls()

    def submit(self, task: ShardTask) -> None:
        self.queued.append(task)

    def wait(self, timeout: float) -> list[Outcome]:
        outcomes = []
        while self.queued:
            task = self.queued.pop()
            try:
                outcomes.append(Outcome(task, result=run_task(task)))
            except Exception as error:  # noqa: BLE001 - reported to the executor
                outcomes.append(Outcome(task, error=error))
        return outcomes

    def close(self) -> None:
        self.queued.clear()


def test_a_backend_registered_by_name_runs_pipelines(monkeypatch, scratch):
    spec = BackendSpec("reversed", __name__, "ReversedBackend", "test: last task first", in_process=True)
    monkeypatch.setitem(BACKENDS, "reversed", spec)  # the one registration a new backend needs
    with execution(backend="reversed", scratch=scratch, progress=False, summary=False):
        counts = (
            Dataset.from_list(list(range(100)), num_shards=7)
            .group_by(lambda x: x % 5, lambda k, xs: (k, len(list(xs))))
            .collect()
        )
    assert sorted(counts) == [(k, 20) for k in range(5)]


def test_an_unknown_backend_names_the_registered_ones():
    with pytest.raises(ValueError, match="unknown backend 'threads': choose one of local, processes, ray"):
        ExecutionConfig(backend="threads")


def test_ray_settings_are_the_ray_backends_options_under_their_old_spellings():
    config = ExecutionConfig(ray_mode="tasks", ray_address="auto")
    assert config.options(RayOptions) == RayOptions(address="auto", mode="tasks")
    with execution(config, ray_pool_idle_s=5, backend="local") as inner:
        assert inner.options(RayOptions) == RayOptions(address="auto", mode="tasks", pool_idle_s=5)
    assert ExecutionConfig().options(RayOptions) == RayOptions()
    assert ExecutionConfig(backend_options=RayOptions(dashboard=True)).options(RayOptions).dashboard


# ------------------------------------------------------------------------------ what the executor asks
def test_the_executor_asks_only_the_protocols():
    """No getattr/hasattr probes, and isinstance only of errors: outputs, inputs and backends say what they are."""
    tree = ast.parse(EXECUTOR.read_text())
    probes = [
        (node.lineno, node.func.id)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
    ]
    assert probes == []
    checked = {
        ast.unparse(node.args[1])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
    }
    assert all("Error" in name or name == "KeyboardInterrupt" for name in checked), checked


def test_an_output_pattern_without_a_folder_writes_in_the_working_folder(monkeypatch, scratch, tmp_path):
    """The run lock went into a folder named after the pattern's fixed part ("part-"), made for it."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with execution(backend="local", scratch=scratch, progress=False, summary=False):
        written = Dataset.from_list([{"a": 1}, {"a": 2}], num_shards=2).write_jsonl("part-{shard}.jsonl")
    assert sorted(written) == ["part-0.jsonl", "part-1.jsonl"]
    assert sorted(p.name for p in work.iterdir()) == ["part-0.jsonl", "part-1.jsonl"]


def test_live_counts_are_read_while_the_stream_runs():
    from zephyr.engine.inputs import ListInput, SourceShard, records_read_so_far, reset_live_counts
    from zephyr.engine.task import ShardResult

    reset_live_counts()
    shard = SourceShard(0, "list[0:10]", records=tuple(range(10)))
    result = ShardResult(0, 0)
    stream = ListInput((shard,), 10).open(ShardTask("", 0, 0, 0, ""), result)
    assert list(itertools.islice(stream, 4)) == [0, 1, 2, 3]
    assert records_read_so_far() == 4
    stream.close()
    assert result.records_in == 4


def _tag_with_shard(records, context):
    for index, record in enumerate(records):
        yield (context.shard, context.num_shards, index, record)


def test_a_map_shard_function_gets_its_shard_as_an_argument(scratch):
    with execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False):
        tagged = Dataset.from_list(list("abcdef"), num_shards=3).map_shard(_tag_with_shard, with_context=True).collect()
    assert tagged == [(0, 3, 0, "a"), (0, 3, 1, "b"), (1, 3, 0, "c"), (1, 3, 1, "d"), (2, 3, 0, "e"), (2, 3, 1, "f")]
