"""group_by with a secondary sort: Zephyr (processes, ray) beside Ray Data and polars, on the same files.

    .venv/bin/python benchmarks/engine_groupby.py            # 10M records, ~1 GB
    .venv/bin/python benchmarks/engine_groupby.py --quick    # 1M records

Input: `--records` rows {"user": int, ~records/10 distinct; "ts": int; "payload": 80 ASCII chars}, written
once to parquet in a temp dir; every system reads the same files and writes its result as parquet.
Per user, in ts order: first ts, last ts, count, and the first record's payload. The results of all
systems are checked against each other (a checksum over every output row) before any figure is printed.

- Zephyr `processes` and Zephyr `ray` (a local Ray cluster, actor pool): `group_by("user", reducer,
  sort_by="ts")` (field names: the shuffle takes whole Arrow batches), and once more on processes with
  key functions (`lambda r: r["user"]`: one record at a time); peak RSS is the largest worker's peak
  (StageStats) and the driver's sampled peak.
- Ray Data: `groupby("user").map_groups(fn)` with the group sorted by ts inside fn (Ray Data has no
  secondary sort); peak RSS sampled every 0.2 s over the Ray worker processes (RSS counts the object
  store pages a worker has mapped, so it overstates private memory).
- polars: one process, sort by (user, ts) then group_by(maintain_order=True).agg: the single-machine
  in-memory limit.
- Ray scheduling overhead: wall time per empty shard task through each backend (2 workers), and a
  stage holding a large read-only object run with the actor pool and with plain Ray tasks: how many
  times the object was loaded and how long the stage took.

MB/s counts the logical input size (8 + 8 + 80 bytes per record). The machine is shared: the load
average (`uptime`) before and after is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import deque
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import contextlib

from zephyr import Dataset, execution  # noqa: E402
from zephyr.engine import executor  # noqa: E402
from zephyr.engine.backends import ProcessBackend  # noqa: E402
from zephyr.engine.context import ExecutionConfig, parse_size  # noqa: E402
from zephyr.engine.plan import plan  # noqa: E402
from zephyr.engine.worker import ShardTask  # noqa: E402

RECORD_BYTES = 8 + 8 + 80
# What a worker process holds before any data: the interpreter, pyarrow, numpy, the engine and the stage
# (measured: an empty group_by task peaks at ~120-160 MB). The goal: peak RSS per worker task <= budget +
# this fixed overhead.
FIXED_OVERHEAD = 200 << 20
ROWS_PER_FILE = 500_000


# ------------------------------------------------------------------------------------------ input
def generate(directory: Path, records: int, seed: int = 0) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    users = max(1, records // 10)
    paths = []
    for index, start in enumerate(range(0, records, ROWS_PER_FILE)):
        n = min(ROWS_PER_FILE, records - start)
        letters = rng.integers(97, 123, size=(n, 80), dtype=np.uint8)
        payload = pa.array(letters.view("S80").ravel(), pa.binary()).cast(pa.string())
        table = pa.table(
            {
                "user": pa.array(rng.integers(0, users, n), pa.int64()),
                "ts": pa.array(rng.integers(0, 1 << 40, n), pa.int64()),
                "payload": payload,
            }
        )
        path = directory / f"part-{index:05d}.parquet"
        pq.write_table(table, path, compression="zstd")
        paths.append(path)
    return paths


def checksum(out_dir: Path) -> dict[str, int]:
    """Order-independent digest of a result directory: groups, sum of counts and ts, payload CRCs."""
    columns = ["user", "first_ts", "last_ts", "count", "first_payload"]
    # ParquetFile, not read_table: Ray Data writes one row group per group (thousands per file), which
    # the dataset reader parses very slowly
    table = pa.concat_tables([pq.ParquetFile(p).read(columns=columns) for p in sorted(out_dir.rglob("*.parquet"))])
    crc = sum(
        zlib.crc32(f"{u}:{p}".encode())
        for u, p in zip(table["user"].to_pylist(), table["first_payload"].to_pylist(), strict=False)
    )
    return {
        "groups": table.num_rows,
        "records": int(pa.compute.sum(table["count"]).as_py()),
        "first_ts": int(pa.compute.sum(table["first_ts"]).as_py()),
        "last_ts": int(pa.compute.sum(table["last_ts"]).as_py()),
        "payload_crc": crc,
    }


# --------------------------------------------------------------------------------------- sampling
class RssSampler:
    """Samples the RSS of a set of processes every `interval` s: peak of the sum and of the largest."""

    def __init__(self, select: str, interval: float = 0.2) -> None:
        self.select = select  # "children": this process's descendants; "ray": Ray worker processes
        self.interval = interval
        self.peak_total = 0
        self.peak_worker = 0
        self.peak_driver = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _processes(self) -> list[psutil.Process]:
        if self.select == "children":
            return psutil.Process().children(recursive=True)
        found = []
        for process in psutil.process_iter(["name", "cmdline"]):
            cmdline = process.info.get("cmdline") or []
            if cmdline and cmdline[0].startswith("ray::"):
                found.append(process)
        return found

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            sizes = []
            for process in self._processes():
                with contextlib.suppress(psutil.Error):
                    sizes.append(process.memory_info().rss)
            driver = me.memory_info().rss
            self.peak_driver = max(self.peak_driver, driver)
            if sizes:
                self.peak_worker = max(self.peak_worker, max(sizes))
                self.peak_total = max(self.peak_total, sum(sizes) + driver)
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------- systems
def user_key(record: dict) -> int:
    return record["user"]


def ts_key(record: dict) -> int:
    return record["ts"]


def summarize(user: int, items: Any) -> dict:
    """items arrive in ts order (the secondary sort): the first is the earliest."""
    first = last = next(items)
    count = 1
    for last in items:  # noqa: B007 - the loop variable is the value used: the last item
        count += 1
    return {
        "user": user,
        "first_ts": first["ts"],
        "last_ts": last["ts"],
        "count": count,
        "first_payload": first["payload"],
    }


def run_zephyr(
    backend: str, input_dir: Path, out_dir: Path, scratch: Path, workers: int, memory: str, *, fields: bool = True
) -> dict:
    files = Dataset.from_files(str(input_dir / "*.parquet"))
    # field names let the shuffle take whole Arrow batches; key functions see one record at a time
    ds = (
        files.group_by("user", summarize, sort_by="ts")
        if fields
        else files.group_by(user_key, summarize, sort_by=ts_key)
    )
    with (
        execution(
            backend=backend,
            workers=workers,
            memory_per_worker=memory,
            scratch=str(scratch),
            progress=False,
            summary=False,
        ),
        RssSampler("children" if backend == "processes" else "ray") as sampler,
    ):
        started = time.perf_counter()
        run = ds.write(str(out_dir / "part-{shard:05d}.parquet")).execute()
        seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_worker": max(s.peak_rss for s in run.stages),
        "peak_driver": sampler.peak_driver,
        "peak_total": sampler.peak_total,
        "retries": [r for s in run.stages for r in s.retries],
        "stages": [(s.name, round(s.seconds, 1)) for s in run.stages],
    }


def run_ray_data(input_dir: Path, out_dir: Path) -> dict:
    import pyarrow.compute as pc
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False

    def summarize_group(group: pa.Table) -> pa.Table:
        group = group.take(pc.sort_indices(group, sort_keys=[("ts", "ascending")]))
        n = group.num_rows
        return pa.table(
            {
                "user": group["user"].slice(0, 1),
                "first_ts": group["ts"].slice(0, 1),
                "last_ts": group["ts"].slice(n - 1, 1),
                "count": pa.array([n], pa.int64()),
                "first_payload": group["payload"].slice(0, 1),
            }
        )

    with RssSampler("ray") as sampler:
        started = time.perf_counter()
        ds = ray.data.read_parquet(str(input_dir))
        ds.groupby("user").map_groups(summarize_group, batch_format="pyarrow").write_parquet(str(out_dir))
        seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_worker": sampler.peak_worker,
        "peak_driver": sampler.peak_driver,
        "peak_total": sampler.peak_total,
    }


POLARS_SCRIPT = """
import json, resource, sys, time
import polars as pl
started = time.perf_counter()
(pl.scan_parquet(sys.argv[1] + "/*.parquet")
   .sort(["user", "ts"])
   .group_by("user", maintain_order=True)
   .agg(pl.col("ts").first().alias("first_ts"), pl.col("ts").last().alias("last_ts"),
        pl.len().cast(pl.Int64).alias("count"), pl.col("payload").first().alias("first_payload"))
   .collect()
   .write_parquet(sys.argv[2] + "/part-00000.parquet"))
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_polars(input_dir: Path, out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", POLARS_SCRIPT, str(input_dir), str(out_dir)], capture_output=True, text=True, check=True
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "seconds": figures["seconds"],
        "peak_worker": figures["peak_rss"],
        "peak_driver": 0,
        "peak_total": figures["peak_rss"],
    }


