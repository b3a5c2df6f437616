"""The Ray backend on a real local Ray cluster: same outputs as the process backend, lost workers retried,
user errors reported with their record and traceback, stages loaded once per worker."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from zephyr import Dataset, UserCodeError, counters, execution  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def ray_cluster():
    """One real local Ray cluster (2 CPUs, loopback only) for this module."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            dashboard_host="127.0.0.1",
            log_to_driver=False,
        )
    yield
    if started:
        ray.shutdown()


def _run(ds: Dataset, backend: str, scratch: Path, **overrides):
    with execution(backend=backend, workers=2, scratch=str(scratch), progress=False, summary=False, **overrides):
        return ds.execute()


def _events(num: int = 600) -> list[dict]:
    # users with interleaved, out-of-order timestamps, so the secondary sort has work to do
    return [
        {"id": i, "user": f"u{(i * 7) % 37:02d}", "ts": (i * 7919) % 1000, "text": f"event {i} " + "x" * (i % 13)}
        for i in range(num)
    ]


# ------------------------------------------------------------------------------------- identical output
def test_narrow_ops_and_writers_match_processes(ray_cluster, tmp_path):
    pytest.importorskip("zephyr.engine.io", reason="the file formats module has not landed yet")
    import pyarrow.parquet as pq
    import zstandard

    ds = (
        Dataset.from_list(_events(), num_shards=5)
        .map(lambda r: {**r, "len": len(r["text"])})
        .filter(lambda r: r["ts"] % 3 != 0)
        .flat_map(lambda r: [r, {**r, "id": -r["id"]}] if r["len"] > 15 else [r])
        .select("id", "user", "ts", "len")
    )
    expected = []  # the same pipeline in plain Python
    for r in _events():
        r = {**r, "len": len(r["text"])}
        if r["ts"] % 3 != 0:
            for out in [r, {**r, "id": -r["id"]}] if r["len"] > 15 else [r]:
                expected.append({k: out[k] for k in ("id", "user", "ts", "len")})
    outputs = {}
    for backend in ("processes", "ray"):
        with execution(
            backend=backend, workers=2, scratch=str(tmp_path / f"s-{backend}"), progress=False, summary=False
        ):
            paths_jsonl = ds.write_jsonl(str(tmp_path / backend / "part-{shard:05d}-of-{total:05d}.jsonl.zst"))
            paths_parquet = ds.write_parquet(str(tmp_path / backend / "part-{shard:05d}.parquet"))
        records_jsonl = []
        for path in paths_jsonl:
            with open(path, "rb") as handle:
                text = zstandard.ZstdDecompressor().stream_reader(handle).read().decode()
            records_jsonl += [json.loads(line) for line in text.splitlines()]
        records_parquet = [r for path in paths_parquet for r in pq.read_table(path).to_pylist()]
        outputs[backend] = ([Path(p).name for p in paths_jsonl + paths_parquet], records_jsonl, records_parquet)
    assert outputs["ray"] == outputs["processes"]
    names, records_jsonl, records_parquet = outputs["ray"]
    assert names[:2] == ["part-00000-of-00005.jsonl.zst", "part-00001-of-00005.jsonl.zst"]
    assert records_jsonl == expected  # same records, same order
    assert records_parquet == expected


def _with_length(record):
    counters.increment("chars", len(record["text"]))
    return {**record, "len": len(record["text"])}


def _first_last_count(user, items):
    items = list(items)
    return {
        "user": user,
        "first": items[0]["ts"],
        "last": items[-1]["ts"],
        "n": len(items),
        "ts": [r["ts"] for r in items],
    }


def _grouped(map_fn) -> Dataset:
    return (
        Dataset.from_list(_events(), num_shards=4)
        .map(map_fn)
        .group_by(lambda r: r["user"], _first_last_count, sort_by=lambda r: (r["ts"], r["id"]), num_shards=3)
    )


@pytest.fixture(scope="module")
def grouped_reference(tmp_path_factory):
    """The group_by pipeline's result on the process backend (shared by two tests)."""
    return _run(_grouped(_with_length), "processes", tmp_path_factory.mktemp("reference"))


