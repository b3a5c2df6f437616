"""Lowering: logical ops become stages of a tagged input, one compiled pipeline and a tagged output."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import Dataset
from zephyr.engine import ops as O
from zephyr.engine.context import ExecutionConfig
from zephyr.engine.inputs import FileInput, GroupInput, JoinInput, ListInput, ReshardInput
from zephyr.engine.outputs import Collect, FileSink, PartitionedSink, Scatter
from zephyr.engine.plan import _LOWERINGS, plan
from zephyr.errors import PlanError

CONFIG = ExecutionConfig(backend="local")


def test_every_logical_op_has_one_lowering():
    defined = {c for c in vars(O).values() if dataclasses.is_dataclass(c) and c.__module__ == O.__name__}
    ops = defined - set(typing.get_args(O.Source))
    assert {O.Map, O.GroupBy, O.Join, O.Sink} <= ops and set(_LOWERINGS) == ops


def test_worker_knows_no_logical_op():
    source = Path(__file__).parents[2].joinpath("zephyr/engine/worker.py").read_text()
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(name and name.endswith(".ops") for name in imported)
    assert "isinstance" not in source


def test_stages_are_tagged_inputs_and_outputs():
    left = Dataset.from_list(range(10), num_shards=2).map(abs)
    right = Dataset.from_list(range(5), num_shards=1)
    ds = (
        left.sorted_merge_join(right, left_key=abs, right_key=abs)
        .group_by(lambda r: r, lambda k, v: k)
        .reshard(3)
        .filter(bool)
    )
    stages = plan(ds, CONFIG).stages
    assert [type(s.input) for s in stages] == [ListInput, ListInput, JoinInput, GroupInput, ReshardInput]
    assert [type(s.output) for s in stages] == [Scatter, Scatter, Scatter, Scatter, Collect]
    assert stages[2].upstream == (0, 1) and stages[4].upstream == (3,)
    assert [type(step) for step in stages[0].ops.steps] == [O.Map]
    assert [type(step) for step in stages[4].ops.steps] == [O.Filter]
    assert [s.output.spec.tag for s in stages[:2]] == [0, 1]


def test_arrow_fast_paths_are_chosen_at_plan_time(tmp_path):
    pq.write_table(pa.table({"user": [1, 2, 1], "ts": [3, 2, 1]}), tmp_path / "a.parquet")
    files = Dataset.from_files(str(tmp_path / "*.parquet"))

    grouped = plan(files.group_by("user", lambda k, v: k, sort_by="ts"), CONFIG).stages[0]
    assert isinstance(grouped.input, FileInput) and grouped.input.batch_rows == 65536
    assert isinstance(grouped.output, Scatter) and grouped.output.batches and grouped.ops.emits_batches

    batched = plan(files.map_batches(lambda b: b, batch_size=7).write(str(tmp_path / "o-{shard}.parquet")), CONFIG)
    stage = batched.stages[0]
    assert isinstance(stage.input, FileInput) and stage.input.batch_rows == 7
    assert (
        isinstance(stage.output, FileSink)
        and stage.output.batches
        and [type(s) for s in stage.ops.steps] == [O.MapBatches]
    )

    by_records = plan(files.map(dict).group_by("user", lambda k, v: k), CONFIG).stages[0]
    assert isinstance(by_records.input, FileInput) and by_records.input.batch_rows is None
    assert isinstance(by_records.output, Scatter) and not by_records.output.batches

    partitioned = plan(files.write(str(tmp_path / "{user}/p-{shard}.jsonl"), partition_by="user"), CONFIG)
    assert isinstance(partitioned.stages[0].output, PartitionedSink)


def test_expression_filters_and_selects_are_pushed_into_the_reader(tmp_path):
    from zephyr import col

    pq.write_table(pa.table({"a": [1, 2], "b": [3, 4]}), tmp_path / "a.parquet")
    ds = Dataset.from_files(str(tmp_path / "*.parquet")).filter(col("a") > 1).select("a").filter(col("a") < 5)
    stage = plan(ds, CONFIG).stages[0]
    assert isinstance(stage.input, FileInput) and stage.ops.steps == ()
    assert stage.input.source.columns == ("a",)
    assert repr(stage.input.source.filter) == '((col("a") > 1) & (col("a") < 5))'
    after_map = plan(Dataset.from_files(str(tmp_path / "*.parquet")).map(dict).filter(col("a") > 1), CONFIG)
    assert [type(s) for s in after_map.stages[0].ops.steps] == [O.Map, O.Filter]


def test_a_write_must_end_the_pipeline(tmp_path):
    ds = Dataset.from_list([{"a": 1}]).write(str(tmp_path / "o-{shard}.jsonl")).map(dict)
    with pytest.raises(PlanError, match=r"write_jsonl\(.*\) must be the last op"):
        plan(ds, CONFIG)
