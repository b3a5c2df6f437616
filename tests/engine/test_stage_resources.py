"""Per-stage resources: how a request is written and merged, and what the processes backend does with
it (CPUs per task and one task per GPU device honoured; memory and custom resources named as ignored).
The Ray side (a pool per shape, a custom resource pinning a stage to a node) is in test_ray_multinode."""

from __future__ import annotations

import os
import time
import warnings

import pytest

from zephyr import Dataset, execution
from zephyr.engine.context import ExecutionConfig
from zephyr.engine.plan import plan
from zephyr.engine.resources import Resources, effective, stage_request


def test_requests_are_parsed_merged_per_stage_and_filled_from_the_run():
    ds = (
        Dataset.from_list(list(range(4)))
        .map(lambda r: r, resources={"cpus": 2, "memory": "2GiB", "node_a": 1})
        .map_batches(lambda b: b, resources=Resources(gpus=1, custom=(("node_a", 0.5),)))
        .group_by(lambda r: r % 2, lambda k, rs: k)
        .map_shard(lambda rs: rs)
    )
    config = ExecutionConfig(backend="processes", workers=2, worker_cpus=0.5)
    first, second = plan(ds, config).stages
    assert stage_request(first) == Resources(cpus=2.0, gpus=1.0, memory=2 << 30, custom=(("node_a", 1.0),))
    assert stage_request(second) is None
    assert effective(stage_request(second), config) == Resources(cpus=0.5, gpus=0.0, memory=1 << 30)
    assert effective(Resources(gpus=1), config).cpus == 0.5
    with pytest.raises(ValueError, match="gpus must be >= 0"):
        Resources.of({"gpus": -1})
    with pytest.raises(TypeError, match="resources must be a dict like"):
        Dataset.from_list([1]).map(lambda r: r, resources=2)


def _device_and_window(record):
    start = time.monotonic()
    time.sleep(0.3)
    return {
        "i": record,
        "device": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
        "start": start,
        "end": time.monotonic(),
    }


def _max_overlap(records) -> int:
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_a_gpu_stage_runs_one_task_per_device_on_processes(monkeypatch, scratch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # two devices (ids as a scheduler hands them out)
    ds = Dataset.from_list(list(range(6)), num_shards=6)
    with execution(backend="processes", workers=3, scratch=scratch, progress=False, summary=False):
        records = ds.map(_device_and_window, resources={"gpus": 1}).collect()
        plain = ds.map(_device_and_window).collect()
    assert {r["device"] for r in records} == {"3", "5"}  # each task sees only its own device
    assert _max_overlap(records) <= 2  # never more tasks than devices, though 3 workers are up
    by_pid = {}
    for r in records:
        by_pid.setdefault(r["pid"], set()).add(r["device"])
    assert all(len(devices) == 1 for devices in by_pid.values())  # a worker keeps its device
    assert {r["device"] for r in plain} == {"3,5"}  # the next stage is a normal one again
    assert _max_overlap(plain) >= 2  # the whole pool again (3 on an idle machine)


def test_processes_backend_says_what_it_ignores(monkeypatch, scratch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ds = Dataset.from_list(list(range(4)), num_shards=4)
    with execution(backend="processes", workers=2, scratch=scratch, progress=False, summary=False):
        with pytest.warns(UserWarning, match=r"asks for 1 GPU\(s\) per task but this machine shows 0"):
            on_cpu = ds.map(_device_and_window, resources={"gpus": 1}).collect()
        with pytest.warns(UserWarning, match=r"ignores a stage's memory=4096 MiB, node_a=1"):
            ds.map(_device_and_window, resources={"memory": "4GiB", "node_a": 1}).collect()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # CPUs are honoured: nothing to warn about
            two_cpu = ds.map(_device_and_window, resources={"cpus": 2}).collect()
    assert _max_overlap(on_cpu) == 1  # no device: one task at a time, on the CPU
    assert _max_overlap(two_cpu) == 1  # 2 workers / 2 CPUs per task


def test_pools_state_what_release_backend_uses():
    """release_backend reads only the WorkerPool protocol: the process pool is one, the in-process backend is not."""
    from zephyr.engine.backends.api import WorkerPool
    from zephyr.engine.backends.local import LocalBackend, ProcessBackend

    assert not isinstance(LocalBackend(), WorkerPool)
    pool = ProcessBackend(1)
    try:
        assert isinstance(pool, WorkerPool) and pool.keep_warm_s is None and pool.healthy()
    finally:
        pool.close()
