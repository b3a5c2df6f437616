"""Differential tests (issue #28 item 5): generated records, shard counts, memory budgets and chains of ops
(map, filter, flat_map, group_by with and without sort_by and combiner, deduplicate, inner and left
joins, sort, union, reshard, take), run on the local and processes backends and compared with the plain
Python reference of chain_model.py.

`make test` runs a bounded, repeatable profile (the same examples every run); `make test-slow` a longer,
randomized one. Every counterexample either found stays as an explicit test in test_counterexamples.py.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter

import pytest
from chain_model import (
    NARROW,
    Deduplicate,
    Example,
    FieldAbsent,
    Filter,
    FlatMap,
    GroupBy,
    Join,
    Map,
    Reshard,
    Sort,
    Union,
    Unorderable,
    canon,
    ref_order,
)
from differential_harness import FAST, SLOW, tiny_buffers
from hypothesis import given, settings
from hypothesis import strategies as st

from zephyr import BadInputError, execution
from zephyr.engine.sortkey import UnorderableKeysError

# ------------------------------------------------------------------------------------------ data

_SPECIAL_FLOATS = [0.0, -0.0, 1.0, 2.0, -1.0, 0.5, 2.5, math.inf, -math.inf, math.nan, 1e300, 5e-324]
_BIG_INTS = [2**53 + 1, 2**63, 2**64, -(2**63) - 1, 2**70]
numbers = st.one_of(
    st.integers(-3, 3),
    st.integers(-3, 3).map(float),  # integral floats beside the equal ints
    st.booleans(),
    st.sampled_from(_SPECIAL_FLOATS),
    st.sampled_from(_BIG_INTS + [float(b) for b in _BIG_INTS]),
    st.floats(allow_nan=False, width=64),
)
texts = st.text(alphabet=st.sampled_from("ab\x00é😀\ud800"), max_size=3)
nested = st.recursive(
    st.one_of(st.none(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=2), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("pq"), inner, max_size=2)),
    max_leaves=5,
)


@st.composite
def keys(draw, kind: str):
    """A key of one kind of example: numbers, str, or a mix Python cannot order (groups need only ==)."""
    if kind == "number":
        return draw(numbers)
    if kind == "str":
        return draw(texts)
    return draw(st.one_of(numbers, texts, st.none(), st.tuples(st.integers(0, 2), texts), st.binary(max_size=2)))


@st.composite
def sort_values(draw, kind: str):
    if kind == "number":
        return draw(numbers)
    if kind == "str":
        return draw(texts)
    if kind == "tuple":
        return draw(st.tuples(st.integers(0, 2), st.one_of(texts, st.none())))
    return draw(st.one_of(numbers, texts))  # "mixed": the engine must refuse to order these


@st.composite
def records(draw, n_max: int = 30, start: int = 0):
    key_kind = draw(st.sampled_from(["number", "number", "str", "mixed"]))
    sort_kind = draw(st.sampled_from(["number", "number", "str", "tuple", "mixed"]))
    n = draw(st.integers(0, n_max))
    out = []
    for i in range(start, start + n):
        record: dict = {"i": i}
        if draw(st.integers(0, 9)):  # a field is missing one time in ten
            record["k"] = draw(keys(key_kind))
        if draw(st.integers(0, 9)):
            record["s"] = draw(
                st.one_of(st.none(), sort_values(sort_kind)) if draw(st.booleans()) else sort_values(sort_kind)
            )
        if draw(st.integers(0, 9)):
            record["x"] = draw(st.integers(-5, 20))
        if draw(st.integers(0, 3)) == 0:
            record["v"] = draw(nested)
        out.append(record)
    return out


@st.composite
def ops(draw, ordered: bool):
    """One op; deduplicate only while the order is known (it keeps the first record in input order)."""
    shards = st.integers(1, 4)
    choices = ["map", "filter", "flat_map", "group_by", "join", "sort", "union", "reshard"]
    if ordered:
        choices.append("deduplicate")
    name = draw(st.sampled_from(choices))
    if name == "map":
        return Map(draw(st.integers(-2, 3)))
    if name == "filter":
        return Filter(draw(st.integers(0, 2)))
    if name == "flat_map":
        return FlatMap(draw(st.integers(1, 3)))
    if name == "group_by":
        combiner = draw(st.booleans())
        sort_field = None if combiner else draw(st.sampled_from([None, "s", "x"]))
        return GroupBy(draw(st.booleans()), sort_field, combiner, draw(shards))
    if name == "deduplicate":
        return Deduplicate(draw(st.booleans()), draw(shards))
    if name == "join":
        right = draw(records(n_max=12, start=1000))
        right = tuple({"j": r["i"], **({"k": r["k"]} if "k" in r else {}), "y": r.get("x", 0)} for r in right)
        return Join(draw(st.sampled_from(["inner", "left"])), right, draw(shards), draw(shards))
    if name == "sort":
        return Sort(
            draw(st.sampled_from(["s", "x", "k"])),
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.one_of(st.none(), shards)),
        )
    if name == "union":
        return Union(tuple(draw(records(n_max=10, start=2000))), draw(shards), draw(st.one_of(st.none(), shards)))
    return Reshard(draw(shards))


@st.composite
def examples(draw, backends: tuple[str, ...] = ("local",)):
    chain = []
    ordered = True
    for _ in range(draw(st.integers(1, 4))):
        op = draw(ops(ordered))
        chain.append(op)
        ordered = ordered and isinstance(op, NARROW)
    backend = draw(st.sampled_from(backends))
    return Example(
        records=tuple(draw(records())),
        shards=draw(st.integers(1, 4)),
        chain=tuple(chain),
        backend=backend,
        memory=draw(st.sampled_from(["16MB", "64MB", "1GB"])),
        tiny_buffers=backend == "local" and draw(st.booleans()),
        take=draw(st.one_of(st.none(), st.integers(0, 8))),
        source=draw(st.sampled_from(["list", "list", "parquet"])),
    )


# ------------------------------------------------------------------------------------------ run


def check(example: Example) -> None:
    """Run `example` on the engine and hold its output against the reference."""
    with (
        tempfile.TemporaryDirectory(prefix="zephyr-differential-") as folder,
        tiny_buffers(example.tiny_buffers),
        execution(
            backend=example.backend,
            workers=2,
            scratch=f"{folder}/scratch",
            memory_per_worker=example.memory,
            max_user_retries=0,
            progress=False,
            summary=False,
        ),
    ):
        records, source = example.source_records(folder)
        try:
            ref = example.reference(records)
        except Unorderable:
            with pytest.raises(UnorderableKeysError):
                _run(example, source)
            return
        except FieldAbsent as absent:
            with pytest.raises(BadInputError, match=f"no record has field '{absent}'"):
                _run(example, source)
            return
        got = _run(example, source)
    _compare(example, got, ref)


def _run(example: Example, source) -> list:
    ds = example.build(source)  # a sort samples its keys now
    return ds.take(example.take) if example.take is not None else ds.collect()


def _compare(example: Example, got: list, ref) -> None:
    want = ref.records
    if example.take is not None:
        n = min(example.take, len(want))
        assert len(got) == n, (len(got), n)
        if ref.ordered:
            assert list(map(canon, got)) == list(map(canon, want[:n]))
        else:
            assert not Counter(map(canon, got)) - Counter(map(canon, want))  # some n of them
        if ref.sorted_by is not None:
            field, descending = ref.sorted_by
            order = [ref_order(r.get(field)) for r in want[:n]]
            assert [ref_order(r.get(field)) for r in got] == order
        return
    assert Counter(map(canon, got)) == Counter(map(canon, want))
    if ref.ordered:
        assert list(map(canon, got)) == list(map(canon, want))
    if ref.sorted_by is not None:
        field, descending = ref.sorted_by
        order = [ref_order(r.get(field)) for r in got]
        assert order == sorted(order, reverse=descending)


@FAST
@given(examples())
def test_chains_on_the_local_backend_match_the_reference(example):
    check(example)


@settings(FAST, max_examples=12)
@given(examples(backends=("processes",)))
def test_chains_on_the_processes_backend_match_the_reference(example):
    check(example)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@SLOW
@given(examples(backends=("local", "local", "processes")))
def test_chains_match_the_reference_longer(example):
    check(example)
