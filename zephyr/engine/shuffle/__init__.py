"""Streaming shuffle with bounded memory: scatter writes sorted run files, gather merges them.

Scatter (map side) buffers rows `(target, key hash, key, sort key, value)`, with key and sort key in
an order-preserving byte encoding (`sortkey.encode`) and the value pickled, and flushes the buffer when it
reaches its byte budget: the rows are sorted by (target, key hash, key, sort key) in Arrow (stable, so ties
keep input order), the optional combiner pre-aggregates each key, and the result is written as one Arrow
IPC run file whose record batches each hold a single target. The per-target batch ranges and byte counts
(the run's sidecar) travel back to the driver with the task result.

Gather (reduce side) for target t opens the batches of t in every run, one batch per run in memory, and
k-way merges them a block at a time in Arrow: each round emits every loaded row up to the smallest last row
of the runs' current batches, sorted together by a stable sort, so ties keep run order and then each run's
own order. Groups are found a chunk of merged rows at a time (one Arrow comparison of adjacent keys) and
their values unpickled lazily. When more runs exist than fit in its memory budget, it first merges groups
of runs into longer runs on disk (an external merge), so memory never depends on the input size.

A keyed shuffle (no combiner, no join tag) keeps records columnar: Arrow batches from a columnar reader
are scattered whole, and dict records are gathered into Arrow batches first when Arrow gives them back
exactly (`records_to_batch`; others are pickled). The run's value column is then the records' own fields.

Modules: runs (files and sidecars), scatter (map side), pieces (reduce task planning: split, pack),
gather (reduce side); aggregate (`Dataset.aggregate`'s column-wise folds) and aggregate_runs (its writer
and read over the same run files, read unordered).
"""

from __future__ import annotations

from zephyr.engine.shuffle import gather, pieces, scatter
from zephyr.engine.shuffle.gather import *
from zephyr.engine.shuffle.pieces import *
from zephyr.engine.shuffle.runs import RunFile, ShuffleSpec
from zephyr.engine.shuffle.scatter import *

# What the rest of the engine uses: gather, pieces and scatter whole (each module's `__all__`), and of the
# run files only their handle and spec (the rest of runs is the shuffle's own plumbing).
__all__ = ["RunFile", "ShuffleSpec"]
__all__ += gather.__all__
__all__ += pieces.__all__
__all__ += scatter.__all__
