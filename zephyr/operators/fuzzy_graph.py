"""Fuzzy dedup stages 4-5 on the engine: connected components of the similarity graph, then
star clustering inside each component (why: :mod:`zephyr.operators.fuzzy_dedup`'s docstring).

Also the stage-file helpers both modules use: a stage writes parquet parts under its folder and a
done marker (``_DONE.json``) once complete.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from zephyr import counters
from zephyr.engine.dataset import Dataset
from zephyr.fs import join
from zephyr.operators.fuzzy_lsh import first, second
from zephyr.staged import StagedWork

counters.internal("fuzzy_dedup/cc_unsettled")  # how far a round is from done, not a property of the data

__all__ = [
    "DONE",
    "connected_components",
    "node_summary",
    "priority",
    "route_to_components",
    "star_clusters",
    "write_stage",
]

DONE = "_DONE.json"
# A connected-components round's done marker carries the layout version of its files (rounds are
# the same work for any settings); "2" follows fuzzy_dedup's work-dir format.
_ROUND_KIND = "fuzzy-dedup-cc-round"
_ROUND_VERSION = "cc-format-2"


def write_stage(ds: Dataset, out_dir: str) -> tuple[list[str], dict[str, int]]:
    """Write `ds` as parquet under `out_dir`; return (written paths, the run's counters).

    The counters carry the stage's figures (documents, edges, convergence).
    """
    pattern = join(out_dir, "part-{shard:05d}-of-{total:05d}.parquet")
    run = ds.write(pattern, format="parquet").execute()
    return list(run.outputs), dict(run.counters)


# --------------------------------------------------------------------------- stage 4: components


def both_directions(edge: dict) -> Iterator[tuple[Any, Any]]:
    """An undirected edge as two directed ones, so each endpoint's group sees the other."""
    yield (edge["a"], edge["b"])
    yield (edge["b"], edge["a"])


def large_star(node: Any, neighbours: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """Link every larger neighbour of `node` to the smallest id of its closed neighbourhood.

    Also counts (``fuzzy_dedup/cc_unsettled``) whether `node` breaks the star-forest shape: more
    than one smaller neighbour, or a smaller and a larger one. A round in which no node is
    unsettled started from the fixed point.
    """
    smallest = None
    previous = None
    smaller = larger = 0
    for _, other in neighbours:  # sorted ascending
        if other == previous:
            continue
        previous = other
        if smallest is None:
            smallest = other if other < node else node
        if other < node:
            smaller += 1
        else:
            larger += 1
            yield (other, smallest)  # keyed by the larger endpoint, for small-star
    if smaller > 1 or (smaller and larger):
        counters.increment("fuzzy_dedup/cc_unsettled")


def small_star(node: Any, neighbours: Iterable[tuple[Any, Any]]) -> Iterator[dict]:
    """Link `node` and all its (smaller) neighbours to the smallest of them."""
    smallest = None
    previous = None
    for _, other in neighbours:  # sorted ascending
        if other == previous:
            continue
        previous = other
        if smallest is None:
            smallest = other
        else:
            yield {"a": smallest, "b": other}
    if smallest is not None:
        yield {"a": smallest, "b": node}


def connected_components(
    edges: Dataset | Sequence[str],
    *,
    work_dir: str,
    max_iterations: int = 64,
    num_shards: int | None = None,
) -> tuple[list[str], int]:
    """Connected components of an undirected graph of records {"a", "b"} (a != b), on the engine.

    `edges` is a Dataset or a list of parquet files. Returns (parquet files of the converged star
    edges {"a": component minimum, "b": every other member}, rounds run). Each round is one
    large-star and one small-star `group_by`, written to ``work_dir/iter-NNNN/``; a rerun skips
    rounds whose ``_DONE.json`` exists. Node ids must be all str or all int. The last round is
    the one that finds nothing left to change.
    """
    paths: list[str] | None = None
    for iteration in range(1, max_iterations + 1):
        out_dir = join(work_dir, f"iter-{iteration:04d}")
        round_ = functools.partial(_star_round, edges, paths, out_dir, num_shards)
        # a killed round's files belong to no finished round: cleared before the round runs again
        done = StagedWork(join(out_dir, DONE), _ROUND_KIND, _ROUND_VERSION).run(round_, clear_first=out_dir)
        paths = done["paths"]
        if done["unsettled"] == 0:
            # This round started from a star forest, so its output equals its input: converged.
            return paths, iteration
    raise RuntimeError(
        f"connected components did not converge in {max_iterations} rounds (work_dir {work_dir!r}); "
        "raise FuzzyDedupConfig.max_iterations, or look for an enormous chain-shaped cluster."
    )


def _star_round(
    edges: Dataset | Sequence[str], previous: list[str] | None, out_dir: str, num_shards: int | None
) -> dict[str, Any]:
    """One large-star and one small-star round over `edges` (the first round) or the previous round's files."""
    if previous is None and isinstance(edges, Dataset):
        source: Dataset | None = edges
    else:
        files = list(edges) if previous is None else previous
        source = Dataset.from_files(files, format="parquet", columns=["a", "b"]) if files else None
    if source is None:
        return {"paths": [], "unsettled": 0}
    paths, found = write_stage(
        source.flat_map(both_directions)
        .group_by(first, large_star, sort_by=second, num_shards=num_shards)
        .group_by(first, small_star, sort_by=second, num_shards=num_shards),
        out_dir,
    )
    return {"paths": paths, "unsettled": found.get("fuzzy_dedup/cc_unsettled", 0)}


# --------------------------------------------------------------------------- stage 5: star clusters

_COMPONENT, _NEIGHBOUR = 0, 1


def route_to_components(record: dict) -> Iterator[tuple]:
    """Stage 5's input, keyed by node: a similarity edge to both endpoints (as neighbours), a converged component
    edge to its member (naming its component)."""
    if "jaccard" in record:  # an edge of the similarity graph (verified, or a raw candidate)
        yield (record["a"], _NEIGHBOUR, record["b"])
        yield (record["b"], _NEIGHBOUR, record["a"])
    else:  # a converged component edge: member b belongs to the component of a
        yield (record["b"], _COMPONENT, record["a"])


def node_summary(node: Any, items: Iterable[tuple]) -> tuple:
    """Items sorted by (tag, other): a node's component (absent: it is the component's minimum),
    then its graph neighbours in id order. Out: (component, -degree, node, neighbours)."""
    component = node
    neighbours: list[Any] = []
    for _, tag, other in items:
        if tag == _COMPONENT:
            component = other
        elif not neighbours or other != neighbours[-1]:
            neighbours.append(other)
    return (component, -len(neighbours), node, neighbours)


def priority(item: tuple) -> tuple:
    """Stage 5's sort key: highest degree first, ties to the smallest id."""
    return (item[1], item[2])  # highest degree first, ties to the smallest id


def star_clusters(component: Any, nodes: Iterable[tuple]) -> Iterator[dict]:
    """Reducer per component: greedy star clustering (Aslam, Pelekhov and Rus, "The Star
    Clustering Algorithm for Static and Dynamic Information Organization", JGAA 2004).

    Nodes arrive by priority (degree descending, then id). A node not yet claimed becomes a keeper
    and claims every unclaimed neighbour as its duplicate. So every removed document has an edge
    (with verification: exact Jaccard >= threshold) to the very document kept in its place; chains
    of links never remove a document on a keeper's account it does not itself match. The
    highest-degree node is the family's centre (typically the original its copies were made from),
    so one keeper covers its copies. Memory: the set of claimed ids of one component.
    """
    claimed: set[Any] = set()
    for _, _, node, neighbours in nodes:
        if node in claimed:
            continue
        claimed.add(node)
        for other in neighbours:
            if other not in claimed:
                claimed.add(other)
                counters.increment("fuzzy_dedup/duplicates")
                yield {"id": other, "cluster": node}
