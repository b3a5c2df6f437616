"""A real process running real engine jobs shard by shard and writing a "zephyr.run/1" run record as it goes.

Used by the live-view tests: `python live_run.py RECORD_DIR SHARDS PAUSE_SECONDS`. The record follows
docs/RUN_RECORD.md (atomic temp file + rename, rewritten after every shard); one shard fails once
with a real exception and the engine retries it, so the retries table has a real entry with this pid and host.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Flaky:
    def __init__(self) -> None:
        self.failed = False

    def __call__(self, record: dict) -> dict:
        if record["i"] == 2 and not self.failed:
            self.failed = True
            raise RuntimeError("planted failure of shard 2, attempt 1")
        return {**record, "double": record["i"] * 2}


def main() -> None:
    from zephyr import Dataset, execution

    record_dir, shards, pause = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    started = time.time()
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    runs = record_dir / "_runs"
    runs.mkdir(parents=True, exist_ok=True)
    stage = {
        "index": 0,
        "name": "from_list -> map(Flaky)",
        "shards": shards,
        "shards_done": 0,
        "resumed_shards": 0,
        "records_in": 0,
        "records_out": 0,
        "bytes_in": 0,
        "bytes_out": 0,
        "seconds": 0.0,
        "records_per_s": None,
        "eta_seconds": None,
        "peak_rss": 0,
        "retries": [],
    }
    record = {
        "format": "zephyr.run/1",
        "run_id": run_id,
        "status": "running",
        "command": sys.argv,
        "script": __file__,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "backend": "local",
        "workers": 1,
        "started_at": _now(),
        "updated_at": _now(),
        "finished_at": None,
        "seconds": 0.0,
        "versions": {"zephyr": "0.1.0", "python": sys.version.split()[0]},
        "error": None,
        "steps": [],
        "jobs": [
            {
                "job": 0,
                "step": None,
                "status": "running",
                "started_at": _now(),
                "seconds": 0.0,
                "counters": {},
                "stages": [stage],
            }
        ],
    }

    def write() -> None:
        record["updated_at"] = _now()
        record["seconds"] = time.time() - started
        tmp = runs / f".tmp-{run_id}.json"
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, runs / f"{run_id}.json")

    write()
    flaky = Flaky()
    with execution(backend="local", summary=False, progress=False):
        for shard in range(shards):
            rows = [{"i": shard, "j": j} for j in range(100)]
            result = Dataset.from_list(rows).map(flaky).execute()  # the engine retries the planted failure
            out = result.outputs
            for attempt, reason in enumerate(result.stages[0].retries, start=1):
                # local backend: the shard ran in this process, so the worker is this pid on this host
                stage["retries"].append(
                    {
                        "shard": shard,
                        "attempt": attempt,
                        "kind": "user",
                        "error": reason[:300],
                        "worker_pid": os.getpid(),
                        "worker_host": socket.gethostname(),
                    }
                )
            stage["shards_done"] += 1
            stage["records_in"] += len(rows)
            stage["records_out"] += len(out)
            stage["seconds"] = time.time() - started
            stage["records_per_s"] = stage["records_in"] / stage["seconds"]
            stage["eta_seconds"] = (shards - stage["shards_done"]) * stage["seconds"] / stage["shards_done"]
            record["jobs"][0]["counters"] = {"rows": stage["records_out"]}
            record["jobs"][0]["seconds"] = stage["seconds"]
            write()
            time.sleep(pause)
    record["jobs"][0]["status"] = "succeeded"
    record["status"] = "succeeded"
    record["finished_at"] = _now()
    write()


if __name__ == "__main__":
    main()
