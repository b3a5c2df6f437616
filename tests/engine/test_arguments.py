"""Arguments are checked when the plan is built, with the fix in the message; field names work as keys.

A user's `a.sorted_merge_join(b, left_key="k", right_key="k")` planned, then failed inside the worker
(`'str' object is not callable`), was retried and reported as the user's own code; `write_parquet(...,
partition_by="lang")` was a TypeError. Each case here failed that way before.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from zephyr import Dataset, col, execution

LEFT = [{"k": i % 5, "left": i} for i in range(20)]
RIGHT = [{"k": k, "right": f"r{k}"} for k in (1, 3, 3, 7)]


@pytest.fixture(autouse=True)
def _local():
    with execution(backend="local", summary=False, progress=False):
        yield


def _oracle_join(left, right, lk, rk, how="inner"):
    out = []
    for a in left:
        matches = [b for b in right if b[rk] == a[lk]]
        out += [{**a, **b} for b in matches] or ([a] if how == "left" else [])
    return out


def _key(r):
    return tuple(sorted((k, str(v)) for k, v in r.items()))


@pytest.mark.parametrize("how", ["inner", "left"])
def test_sorted_merge_join_takes_field_names(how):
    a, b = Dataset.from_list(LEFT, num_shards=3), Dataset.from_list(RIGHT, num_shards=2)
    got = a.sorted_merge_join(b, left_key="k", right_key="k", how=how).collect()
    assert sorted(got, key=_key) == sorted(_oracle_join(LEFT, RIGHT, "k", "k", how), key=_key)
    by_expr = a.sorted_merge_join(b, left_key=col("k"), right_key=lambda r: r["k"], how=how).collect()
    assert sorted(by_expr, key=_key) == sorted(got, key=_key)


def test_join_on_differently_named_fields_over_parquet(tmp_path: Path):
    Dataset.from_list(LEFT, num_shards=2).write_parquet(str(tmp_path / "l" / "part-{shard:05d}.parquet"))
    renamed = [{"key": r["k"], "right": r["right"]} for r in RIGHT]
    Dataset.from_list(renamed).write_parquet(str(tmp_path / "r" / "part-{shard:05d}.parquet"))
    a, b = Dataset.from_files(str(tmp_path / "l")), Dataset.from_files(str(tmp_path / "r"))
    got = a.sorted_merge_join(b, left_key="k", right_key="key").collect()
    assert sorted(got, key=_key) == sorted(_oracle_join(LEFT, renamed, "k", "key"), key=_key)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a, b: a.sorted_merge_join(b, left_key=3, right_key="k"), r"left_key must be a function, got int 3"),
        (lambda a, b: a.sorted_merge_join(b, left_key="k", right_key="-k"), r"right_key='-k'.*Join on the field"),
        (lambda a, b: a.sorted_merge_join(b, left_key="k", right_key="k", how="outer"), r"how must be 'inner' or"),
        (
            lambda a, b: a.sorted_merge_join(b, left_key="k", right_key="k", combine=lambda x: x),
            r"combine is called with 2 positional arguments.*combine=lambda left, right",
        ),
        (lambda a, b: a.group_by("k", lambda items: 1), r"reducer is called with 2 .*def reducer\(key, items\)"),
        (lambda a, b: a.group_by(["k", "left"], lambda k, i: 1), r"lambda r: \(r\['k'\], r\['left'\]\)"),
        (lambda a, b: a.group_by("k", "sum"), r"group_by: reducer must be a function, got str 'sum'"),
        (lambda a, b: a.map("left"), r"map: fn must be a function, got str 'left'"),
        (lambda a, b: a.filter("k > 1"), r"filter: predicate must be a function.*col\('lang'\)"),
        (lambda a, b: a.flat_map(lambda x, y: x), r"flat_map: fn is called with one argument"),
        (lambda a, b: a.deduplicate(5), r"group_by: key must be a function, got int 5"),
    ],
)
def test_wrong_arguments_fail_when_the_plan_is_built(call, message):
    a, b = Dataset.from_list(LEFT), Dataset.from_list(RIGHT)
    with pytest.raises((TypeError, ValueError), match=message):
        call(a, b)  # no terminal call: the error comes from building the plan, before any worker


def test_callables_without_a_signature_are_accepted():
    assert Dataset.from_list([" a ", "b "]).map(str.strip).collect() == ["a", "b"]
    assert Dataset.from_list([1, 2, 3]).map(abs).count() == 3


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "vortex"])
def test_write_methods_take_partition_by(tmp_path: Path, fmt: str):
    records = [{"id": i, "lang": "en" if i % 3 else "fr"} for i in range(12)]
    suffix = "jsonl.zst" if fmt == "jsonl" else fmt
    pattern = str(tmp_path / "{lang}" / f"part-{{shard:05d}}.{suffix}")
    paths = getattr(Dataset.from_list(records, num_shards=2), f"write_{fmt}")(pattern, partition_by="lang")
    assert sorted(Path(p).parent.name for p in paths) == ["en", "en", "fr", "fr"]
    for lang in ("en", "fr"):
        got = Dataset.from_files(str(tmp_path / lang / f"*.{suffix}")).collect()
        assert sorted(r["id"] for r in got) == [r["id"] for r in records if r["lang"] == lang]
    if fmt == "parquet":
        assert pq.read_table(paths[0]).num_rows > 0


def test_partitioned_write_refuses_a_schema_it_would_not_apply(tmp_path: Path):
    import pyarrow as pa

    with pytest.raises(ValueError, match="schema= is not applied to partitioned writes"):
        Dataset.from_list([{"lang": "en"}]).write(
            str(tmp_path / "{lang}" / "part-{shard:05d}.parquet"), partition_by="lang", schema=pa.schema([])
        )