def test_group_by_with_secondary_sort_matches_processes(ray_cluster, grouped_reference, tmp_path):
    on_ray = _run(_grouped(_with_length), "ray", tmp_path / "scratch")
    assert on_ray.outputs == grouped_reference.outputs
    assert len(on_ray.outputs) == 37
    for group in on_ray.outputs:
        assert group["ts"] == sorted(group["ts"]), f"group {group['user']} not ordered by ts"
    assert sum(g["n"] for g in on_ray.outputs) == 600
    assert on_ray.counters == grouped_reference.counters == {"chars": sum(len(r["text"]) for r in _events())}


def test_join_matches_processes(ray_cluster, tmp_path):
    users = Dataset.from_list(
        [{"user": f"u{i:02d}", "country": ["de", "fr", "us"][i % 3]} for i in range(0, 37, 2)], num_shards=2
    )
    joined = Dataset.from_list(_events(), num_shards=3).sorted_merge_join(
        users,
        left_key=lambda r: r["user"],
        right_key=lambda r: r["user"],
        how="left",
        combine=lambda e, u: {**e, "country": u["country"] if u else None},
    )
    reference = _run(joined, "processes", tmp_path / "s-processes").outputs
    on_ray = _run(joined, "ray", tmp_path / "s-ray").outputs
    assert on_ray == reference
    assert len(reference) == 600
    for record in reference:
        number = int(record["user"][1:])
        assert record["country"] == (["de", "fr", "us"][number % 3] if number % 2 == 0 else None)


# ------------------------------------------------------------------------------------- fault tolerance
def _kill_once(marker: str):
    """A map fn that SIGKILLs its own worker process the first time it sees record 123."""

    def fn(record):
        if record["id"] == 123:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass  # the retry: behave
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        return _with_length(record)

    return fn


def test_killed_worker_is_retried_with_identical_output(ray_cluster, grouped_reference, tmp_path):
    marker = tmp_path / "killed.pid"
    result = _run(_grouped(_kill_once(str(marker))), "ray", tmp_path / "scratch")
    assert marker.exists(), "the worker was never killed: the test did not exercise a lost worker"
    assert result.outputs == grouped_reference.outputs
    assert result.counters == grouped_reference.counters  # the dead attempt's counts are not added
    retries = [reason for stage in result.stages for reason in stage.retries]
    assert len(retries) == 1, retries
    assert "lost worker" in retries[0] and f"pid {marker.read_text()}" in retries[0], retries[0]
    assert "stage 0" in retries[0] and "shard 0" in retries[0]  # records 0..149: the first list shard


def _fails_on_record_7(record):
    if record["id"] == 7:
        raise ValueError(f"cannot parse timestamp {record['ts']!r}")
    return record


def test_user_error_surfaces_with_record_and_traceback(ray_cluster, tmp_path):
    ds = Dataset.from_list(_events(20), num_shards=2).map(_fails_on_record_7)
    with pytest.raises(UserCodeError) as raised:
        _run(ds, "ray", tmp_path / "scratch")
    message = str(raised.value)
    assert "ValueError: cannot parse timestamp" in message
    assert "'id': 7" in message and "record #7" in message  # the failing record, previewed
    assert "shard 0" in message
    assert "Original traceback" in message and "_fails_on_record_7" in message


# ------------------------------------------------------------------------------- shipped once per worker
class _LoadRecorder:
    """Stands for a large read-only object (a model): appends its process id to a file when unpickled."""

    def __init__(self, log: str) -> None:
        self.log = log
        self.table = list(range(50_000))

    def __reduce__(self):
        return (_load_recorder, (self.log,))


