"""Deterministic annotation pools: the `size` documents with the smallest hash of (seed, id).

A hash rank rather than a random draw makes the pool a pure function of the corpus, the seed and
the size: the same on every run, whatever the sharding or worker count, and a larger pool contains
every smaller one (growing a pool relabels nothing already labeled).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import xxhash

__all__ = ["pool_rank", "sample_pool", "sample_pool_dataset", "split_holdout"]


def pool_rank(doc_id: Any, seed: int) -> int:
    """The 64-bit rank of a document in the pool order for `seed`."""
    return xxhash.xxh3_64_intdigest(f"{seed}\x00{doc_id}".encode("utf-8", "surrogatepass"))


def _rank_key(doc: dict[str, Any], seed: int, id_field: str) -> tuple[int, str]:
    doc_id = doc.get(id_field)
    if doc_id is None:
        raise ValueError(
            f"Cannot sample an annotation pool: a record has no {id_field!r} field (fields: {sorted(doc)}). "
            "Give every document an id, or set id_field in the config."
        )
    return pool_rank(doc_id, seed), str(doc_id)  # the id breaks (astronomically rare) hash ties


def sample_pool(
    docs: Iterable[dict[str, Any]], size: int, *, seed: int = 0, id_field: str = "id"
) -> list[dict[str, Any]]:
    """The pool from an in-memory iterable, in pool order (ascending rank)."""
    return heapq.nsmallest(size, docs, key=lambda d: _rank_key(d, seed, id_field))


@dataclass(frozen=True)
class _ShardPool:
    """map_shard step: a shard's own `size` smallest-ranked documents (a superset of its share of the pool)."""

    size: int
    seed: int
    id_field: str

    def __call__(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        yield from sample_pool(records, self.size, seed=self.seed, id_field=self.id_field)


def sample_pool_dataset(dataset: Any, size: int, *, seed: int = 0, id_field: str = "id") -> list[dict[str, Any]]:
    """The pool of a `zephyr.Dataset`: each worker keeps its shard's `size` best ranks, the driver merges.

    Moves at most `size` documents per shard to the driver, whatever the corpus size.
    """
    candidates = dataset.map_shard(_ShardPool(size, seed, id_field)).collect()
    return sample_pool(candidates, size, seed=seed, id_field=id_field)


def split_holdout(ids: Iterable[Any], fraction: float, *, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """(train ids, held-out ids): an id is held out when its hash falls in the lowest `fraction`.

    Deterministic per id, so relabeling or growing the pool never moves a document across the split.
    Guarantees at least one id on each side when there are two or more.
    """
    ids = list(ids)
    cut = int(fraction * 2**64)
    ranks = {i: xxhash.xxh3_64_intdigest(f"holdout\x00{seed}\x00{i}".encode("utf-8", "surrogatepass")) for i in ids}
    held = [i for i in ids if ranks[i] < cut]
    train = [i for i in ids if ranks[i] >= cut]
    if len(ids) >= 2 and not held:
        first = min(train, key=ranks.__getitem__)
        held, train = [first], [i for i in train if i != first]
    elif len(ids) >= 2 and not train:
        last = max(held, key=ranks.__getitem__)
        train, held = [last], [i for i in held if i != last]
    return train, held
