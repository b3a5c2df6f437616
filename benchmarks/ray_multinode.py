"""Zephyr on a multi-node Ray cluster (head + node_a + node_b started with `ray start` on 127.0.0.1, one CPU
each, scratch on the GCS emulator): per-task overhead, and the time a run loses when a node dies.

    .venv/bin/python benchmarks/ray_multinode.py            # 200 empty shard tasks, 1,200-record kill run
    .venv/bin/python benchmarks/ray_multinode.py --quick    # 60 tasks, 600 records

Figures, each beside the peer measured in the same run:
- per-task overhead (wall ms per shard task, 2 in flight): an empty Zephyr stage through the whole executor
  (stage pickle, `.done` checkpoint per shard in the bucket), the same with scratch on the machine's disk
  (every node shares it here: the bucket's share of the cost), the backend alone (submit/wait of empty
  shard tasks, no checkpoints), and the peer: plain `@ray.remote` no-op tasks on the same nodes.
- a node lost: a map + group_by run that takes ~10 s, once undisturbed and once with node_a's raylet
  killed (SIGKILL) as soon as node_a works on a shard; the difference is the time lost, with the retries
  the run reported. Outputs of both runs are checked identical.
The machine is shared: the load average (`uptime`) before and after is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ray  # noqa: E402

from zephyr import Dataset, execution  # noqa: E402
from zephyr.engine.backends.ray import RayBackend  # noqa: E402
from zephyr.engine.context import ExecutionConfig  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))  # the local multi-node cluster the Ray tests use
from ray_local import LocalNodes, free_port  # noqa: E402


def _no_records(shard: int) -> list:
    return []


def _slow(record: dict) -> dict:
    if os.path.basename(os.getcwd()) == "work-node_a" and not os.path.exists(os.environ["ZB_MARKER"]):
        open(os.environ["ZB_MARKER"], "w").close()
    time.sleep(0.01)
    return record


def _count(key, items):
    items = list(items)
    return {"key": key, "n": len(items), "ids": sorted(r["id"] for r in items)}


def _grouped(records: int) -> Dataset:
    rows = [{"id": i, "key": i % 17} for i in range(records)]
    return Dataset.from_list(rows, num_shards=8).map(_slow).group_by(lambda r: r["key"], _count, num_shards=4)


@ray.remote(num_cpus=1)
def _noop(x):
    return x


def _start_emulator() -> tuple[subprocess.Popen, str]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "tests" / "engine" / "gcs_emulator.py"),  # with objects.move
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1).close()
            break
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=bench",
        data=json.dumps({"name": "zbench"}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    return proc, endpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--records", type=int, default=1200)
    args = parser.parse_args(argv)
    tasks, records = (60, 600) if args.quick else (args.tasks, args.records)
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="zephyr-bench-multinode-"))
    emulator, endpoint = _start_emulator()
    os.environ.update(
        STORAGE_EMULATOR_HOST=endpoint,
        GCE_METADATA_HOST="127.0.0.1:9",
        ZEPHYR_METADATA_TIMEOUT="0.2",
        ZB_MARKER=str(tmp / "node_a-started"),
    )
    nodes = LocalNodes(
        env={
            "PYTHONPATH": str(REPO),
            "STORAGE_EMULATOR_HOST": endpoint,
            "GCE_METADATA_HOST": "127.0.0.1:9",
            "ZEPHYR_METADATA_TIMEOUT": "0.2",
            "ZB_MARKER": os.environ["ZB_MARKER"],
        }
    )
    figures: dict = {"bench": "ray_multinode", "tasks": tasks, "records": records}
    try:
        started = time.perf_counter()
        nodes.start()
        nodes.add("node_a")
        nodes.add("node_b")
        ray.init(address=nodes.address, log_to_driver=False)
        print(
            f"cluster: 3 raylets, {ray.cluster_resources()['CPU']:.0f} CPUs, "
            f"up in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        base = {"backend": "ray", "ray_address": nodes.address, "workers": 2, "progress": False, "summary": False}

        # ---- per-task overhead
        ray.get([_noop.remote(i) for i in range(20)])  # warm the peer's workers
        t0 = time.perf_counter()
        ray.get([_noop.remote(i) for i in range(tasks)])
        figures["ms_per_task_plain_ray_tasks"] = (time.perf_counter() - t0) / tasks * 1000
        for name, scratch in (("bucket", "gs://zbench/scratch"), ("shared_disk", str(tmp / "scratch"))):
            os.environ["ZEPHYR_SCRATCH_SHARED"] = "1" if name == "shared_disk" else "0"
            with execution(scratch=scratch, **base):
                Dataset.from_iterable(_no_records, num_shards=4).collect()  # warm: imports on both nodes
                t0 = time.perf_counter()
                Dataset.from_iterable(_no_records, num_shards=tasks).collect()
                figures[f"ms_per_task_zephyr_run_{name}_scratch"] = (time.perf_counter() - t0) / tasks * 1000
        sys.path.insert(0, str(REPO / "benchmarks"))
        from engine_groupby import empty_task_seconds  # the same measure as the one-node benchmark

        backend = RayBackend(ExecutionConfig(scratch=str(tmp / "scratch"), **base))
        try:
            figures["ms_per_task_zephyr_backend_only"] = empty_task_seconds(backend, tmp / "overhead", tasks) * 1000
        finally:
            backend.close()
        os.environ["ZEPHYR_SCRATCH_SHARED"] = "0"

        # ---- a node lost
        results = {}
        for kill in (False, True):
            marker = Path(os.environ["ZB_MARKER"])
            marker.unlink(missing_ok=True)
            killed: list[float] = []

            def killer(marker: Path = marker, killed: list[float] = killed) -> None:
                while not marker.exists():
                    time.sleep(0.02)
                nodes.kill_raylet("node_a")
                killed.append(time.perf_counter())

            if kill:
                threading.Thread(target=killer, daemon=True).start()
            with execution(scratch=f"gs://zbench/run-{kill}", **base):
                t0 = time.perf_counter()
                result = _grouped(records).execute()
                seconds = time.perf_counter() - t0
            retries = [r for stage in result.stages for r in stage.retries]
            results[kill] = (result.outputs, seconds, retries, killed[0] - t0 if killed else None)
            print(
                f"  run {'with node_a killed' if kill else 'undisturbed'}: {seconds:.1f} s, {len(retries)} retries",
                flush=True,
            )
        assert results[True][0] == results[False][0], "outputs differ after a node was lost"
        figures["run_s_undisturbed"] = results[False][1]
        figures["run_s_node_killed"] = results[True][1]
        figures["node_killed_at_s"] = results[True][3]
        figures["seconds_lost_to_killed_node"] = results[True][1] - results[False][1]
        figures["retries_after_kill"] = len(results[True][2])
        for reason in results[True][2]:
            print(f"  retry: {reason[:300]}")
    finally:
        ray.shutdown()
        nodes.stop()
        emulator.terminate()
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (2 cores shared with other users)")
    for name, value in figures.items():
        if isinstance(value, float):
            print(f"  {name:<42}{value:10.2f}")
            figures[name] = round(value, 2)
    figures["load_before"], figures["load_after"] = round(load_before[0], 2), round(load_after[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