def _load_recorder(log: str) -> _LoadRecorder:
    with open(log, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    return _LoadRecorder(log)


def test_stage_objects_load_once_per_worker(ray_cluster, tmp_path):
    log = tmp_path / "loads.txt"
    model = _LoadRecorder(str(log))
    ds = Dataset.from_list(_events(), num_shards=12).map(lambda r: {**r, "score": model.table[r["id"]]})
    result = _run(ds, "ray", tmp_path / "scratch")
    assert [r["score"] for r in result.outputs] == list(range(600))
    loads = log.read_text().split()
    assert len(loads) == len(set(loads)) <= 2, f"12 shards on 2 workers unpickled the model {len(loads)} times"


def test_actor_pool_stays_warm_across_runs_only_when_asked(ray_cluster, tmp_path):
    """With ray_pool_idle_s, a second run with the same settings reuses the first run's actors (no 1-2 s
    restart per run); other settings get a pool of their own; after the idle time the CPUs go back."""
    import time

    def pid(x):
        time.sleep(0.2)  # long enough that both (placed) actors take shards
        return os.getpid()

    ds = Dataset.from_list(range(8), num_shards=8).map(pid)

    def pids(run_dir: str, workers: int, idle: float) -> set[int]:
        with execution(
            backend="ray",
            workers=workers,
            scratch=str(tmp_path / run_dir),
            progress=False,
            summary=False,
            ray_pool_idle_s=idle,
        ):
            return set(ds.collect())

    first, second = pids("a", 2, 30), pids("b", 2, 30)
    # the first run may finish before its second actor is placed (a busy machine); the second run finds
    # both placed: the same processes
    assert len(second) == 2 and first <= second
    single = pids("c", 1, 1.0)
    assert len(single) == 1 and not single & second  # a new pool; the old actors were closed
    time.sleep(2.0)  # past the idle time: the pool is gone, the next run starts new actors
    again = pids("d", 1, 0)
    assert len(again) == 1 and not again & single


@ray.remote(num_cpus=1)
def _plain_task(x):
    return x + 1


def test_cluster_cpus_come_back_when_a_run_ends(ray_cluster, tmp_path):
    """Other Ray work in the same driver runs right after a Zephyr run (the pool held every CPU before)."""
    import time

    result = _run(_grouped(_with_length), "ray", tmp_path / "scratch")
    assert len(result.outputs) == 37
    started = time.perf_counter()
    assert ray.get([_plain_task.remote(i) for i in range(2)], timeout=30) == [1, 2]
    assert time.perf_counter() - started < 10


_SECOND_DRIVER = """
import os, sys, time
from zephyr import Dataset, execution
def slow(x):
    time.sleep(0.2)
    return x * 3
with execution(backend="ray", ray_address=sys.argv[1], workers=2, scratch=sys.argv[2], progress=False, summary=False):
    out = Dataset.from_list(range(12), num_shards=6).map(slow).collect()
assert out == [x * 3 for x in range(12)], out
print("second driver done")
"""


def test_two_drivers_on_one_cluster_both_finish(ray_cluster, tmp_path):
    """A second driver (another process) shares the 2-CPU cluster: its pool waits for CPUs, then runs."""
    import subprocess
    import sys
    import time

    script = tmp_path / "second_driver.py"
    script.write_text(_SECOND_DRIVER)
    address = ray.get_runtime_context().gcs_address
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    second = subprocess.Popen(
        [sys.executable, str(script), address, str(tmp_path / "s2")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def slow(x):
            time.sleep(0.2)
            return x * 2

        with execution(backend="ray", workers=2, scratch=str(tmp_path / "s1"), progress=False, summary=False):
            assert Dataset.from_list(range(12), num_shards=6).map(slow).collect() == [x * 2 for x in range(12)]
        output, _ = second.communicate(timeout=120)
    finally:
        second.kill()
    assert second.returncode == 0 and "second driver done" in output, output[-3000:]


# ------------------------------------------------------------------------------------------- ray_mode
def test_ray_mode_tasks_from_the_config_gives_the_same_groups(ray_cluster, tmp_path, monkeypatch):
    """`execution(ray_mode="tasks")` (`zephyr run --ray-mode tasks`) runs each shard as a plain Ray task."""
    from zephyr.engine import executor

    ds = Dataset.from_list(_events(), num_shards=4).group_by(
        lambda r: r["user"], lambda key, rows: {"user": key, "n": sum(1 for _ in rows)}, num_shards=3
    )
    modes = []
    make_backend = executor.make_backend

    def recording(config):
        backend = make_backend(config)
        modes.append(getattr(backend, "mode", None))
        return backend

    monkeypatch.setattr(executor, "make_backend", recording)
    tasks = _run(ds, "ray", tmp_path / "tasks", ray_mode="tasks")
    processes = _run(ds, "processes", tmp_path / "processes")
    assert modes == ["tasks", None]
    assert sorted(tasks.outputs, key=lambda r: r["user"]) == sorted(processes.outputs, key=lambda r: r["user"])


def test_ray_mode_is_checked():
    from zephyr.engine.context import ExecutionConfig

    with pytest.raises(ValueError, match="ray_mode must be 'actors' or 'tasks'"):
        ExecutionConfig(ray_mode="threads")
