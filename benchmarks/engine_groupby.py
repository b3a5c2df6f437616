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
- Zephyr processes with `Dataset.aggregate("user", sort_by="ts", first_ts=("ts", "first"), ...)`: the same
  result declared, as polars declares it, folded column-wise on both sides of the shuffle.
- Zephyr processes twice more: on dict records made by a `map` before the group_by (field keys), and on a
  skewed input (`--skew`, default one key holding 30% of the records) beside the balanced one: wall time
  of both, and polars on the skewed input for the check.
- Ray Data: `groupby("user", num_partitions=workers).map_groups(fn, batch_format="pyarrow")` over
  `read_parquet(override_num_blocks=workers)`, the group sorted by ts inside fn (Ray Data has no
  secondary sort); peak RSS sampled every 0.2 s over the Ray worker processes (RSS counts the object
  store pages a worker has mapped, so it overstates private memory). `--raydata-records N` runs it on
  its own input of N records (checked against polars on that input) when the full size would take too
  long; by default it runs on the same input as the others.
- polars: one process, sort by (user, ts) then group_by(maintain_order=True).agg: the single-machine
  in-memory limit.
- Ray scheduling overhead: wall time per empty shard task through each backend (2 workers), and a
  stage holding a large read-only object run with the actor pool and with plain Ray tasks: how many
  times the object was loaded and how long the stage took.

