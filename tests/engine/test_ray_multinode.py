"""The Ray backend on a real cluster of three raylets (`ray start` on 127.0.0.1: a head without CPUs and
worker nodes node_a and node_b, each with its own temp dir, custom resource and working directory),
with scratch on a real GCS emulator bucket: the same output as the processes backend, and the same
output again when a worker node's raylet is killed in the middle of a stage."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray_local import LocalNodes  # noqa: E402

from zephyr import Dataset, UserCodeError, counters, execution  # noqa: E402
from zephyr.fs import url_to_fs  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(gcs_server):
    """Head + node_a + node_b; every node's workers import this checkout and reach the GCS emulator."""
    if ray.is_initialized():
        ray.shutdown()
    nodes = LocalNodes(
        env={
            "PYTHONPATH": str(REPO),  # "the package is installed on every node"
            "STORAGE_EMULATOR_HOST": gcs_server.endpoint,
            "GCE_METADATA_HOST": "127.0.0.1:9",
            "ZEPHYR_METADATA_TIMEOUT": "0.2",
            "ZEPHYR_REGION": "us-central1",  # the nodes' region: "US" buckets are near, EUROPE-WEST4 far
        }
    )
    try:
        nodes.start()
        nodes.add("node_a")
        nodes.add("node_b")
        ray.init(address=nodes.address, log_to_driver=False)
        yield nodes
    finally:
        ray.shutdown()
        nodes.stop()


@pytest.fixture
def bucket(cluster, gcs_env) -> str:
    return gcs_env.create_bucket("US")


def _run(ds: Dataset, backend: str, scratch: str, cluster: LocalNodes | None = None, **overrides):
    if backend == "ray":
        overrides["ray_address"] = cluster.address
    with execution(backend=backend, workers=2, scratch=scratch, progress=False, summary=False, **overrides):
        return ds.execute()


def _events(num: int = 400) -> list[dict]:
    return [
        {"id": i, "user": f"u{(i * 7) % 29:02d}", "ts": (i * 7919) % 1000, "text": f"event {i} " + "x" * (i % 13)}
        for i in range(num)
    ]


def _with_length(record):
    counters.increment("chars", len(record["text"]))
    return {**record, "len": len(record["text"])}


def _summary(user, items):
    items = list(items)
    return {"user": user, "n": len(items), "ts": [r["ts"] for r in items], "ids": [r["id"] for r in items]}


def _grouped(map_fn=_with_length, num: int = 400) -> Dataset:
    return (
        Dataset.from_list(_events(num), num_shards=4)
        .map(map_fn)
        .group_by(lambda r: r["user"], _summary, sort_by=lambda r: (r["ts"], r["id"]), num_shards=3)
    )


def _cwd(_record):
    return os.path.basename(os.getcwd())


# ------------------------------------------------------------------------------------------ the cluster
def test_work_spreads_over_both_nodes_in_their_own_directories(cluster, bucket):
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 3 and ray.cluster_resources()["CPU"] == 2
    ds = Dataset.from_list(list(range(8)), num_shards=8).map(lambda r: (time.sleep(0.3), _cwd(r))[1])
    dirs = set(_run(ds, "ray", f"gs://{bucket}/scratch", cluster).outputs)
    assert dirs == {"work-node_a", "work-node_b"}  # both worker nodes ran shards, not the driver's node


def test_group_by_and_join_match_processes(cluster, bucket, tmp_path):
    users = Dataset.from_list(
        [{"user": f"u{i:02d}", "country": ["de", "fr", "us"][i % 3]} for i in range(0, 29, 2)], num_shards=2
    )
    joined = Dataset.from_list(_events(), num_shards=3).sorted_merge_join(
        users,
        left_key=lambda r: r["user"],
        right_key=lambda r: r["user"],
        how="left",
        combine=lambda e, u: {**e, "country": u["country"] if u else None},
    )
    for ds in (_grouped(), joined):
        reference = _run(ds, "processes", str(tmp_path / "s-processes"))
        on_ray = _run(ds, "ray", f"gs://{bucket}/scratch", cluster)
        assert on_ray.outputs == reference.outputs and on_ray.counters == reference.counters
        assert len(reference.outputs) in (29, 400)
    fs, path = url_to_fs(f"gs://{bucket}/scratch")
    fs.invalidate_cache()
    assert not fs.exists(path) or not fs.find(path), "the run's scratch files were left in the bucket"