# ------------------------------------------------------------------------------- scheduling costs
def _no_records(shard: int) -> list:
    return []


def empty_task_seconds(backend: Any, scratch: Path, tasks: int) -> float:
    """Wall seconds per empty shard task, `backend.capacity` in flight (after a warm-up round)."""
    config = ExecutionConfig(backend="local", scratch=str(scratch))
    stage = plan(Dataset.from_iterable(_no_records, num_shards=tasks), config).stages[0]
    stage_url = str(scratch / "empty-stage.pkl")
    scratch.mkdir(parents=True, exist_ok=True)
    Path(stage_url).write_bytes(cloudpickle.dumps(stage))

    def run_all(attempt: int) -> float:
        queue = deque(
            ShardTask(stage_url, 0, shard, attempt, str(scratch / f"t{shard}-{attempt}")) for shard in range(tasks)
        )
        in_flight = done = 0
        started = time.perf_counter()
        while done < tasks:
            while in_flight < backend.capacity and queue:
                backend.submit(queue.popleft())
                in_flight += 1
            for outcome in backend.wait(0.2):
                assert outcome.result is not None, outcome
                in_flight -= 1
                done += 1
        return time.perf_counter() - started

    run_all(0)  # warm-up: workers started, stage loaded
    return run_all(1) / tasks


