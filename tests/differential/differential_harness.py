"""What every differential test shares: the hypothesis profiles, and buffers cut small so that tiny
generated inputs still make many runs, spills, merges and chunk boundaries."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,  # an example runs the engine: its time follows the machine's load, not the code
    database=None,  # counterexamples are kept as explicit tests (test_counterexamples.py), not in a cache
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)
FAST = settings(max_examples=40, derandomize=True, **_COMMON)  # the same examples every run: CI reproduces
SLOW = settings(max_examples=400, **_COMMON)  # about 5-10 minutes per test on 2 busy cores


@contextlib.contextmanager
def tiny_buffers(on: bool) -> Iterator[None]:
    """Scatter flushes every few hundred bytes, run batches of ~256 bytes, merges of two runs at a time,
    group walks over 7-row chunks: many runs, spills and chunk boundaries even on tiny data (local only:
    these are module settings of this process)."""
    if not on:
        yield
        return
    from zephyr.engine import outputs
    from zephyr.engine.shuffle import ScatterWriter, gather, runs

    def small_writer(spec, out_dir, *, shard, flush_bytes):
        return ScatterWriter(spec, out_dir, shard=shard, flush_bytes=300)

    with (
        mock.patch.object(outputs, "ScatterWriter", small_writer),
        mock.patch.object(runs, "BATCH_BYTES", 256),
        mock.patch.object(gather, "BATCH_BYTES", 64 << 20),  # fan-in max(2, budget // 256 MB) = 2
        mock.patch.object(gather, "_CHUNK_ROWS", 7),
        mock.patch.object(gather, "_CHUNK_BYTES", 2048),
    ):
        yield