@pytest.mark.slow  # ~50 s on 2 busy cores: many small group_by stages through the emulator
def test_fuzzy_dedup_matches_processes(cluster, bucket, tmp_path, shared_data):
    from minhash_corpus import article_chunks, load_article_bodies, plant_near_duplicates

    from zephyr.operators.fuzzy_dedup import FuzzyDedupConfig, fuzzy_dedup

    articles = load_article_bodies(shared_data / "aeb-dev" / "ground-truth.json")[:12]
    docs = plant_near_duplicates(article_chunks(articles), seed=0)  # records with id, text, metadata
    config = FuzzyDedupConfig(num_shards=2)
    results = {}
    for backend, scratch, work in (
        ("processes", str(tmp_path / "s"), str(tmp_path / "work")),
        ("ray", f"gs://{bucket}/scratch", f"gs://{bucket}/fuzzy-work"),
    ):
        overrides = {"ray_address": cluster.address} if backend == "ray" else {}
        with execution(backend=backend, workers=2, scratch=scratch, progress=False, summary=False, **overrides):
            ds = fuzzy_dedup(Dataset.from_list(docs, num_shards=3), config=config, work_dir=work)
            results[backend] = sorted((r["id"], r["dup_cluster"], r["dup_keep"]) for r in ds.collect())
    assert results["ray"] == results["processes"]
    assert sum(1 for _, _, keep in results["ray"] if not keep) > 0, "the corpus has planted duplicates"


@pytest.mark.slow  # ~15 s: keeps the default multi-node module near 2 minutes
def test_tokenize_into_a_bucket_store_matches_processes(cluster, bucket, tmp_path, shared_data, monkeypatch):
    import orjson
    import zstandard

    from zephyr.tokenize import tokenize_dataset

    monkeypatch.setenv("ZEPHYR_STORE_CACHE", str(tmp_path / "cache"))
    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    docs = [{"id": k, "text": v["articleBody"]} for k, v in sorted(truth.items())[:30]]
    fs, _ = url_to_fs(f"gs://{bucket}")
    for k in range(3):  # the input lives in the bucket too: no node reads the driver's disk
        payload = b"\n".join(orjson.dumps(d) for d in docs[k::3]) + b"\n"
        fs.pipe(f"{bucket}/in/part-{k}.jsonl.zst", zstandard.ZstdCompressor().compress(payload))
    with execution(backend="processes", workers=2, scratch=str(tmp_path / "s")):
        tokenize_dataset(f"gs://{bucket}/in/*.jsonl.zst", f"gs://{bucket}/stores/processes")
    with execution(backend="ray", ray_address=cluster.address, workers=2, scratch=f"gs://{bucket}/scratch"):
        result = tokenize_dataset(f"gs://{bucket}/in/*.jsonl.zst", f"gs://{bucket}/stores/ray")
    assert result.shards_written == 3
    fs.invalidate_cache()
    names = sorted(p[len(f"{bucket}/stores/ray/") :] for p in fs.find(f"{bucket}/stores/ray"))
    assert "manifest.json" in names and any(n.endswith("tokens.bin") for n in names)
    for name in names:
        ray, processes = fs.cat_file(f"{bucket}/stores/ray/{name}"), fs.cat_file(f"{bucket}/stores/processes/{name}")
        if name.endswith("shard.json"):  # a done marker: equal but for the time it was written
            ray, processes = ({**json.loads(m), "written_at": None} for m in (ray, processes))
        assert ray == processes, name


# ----------------------------------------------------------------------------- per-stage resources
def _cwd_slow(record):
    time.sleep(0.2)
    return {"x": record, "dir": os.path.basename(os.getcwd())}


def _tag_dir(record):
    time.sleep(0.2)
    return {**record, "dir2": os.path.basename(os.getcwd())}


def test_a_stage_asking_for_a_custom_resource_runs_only_where_it_is(cluster, bucket):
    ds = (
        Dataset.from_list(list(range(6)), num_shards=6)
        .map(_cwd_slow, resources={"node_b": 1})  # only node_b has it: a pool of 1
        .reshard(6)
        .map(_tag_dir)  # the default shape again: both nodes
    )
    records = _run(ds, "ray", f"gs://{bucket}/scratch", cluster).outputs
    assert sorted(r["x"] for r in records) == list(range(6))
    assert {r["dir"] for r in records} == {"work-node_b"}
    assert {r["dir2"] for r in records} == {"work-node_a", "work-node_b"}


def test_a_stage_asking_for_what_no_node_has_is_one_clear_error(cluster, bucket):
    from zephyr.engine.backends.api import ClusterError  # noqa: F401  (the same family of errors)

    ds = Dataset.from_list(list(range(4)), num_shards=2).map(_cwd_slow, resources={"gpus": 1})
    with pytest.raises(
        RuntimeError, match=r"cannot hold one Zephyr worker asking for .*gpus=1.0.*short of GPU 1 \(cluster has 0\)"
    ):
        _run(ds, "ray", f"gs://{bucket}/scratch", cluster)