class _BigObject:
    """Stands for a tokenizer or classifier: `size` bytes, appends its pid to `log` when unpickled."""

    def __init__(self, log: str, size: int) -> None:
        self.log = log
        self.blob = np.ones(size, np.uint8)

    def __reduce__(self):
        return (_load_big, (self.log, self.blob))


def _load_big(log: str, blob: np.ndarray) -> _BigObject:
    with open(log, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    obj = _BigObject.__new__(_BigObject)
    obj.log, obj.blob = log, blob
    return obj


def big_object_stage(mode: str, scratch: Path, workers: int, shards: int, size: int) -> tuple[float, int]:
    """A stage whose function holds a large object, run with the actor pool or with plain Ray tasks."""
    from zephyr.engine.ray_backend import RayBackend

    log = scratch / f"loads-{mode}.txt"
    big = _BigObject(str(log), size)
    ds = Dataset.from_iterable(_no_records, num_shards=shards).map_shard(lambda records: [int(big.blob[:8].sum())])
    original = executor.make_backend
    executor.make_backend = lambda config: RayBackend(config, mode=mode)
    try:
        with execution(backend="ray", workers=workers, scratch=str(scratch), progress=False, summary=False):
            started = time.perf_counter()
            outputs = ds.collect()
            seconds = time.perf_counter() - started
    finally:
        executor.make_backend = original
    assert outputs == [8] * shards
    return seconds, len(log.read_text().split())


# ------------------------------------------------------------------------------------------- main
def _mb(n: float) -> str:
    return f"{n / (1 << 20):,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true", help="1M records")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-per-worker", default="512MB")
    parser.add_argument("--overhead-tasks", type=int, default=200)
    parser.add_argument("--skip", default="", help="comma-separated: polars,processes,ray,raydata,overhead")
    parser.add_argument("--tmp", default=None, help="directory for input, outputs and scratch")
    args = parser.parse_args(argv)
    records = 1_000_000 if args.quick else args.records
    skip = set(filter(None, args.skip.split(",")))
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="zephyr-bench-groupby-", dir=args.tmp))
    try:
        started = time.perf_counter()
        input_dir = tmp / "input"
        files = generate(input_dir, records)
        input_bytes = records * RECORD_BYTES
        print(
            f"input: {records:,} records, {len(files)} parquet files, "
            f"{_mb(sum(f.stat().st_size for f in files))} MB on "
            f"disk, {_mb(input_bytes)} MB logical (generated in {time.perf_counter() - started:.1f} s)",
            flush=True,
        )
        results: dict[str, dict] = {}
        if "polars" not in skip:
            results["polars"] = run_polars(input_dir, tmp / "out-polars")
            print(f"  polars done in {results['polars']['seconds']:.1f} s", flush=True)
        if "processes" not in skip:
            results["zephyr_processes"] = run_zephyr(
                "processes", input_dir, tmp / "out-processes", tmp / "scratch", args.workers, args.memory_per_worker
            )
            print(f"  zephyr processes done in {results['zephyr_processes']['seconds']:.1f} s", flush=True)
            results["zephyr_processes_fn"] = run_zephyr(
                "processes",
                input_dir,
                tmp / "out-processes-fn",
                tmp / "scratch",
                args.workers,
                args.memory_per_worker,
                fields=False,
            )
            print(
                f"  zephyr processes (key functions) done in {results['zephyr_processes_fn']['seconds']:.1f} s",
                flush=True,
            )
        ray_wanted = {"ray", "raydata", "overhead"} - skip
        if ray_wanted:
            import ray

            from zephyr.engine.ray_backend import connect

            connect(None)
            print(f"  local Ray: {ray.cluster_resources().get('CPU')} CPUs", flush=True)
        if "ray" not in skip:
            results["zephyr_ray"] = run_zephyr(
                "ray", input_dir, tmp / "out-ray", tmp / "scratch", args.workers, args.memory_per_worker
            )
            print(f"  zephyr ray done in {results['zephyr_ray']['seconds']:.1f} s", flush=True)
        if "raydata" not in skip:
            results["ray_data"] = run_ray_data(input_dir, tmp / "out-raydata")
            print(f"  ray data done in {results['ray_data']['seconds']:.1f} s", flush=True)
        digests = {
            name: checksum(
                tmp
                / {
                    "polars": "out-polars",
                    "zephyr_processes": "out-processes",
                    "zephyr_processes_fn": "out-processes-fn",
                    "zephyr_ray": "out-ray",
                    "ray_data": "out-raydata",
                }[name]
            )
            for name in results
        }
        reference = next(iter(digests.values()), None)
        for name, digest in digests.items():
            if digest != reference:
                raise SystemExit(f"results differ: {name} {digest} vs {next(iter(digests))} {reference}")
        overhead: dict[str, float] = {}
        cache: dict[str, tuple[float, int]] = {}
        if "overhead" not in skip:
            from zephyr.engine.ray_backend import RayBackend

            config = ExecutionConfig(
                backend="ray",
                workers=args.workers,
                scratch=str(tmp / "scratch"),
                memory_per_worker=parse_size(args.memory_per_worker),
            )
            for name, factory in (
                ("processes", lambda: ProcessBackend(args.workers)),
                ("ray_actors", lambda: RayBackend(config, mode="actors")),
                ("ray_tasks", lambda: RayBackend(config, mode="tasks")),
            ):
                backend = factory()
                try:
                    overhead[name] = empty_task_seconds(backend, tmp / f"overhead-{name}", args.overhead_tasks)
                finally:
                    backend.close()
            for mode in ("actors", "tasks"):
                cache[mode] = big_object_stage(mode, tmp / f"cache-{mode}", args.workers, shards=40, size=200 << 20)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(
        f"group_by + secondary sort, {records:,} records ({_mb(input_bytes)} MB), "
        f"{reference['groups'] if reference else 0:,} groups; "
        f"{args.workers} workers, memory_per_worker {args.memory_per_worker}"
    )
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (2 cores shared with other users)"
    )
    header = (
        f"{'system':<26}{'seconds':>9}{'records/s':>12}{'MB/s':>8}{'peak RSS/worker MB':>20}"
        f"{'driver MB':>11}{'total MB':>10}"
    )
    print(header)
    print("-" * len(header))
    labels = {
        "zephyr_processes": "zephyr processes",
        "zephyr_processes_fn": "zephyr processes, key fns",
        "zephyr_ray": "zephyr ray (actors)",
        "ray_data": "ray data (map_groups)",
        "polars": "polars (1 process)",
    }
    for name, r in results.items():
        r["records_s"] = records / r["seconds"]
        r["mb_s"] = input_bytes / r["seconds"] / (1 << 20)
        print(
            f"{labels[name]:<26}{r['seconds']:>9.1f}{r['records_s']:>12,.0f}{r['mb_s']:>8.1f}"
            f"{_mb(r['peak_worker']):>20}{_mb(r['peak_driver']) if r['peak_driver'] else '-':>11}"
            f"{_mb(r['peak_total']):>10}"
        )
    budget = parse_size(args.memory_per_worker)
    for name in ("zephyr_processes", "zephyr_processes_fn", "zephyr_ray"):
        if name in results:
            peak = results[name]["peak_worker"]
            verdict = "within" if peak <= budget + FIXED_OVERHEAD else "OVER"
            print(
                f"  {labels[name]}: peak RSS per worker task {_mb(peak)} MB, {verdict} budget {_mb(budget)} MB + fixed "
                f"overhead {_mb(FIXED_OVERHEAD)} MB"
            )
    if "polars" in results:
        for name in ("zephyr_processes", "zephyr_processes_fn"):
            if name in results:
                ratio = results[name]["records_s"] / results["polars"]["records_s"]
                print(f"  {labels[name]} vs polars: {ratio:.2f}x records/s")
    for name in ("zephyr_processes", "zephyr_processes_fn", "zephyr_ray"):
        if name in results and results[name]["retries"]:
            print(f"  {labels[name]} retries: {results[name]['retries']}")
    if overhead:
        print()
        print(
            f"per-task overhead, {args.overhead_tasks} empty shard tasks, {args.workers} in flight (wall ms per task):"
        )
        for name, seconds in overhead.items():
            print(f"  {name:<12}{seconds * 1000:8.2f} ms")
        print("stage holding a 200 MB read-only object, 40 shards on 2 workers:")
        for mode, (seconds, loads) in cache.items():
            print(f"  ray {mode:<8}{seconds:8.1f} s, object unpickled {loads} time(s)")
    figures: dict[str, Any] = {
        "bench": "engine_groupby",
        "records": records,
        "input_mb": round(input_bytes / (1 << 20)),
    }
    for name, r in results.items():
        figures[f"{name}_records_s"] = round(r["records_s"])
        figures[f"{name}_mb_s"] = round(r["mb_s"], 2)
        figures[f"{name}_peak_rss_worker_mb"] = round(r["peak_worker"] / (1 << 20))
        figures[f"{name}_peak_rss_total_mb"] = round(r["peak_total"] / (1 << 20))
    if "zephyr_processes" in results and "ray_data" in results:
        figures["zephyr_vs_ray_data"] = round(
            results["zephyr_processes"]["records_s"] / results["ray_data"]["records_s"], 2
        )
    if "zephyr_ray" in results and "ray_data" in results:
        figures["zephyr_ray_vs_ray_data"] = round(
            results["zephyr_ray"]["records_s"] / results["ray_data"]["records_s"], 2
        )
    for name, seconds in overhead.items():
        figures[f"task_overhead_ms_{name}"] = round(seconds * 1000, 2)
    for mode, (seconds, loads) in cache.items():
        figures[f"big_object_stage_s_{mode}"] = round(seconds, 2)
        figures[f"big_object_loads_{mode}"] = loads
    if "polars" in results:
        for name in ("zephyr_processes", "zephyr_processes_fn"):
            if name in results:
                figures[f"{name}_vs_polars"] = round(results[name]["records_s"] / results["polars"]["records_s"], 3)
    figures["fixed_overhead_mb"] = FIXED_OVERHEAD >> 20
    figures["load_before"] = round(load_before[0], 2)
    figures["load_after"] = round(load_after[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