MB/s counts the logical input size (8 + 8 + 80 bytes per record). The machine is shared: the load
average before and after, and the load when each system finished, are printed beside the figures.
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
from zephyr.engine.backends.local import ProcessBackend  # noqa: E402
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
def generate(directory: Path, records: int, seed: int = 0, skew: float = 0.0) -> list[Path]:
    """`records` rows in parquet files of ROWS_PER_FILE; with `skew`, that fraction of the rows (at random)
    have user 0: one giant group beside the ~records/10 others."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    users = max(1, records // 10)
    paths = []
    for index, start in enumerate(range(0, records, ROWS_PER_FILE)):
        n = min(ROWS_PER_FILE, records - start)
        letters = rng.integers(97, 123, size=(n, 80), dtype=np.uint8)
        payload = pa.array(letters.view("S80").ravel(), pa.binary()).cast(pa.string())
        user = rng.integers(0, users, n)
        if skew:
            user[rng.random(n) < skew] = 0
        table = pa.table(
            {
                "user": pa.array(user, pa.int64()),
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


# what `summarize` computes, declared: Dataset.aggregate folds it column-wise (what polars runs, too)
AGGREGATE = {
    "first_ts": ("ts", "first"),
    "last_ts": ("ts", "last"),
    "count": ("ts", "size"),
    "first_payload": ("payload", "first"),
}


def run_zephyr(
    backend: str, input_dir: Path, out_dir: Path, scratch: Path, workers: int, memory: str, *, keys: str = "fields"
) -> dict:
    """keys "fields": group_by("user", sort_by="ts") on the reader's Arrow batches; "functions": key
    functions (each record becomes a dict once, on the map side); "dicts": field keys on dict records
    made by a map (scattered as Arrow batches when they convert exactly); "aggregate": the same result
    declared with Dataset.aggregate (no Python per record or group)."""
    files = Dataset.from_files(str(input_dir / "*.parquet"))
    if keys == "fields":
        ds = files.group_by("user", summarize, sort_by="ts")
    elif keys == "functions":
        ds = files.group_by(user_key, summarize, sort_by=ts_key)
    elif keys == "aggregate":
        ds = files.aggregate("user", sort_by="ts", **AGGREGATE)
    else:
        ds = files.map(dict).group_by("user", summarize, sort_by="ts")
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
        "stages": [(s.name, round(s.seconds, 1), s.shards) for s in run.stages],
    }


def run_ray_data(input_dir: Path, out_dir: Path, parallelism: int) -> dict:
    """Ray Data's own form of a Python reducer per group: `groupby(...).map_groups(fn,
    batch_format="pyarrow")`, with the read's blocks and the shuffle's partitions set to `parallelism`
    (the core count; at 300k records 2, 8 and Ray's default partitions ran within 10% of each other, and
    batch_format="numpy" was slower)."""
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
        ds = ray.data.read_parquet(str(input_dir), override_num_blocks=parallelism)
        grouped = ds.groupby("user", num_partitions=parallelism)
        grouped.map_groups(summarize_group, batch_format="pyarrow").write_parquet(str(out_dir))
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
    from zephyr.engine.backends.ray import RayBackend

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


LABELS = {
    "polars": "polars (1 process)",
    "zephyr_processes": "zephyr processes",
    "zephyr_processes_agg": "zephyr processes, aggregate",
    "zephyr_processes_fn": "zephyr processes, key fns",
    "zephyr_processes_dicts": "zephyr processes, dicts",
    "zephyr_ray": "zephyr ray (actors)",
    "polars_skewed": "polars, skewed",
    "zephyr_processes_skewed": "zephyr processes, skewed",
    "polars_raydata_input": "polars, ray data's input",
    "ray_data": "ray data (map_groups)",
}
ZEPHYR_PROCESSES = (
    "zephyr_processes",
    "zephyr_processes_agg",
    "zephyr_processes_fn",
    "zephyr_processes_dicts",
    "zephyr_processes_skewed",
)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true", help="1M records")
    parser.add_argument(
        "--raydata-records",
        type=int,
        default=None,
        help="run Ray Data on its own input of this many records (default: --records); its records/s is "
        "then measured at that size, checked against polars on the same input",
    )
    parser.add_argument("--skew", type=float, default=0.3, help="share of records of the one giant key (skewed run)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-per-worker", default="512MB")
    parser.add_argument("--overhead-tasks", type=int, default=200)
    parser.add_argument(
        "--skip", default="", help="comma-separated: polars,processes,dicts,skewed,ray,raydata,overhead"
    )
    parser.add_argument("--tmp", default=None, help="directory for input, outputs and scratch")
    args = parser.parse_args(argv)
    records = 1_000_000 if args.quick else args.records
    raydata_records = args.raydata_records or records
    skip = set(filter(None, args.skip.split(",")))
    load_before = os.getloadavg()
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="zephyr-bench-groupby-", dir=args.tmp))
    results: dict[str, dict] = {}
    sizes: dict[str, int] = {}  # records each result was measured on
    outputs: dict[str, Path] = {}
    checks: list[tuple[str, str]] = []  # (result, the result it must equal)

    failures: dict[str, str] = {}

    def measured(name: str, n: int, out: Path, figures: dict) -> None:
        figures["load"] = _load()
        results[name], sizes[name], outputs[name] = figures, n, out
        print(f"  {LABELS[name]} done in {figures['seconds']:.1f} s (load {figures['load']})", flush=True)

    def zephyr(name: str, backend: str, input_dir: Path, keys: str = "fields") -> None:
        out = tmp / f"out-{name}"
        scratch = tmp / "scratch"
        figures = run_zephyr(backend, input_dir, out, scratch, args.workers, args.memory_per_worker, keys=keys)
        measured(name, records, out, figures)

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
        if "polars" not in skip:
            measured("polars", records, tmp / "out-polars", run_polars(input_dir, tmp / "out-polars"))
        if "processes" not in skip:
            zephyr("zephyr_processes", "processes", input_dir)
            zephyr("zephyr_processes_agg", "processes", input_dir, keys="aggregate")
            zephyr("zephyr_processes_fn", "processes", input_dir, keys="functions")
            if "dicts" not in skip:
                zephyr("zephyr_processes_dicts", "processes", input_dir, keys="dicts")
        if "skewed" not in skip:
            skewed_dir = tmp / "input-skewed"
            generate(skewed_dir, records, seed=1, skew=args.skew)
            if "polars" not in skip:
                out = tmp / "out-polars-skewed"
                measured("polars_skewed", records, out, run_polars(skewed_dir, out))
                checks.append(("zephyr_processes_skewed", "polars_skewed"))
            zephyr("zephyr_processes_skewed", "processes", skewed_dir)
        ray_wanted = {"ray", "raydata", "overhead"} - skip
        if ray_wanted:
            import ray

            from zephyr.engine.backends.ray import connect

            connect(None)
            print(f"  local Ray: {ray.cluster_resources().get('CPU')} CPUs", flush=True)
        if "ray" not in skip:
            zephyr("zephyr_ray", "ray", input_dir)
        if "raydata" not in skip:
            raydata_dir = input_dir
            if raydata_records != records:
                raydata_dir = tmp / "input-raydata"
                generate(raydata_dir, raydata_records, seed=2)
                if "polars" not in skip:
                    out = tmp / "out-polars-raydata"
                    measured("polars_raydata_input", raydata_records, out, run_polars(raydata_dir, out))
                    checks.append(("ray_data", "polars_raydata_input"))
            out = tmp / "out-raydata"
            ray_started = time.perf_counter()
            try:
                measured("ray_data", raydata_records, out, run_ray_data(raydata_dir, out, args.workers))
            except Exception as error:  # noqa: BLE001 - a peer that fails is a figure too; ours are still printed
                reason = str(error).strip().splitlines()[0][:300]
                took = time.perf_counter() - ray_started
                failures["ray_data"] = f"{type(error).__name__} after {took:.0f} s: {reason}"
                print(f"  {LABELS['ray_data']} FAILED: {failures['ray_data']}", flush=True)
                checks[:] = [check for check in checks if "ray_data" not in check]
        digests = {name: checksum(path) for name, path in outputs.items()}
        same_input = [n for n in results if sizes[n] == records and "skewed" not in n and "raydata_input" not in n]
        if raydata_records != records and "ray_data" in same_input:
            same_input.remove("ray_data")
        checks += [(name, same_input[0]) for name in same_input[1:]]
        for name, reference in checks:
            if digests[name] != digests[reference]:
                raise SystemExit(f"results differ: {name} {digests[name]} vs {reference} {digests[reference]}")
        groups = digests[same_input[0]]["groups"] if same_input else 0
        overhead: dict[str, float] = {}
        cache: dict[str, tuple[float, int]] = {}
        if "overhead" not in skip:
            from zephyr.engine.backends.ray import RayBackend

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
        f"group_by + secondary sort, {records:,} records ({_mb(input_bytes)} MB), {groups:,} groups; "
        f"{args.workers} workers, memory_per_worker {args.memory_per_worker}"
    )
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (2 cores shared with other users); "
        "each row: the 1/5/15-minute load when it finished"
    )
    header = (
        f"{'system':<28}{'records':>12}{'seconds':>9}{'records/s':>12}{'MB/s':>8}{'peak RSS/worker MB':>20}"
        f"{'driver MB':>11}{'total MB':>10}  load"
    )
    print(header)
    print("-" * len(header))
    for name, failure in failures.items():
        print(f"{LABELS[name]:<28}{sizes.get(name, raydata_records):>12,}  FAILED: {failure}")
    for name, r in results.items():
        n = sizes[name]
        r["records_s"] = n / r["seconds"]
        r["mb_s"] = n * RECORD_BYTES / r["seconds"] / (1 << 20)
        print(
            f"{LABELS[name]:<28}{n:>12,}{r['seconds']:>9.1f}{r['records_s']:>12,.0f}{r['mb_s']:>8.1f}"
            f"{_mb(r['peak_worker']):>20}{_mb(r['peak_driver']) if r['peak_driver'] else '-':>11}"
            f"{_mb(r['peak_total']):>10}  {r['load']}"
        )
    budget = parse_size(args.memory_per_worker)
    for name in (*ZEPHYR_PROCESSES, "zephyr_ray"):
        if name in results:
            peak = results[name]["peak_worker"]
            verdict = "within" if peak <= budget + FIXED_OVERHEAD else "OVER"
            print(
                f"  {LABELS[name]}: peak RSS per worker task {_mb(peak)} MB, {verdict} budget {_mb(budget)} MB + fixed "
                f"overhead {_mb(FIXED_OVERHEAD)} MB; stages (name, s, tasks): {results[name]['stages']}"
            )
    ratios: dict[str, float] = {}
    for name, peer in (
        ("zephyr_processes", "polars"),
        ("zephyr_processes_agg", "polars"),
        ("zephyr_processes_fn", "polars"),
        ("zephyr_processes_dicts", "polars"),
        ("zephyr_processes_skewed", "polars_skewed"),
    ):
        if name in results and peer in results:
            ratios[f"{name}_vs_polars"] = results[name]["records_s"] / results[peer]["records_s"]
            print(f"  {LABELS[name]} vs {LABELS[peer]}: {ratios[f'{name}_vs_polars']:.2f}x records/s")
    if "zephyr_processes_skewed" in results and "zephyr_processes" in results:
        ratios["skewed_vs_balanced_seconds"] = (
            results["zephyr_processes_skewed"]["seconds"] / results["zephyr_processes"]["seconds"]
        )
        print(
            f"  skewed group_by (one key {args.skew:.0%} of records) / balanced, zephyr processes wall time: "
            f"{ratios['skewed_vs_balanced_seconds']:.2f}x"
        )
    for name in ("zephyr_processes", "zephyr_ray"):
        if name in results and "ray_data" in results:
            ratios[f"{name}_vs_ray_data"] = results[name]["records_s"] / results["ray_data"]["records_s"]
            print(
                f"  {LABELS[name]} vs {LABELS['ray_data']}: {ratios[f'{name}_vs_ray_data']:.1f}x records/s"
                + (f" (ray data measured at {raydata_records:,} records)" if raydata_records != records else "")
            )
    for name in (*ZEPHYR_PROCESSES, "zephyr_ray"):
        if name in results and results[name]["retries"]:
            print(f"  {LABELS[name]} retries: {results[name]['retries']}")
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
    if "ray_data" in results or "ray_data" in failures:
        figures["ray_data_records"] = raydata_records
    for name, failure in failures.items():
        figures[f"{name}_failed"] = failure
    for name, r in results.items():
        figures[f"{name}_records_s"] = round(r["records_s"])
        figures[f"{name}_seconds"] = round(r["seconds"], 1)
        figures[f"{name}_mb_s"] = round(r["mb_s"], 2)
        figures[f"{name}_peak_rss_worker_mb"] = round(r["peak_worker"] / (1 << 20))
        figures[f"{name}_peak_rss_total_mb"] = round(r["peak_total"] / (1 << 20))
        figures[f"{name}_load"] = r["load"]
    for name, ratio in ratios.items():
        figures[name] = round(ratio, 3)
    for name, seconds in overhead.items():
        figures[f"task_overhead_ms_{name}"] = round(seconds * 1000, 2)
    for mode, (seconds, loads) in cache.items():
        figures[f"big_object_stage_s_{mode}"] = round(seconds, 2)
        figures[f"big_object_loads_{mode}"] = loads
    figures["fixed_overhead_mb"] = FIXED_OVERHEAD >> 20
    figures["load_before"] = round(load_before[0], 2)
    figures["load_after"] = round(load_after[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