# --------------------------------------------------------------------------- configuration errors
def test_a_local_scratch_path_on_several_nodes_is_refused(cluster, tmp_path):
    from zephyr.engine.backends.api import ClusterError

    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"is a local path but the Ray cluster has \d nodes") as raised:
        _run(Dataset.from_list([1, 2]), "ray", str(tmp_path / "scratch"), cluster)
    assert "gs://" in str(raised.value) and "\n" not in str(raised.value)
    assert time.monotonic() - started < 10


_HIDE_ZEPHYR = """
# This node's Python cannot import zephyr, as on a machine where it was never installed.
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "zephyr" or name.startswith("zephyr."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


@pytest.mark.slow  # ~15 s: starts a fourth raylet
def test_a_node_without_the_package_is_one_clear_error(cluster, bucket, tmp_path):
    from zephyr.engine.backends.api import ClusterError

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_HIDE_ZEPHYR)
    saved = dict(cluster.env)
    cluster.env.update(PYTHONPATH=str(site))
    try:
        cluster.add("node_c", cpus=0)  # no CPUs: only a stage asking for node_c goes there, now and later
    finally:
        cluster.env.clear()
        cluster.env.update(saved)
    started = time.monotonic()
    ds = Dataset.from_list(list(range(2)), num_shards=2).map(_cwd_slow, resources={"node_c": 1, "cpus": 0})
    with pytest.raises(ClusterError, match="cannot import 'zephyr'") as raised:
        _run(ds, "ray", f"gs://{bucket}/scratch", cluster)
    assert "every node of the Ray cluster needs the same Zephyr" in str(raised.value)
    assert time.monotonic() - started < 60


# ------------------------------------------------------------------------------- run-wide budget
def test_workers_on_two_nodes_share_one_cross_region_budget(cluster, gcs_env, monkeypatch):
    from test_run_budget import FILE_BYTES, assert_run_refusal, write_far_files

    from zephyr.fs.transfer_budget import CrossRegionBudgetExceeded

    monkeypatch.setenv("ZEPHYR_REGION", "us-central1")
    far = gcs_env.create_bucket("EUROPE-WEST4")
    near = gcs_env.create_bucket("US")
    urls = write_far_files(far)
    scratch = f"gs://{near}/scratch"
    ds = Dataset.from_files(urls).map(lambda r: {"n": len(r["text"]), "dir": os.path.basename(os.getcwd())})
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "2500000")  # the driver's setting is the run's
    fits = _run(ds, "ray", scratch, cluster)
    assert {r["dir"] for r in fits.outputs} == {"work-node_a", "work-node_b"}
    assert 6 * FILE_BYTES * 0.95 < fits.counters["fs/cross_region_bytes"] <= 2_500_000
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "1300000")  # ~0.9 MB per worker, 1.8 MB for the run
    with pytest.raises((CrossRegionBudgetExceeded, UserCodeError)) as raised:
        _run(ds, "ray", scratch, cluster, max_user_retries=0)
    assert_run_refusal(raised.value, far, 1_300_000)


# ------------------------------------------------------------------------------------- a node dies
def _slow_on_node_a(marker: str):
    """A map that, on node_a, says so through `marker` and slows down: the test kills node_a meanwhile."""

    def fn(record):
        if os.path.basename(os.getcwd()) == "work-node_a":
            if not os.path.exists(marker):
                with open(marker, "w") as handle:
                    handle.write(str(os.getpid()))
            time.sleep(0.05)
        return _with_length(record)

    return fn


def test_killed_worker_node_gives_identical_output_with_retries_reported(cluster, bucket, tmp_path):
    reference = _run(_grouped(_with_length, 200), "processes", str(tmp_path / "s-processes"))
    marker = tmp_path / "node_a-started"
    killed: list[float] = []

    def kill_when_node_a_works():
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if marker.exists():
            cluster.kill_raylet("node_a")
            killed.append(time.perf_counter())

    killer = threading.Thread(target=kill_when_node_a_works, daemon=True)
    killer.start()
    started = time.perf_counter()
    result = _run(_grouped(_slow_on_node_a(str(marker)), 200), "ray", f"gs://{bucket}/scratch", cluster)
    seconds = time.perf_counter() - started
    killer.join(timeout=5)
    assert killed, "node_a never ran a shard: the test did not exercise a lost node"
    assert result.outputs == reference.outputs
    assert result.counters == reference.counters  # the lost attempts' counts are not added
    retries = [reason for stage in result.stages for reason in stage.retries]
    assert retries and all("lost worker" in reason and "died" in reason for reason in retries), retries
    assert any(f"pid {marker.read_text()}" in reason for reason in retries), retries
    print(f"\nrun with node_a killed {killed[0] - started:.1f} s in: {seconds:.1f} s; retries: {retries}")
