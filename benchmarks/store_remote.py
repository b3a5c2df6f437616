"""Training from a bucket token store by byte ranges, beside the same store local (issue 33).

    .venv/bin/python benchmarks/store_remote.py [--quick] [--gb 4.2] [--cache 256MB] [--steps 20] [--keep]

1. Builds a token store of --gb GB (default 4.2; --quick 0.1) with the store writer (chunk digests and
   all): real tokens, the SmolLM2 tokenization of the shared aeb-dev articles (else this repository's
   Markdown), whole documents in a seeded order, repeated to size. Shards of 8 MB of tokens: the S3
   emulator reads a whole object for every ranged GET (moto and gcp-storage-emulator both do; S3 and
   GCS do not), so larger shards would time the emulator, not the reader.
2. Serves it from moto (the S3 emulator, a server on 127.0.0.1, objects spilled to disk) and keeps the
   local directory beside it.
3. Trains the same small model twice on each (local, bucket, then bucket, local; the best round of
   each is kept: the machine is shared): a Llama of hidden 32, 2 layers, 2 heads, vocab 49,152
   (1.6M parameters, nearly all the tied embedding), batch 4 x seq_len 2048, f32, the trainer's own
   loop with its default read-ahead (data.prefetch 2). Small so that a step takes well under a
   second here and the input pipeline is not hidden behind compute; the loss equality of the two runs
   checks that they trained on the same tokens. The bucket rounds start with an empty chunk cache
   bounded to --cache (ZEPHYR_STORE_CACHE_MAX).
   Reported: training tokens/s (the trainer's, compile excluded) local and bucket, bytes fetched from
   the bucket against the bytes of the sequences trained on, the cache's peak size on disk against its
   bound (sampled every 50 ms), time to the first batch (open + read) and to the first step (compile
   included) from a cold start.
4. Raw reading speed of random windows (batches of 16 x 2049 tokens) from the bucket: ours
   (TokenStore.windows: ranged reads, chunk digests checked, cache kept), plain fsspec cat_ranges of
   the exact windows (nothing checked), and TensorStore's kvstore byte-range reads of the same windows
   (the peer, run from .venv-peers when it has tensorstore: `make peers`; skipped otherwise).

The multi-GB stores are deleted at the end (--keep keeps them under --workdir for a rerun). The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARD_TOKENS = 4 << 20  # 8 MB of uint16 per shard
SEQ_LEN, BATCH = 2048, 4
PEER_PYTHON = REPO / ".venv-peers" / "bin" / "python"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _texts() -> list[str]:
    truth = REPO.parent / "shared" / "data" / "aeb-dev" / "ground-truth.json"
    if truth.is_file():
        return [v["articleBody"] for _, v in sorted(json.loads(truth.read_text()).items())]
    return [p.read_text() for p in sorted(REPO.rglob("*.md")) if ".venv" not in p.parts]


def build_store(root: Path, target_bytes: int) -> Path:
    """A local store of about ``target_bytes`` of real tokens (reused when one of that size is there)."""
    import numpy as np

    from zephyr.tokenize.store_write import ShardWriter, write_manifest
    from zephyr.tokenize.tokenizer import load_tokenizer

    shards = max(1, round(target_bytes / (2 * SHARD_TOKENS)))
    store = root / f"store-{shards}x8MB"
    if (store / "manifest.json").is_file():
        return store
    shutil.rmtree(store, ignore_errors=True)
    tokenizer = load_tokenizer("smollm2")
    docs = [np.asarray(d, dtype=np.uint16) for d in tokenizer.encode_batch(_texts(), add_bos=False, add_eos=True)]
    lengths = np.asarray([len(d) for d in docs])
    rng = np.random.default_rng(0)
    records = []
    for k in range(shards):
        order, total = [], 0
        while total < SHARD_TOKENS:  # whole documents in a seeded order until the shard is full
            for i in rng.permutation(len(docs)).tolist():
                order.append(i)
                total += int(lengths[i])
                if total >= SHARD_TOKENS:
                    break
        flat = np.concatenate([docs[i] for i in order])
        with ShardWriter(
            store,
            f"shards/{k:05d}",
            dtype=np.dtype(np.uint16),
            vocab_size=tokenizer.info.vocab_size,
            source=f"bench-{k}",
            config_hash="bench",
        ) as writer:
            writer.add_flat(flat, lengths[order])
            records.append(writer.close())
    write_manifest(
        store,
        shards=records,
        dtype=np.dtype(np.uint16),
        tokenizer=tokenizer.info.to_manifest(),
        sources=["benchmark"],
        split="train",
        config={"benchmark": "store_remote"},
        config_hash="bench",
    )
    return store


@contextlib.contextmanager
def moto_server(spill: Path):
    """moto's S3 server on a free loopback port, objects over 1 MB spilled to files under ``spill``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spill.mkdir(parents=True, exist_ok=True)
    moto = Path(sys.executable).parent / "moto_server"
    cmd = [str(moto), "-H", "127.0.0.1", "-p", str(port)]
    env = {**os.environ, "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(1 << 20), "TMPDIR": str(spill)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(Exception), urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                break
            time.sleep(0.1)
        os.environ.update(
            AWS_ENDPOINT_URL_S3=endpoint,
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            ZEPHYR_REGION="us-east-1",
        )
        yield endpoint, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def upload(store: Path, url: str) -> float:
    """Put every file of the store in the bucket (the manifest last); returns seconds."""
    from zephyr.fs import url_to_fs

    started = time.perf_counter()
    fs, root = url_to_fs(url)
    fs.mkdir(root.split("/")[0])
    files = sorted(p for p in store.rglob("*") if p.is_file() and p.name != "manifest.json")
    for i in range(0, len(files), 64):
        part = files[i : i + 64]
        fs.put([str(p) for p in part], [f"{root}/{p.relative_to(store).as_posix()}" for p in part])
    fs.put_file(str(store / "manifest.json"), f"{root}/manifest.json")
    return time.perf_counter() - started


def _cache_bytes(root: Path) -> int:
    total = 0
    for path in (root / ".chunks").rglob("*") if (root / ".chunks").is_dir() else []:
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_blocks * 512
    return total


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def train_once(store: str, out: Path, steps: int, cache_root: Path, moto_pid: int) -> dict:
    """One training run of the benchmark model on ``store``; the figures of section 3."""
    import zephyr.train.trainer as trainer
    from zephyr.train.config import DataConfig, LossConfig, ModelConfig, OptimizerConfig, TrainConfig

    config = TrainConfig(
        model=ModelConfig(
            vocab_size=49152,
            hidden_dim=32,
            intermediate_dim=64,
            num_layers=2,
            num_heads=2,
            num_kv_heads=1,
            max_seq_len=SEQ_LEN,
            remat="none",
        ),
        loss=LossConfig(vocab_block=8192, token_block=4096),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=5),
        data=DataConfig(train={"bench": (store, 1.0)}, seq_len=SEQ_LEN, batch_size=BATCH, seed=0),
        steps=steps,
        output_dir=str(out),
        resume=False,
        log_every=1,
        progress=False,
    )
    shutil.rmtree(out, ignore_errors=True)
    mixtures = []
    original = trainer.make_mixture

    def keep(data):  # the trainer's own mixture, to read its stores' fetch counts afterwards
        mixtures.append(original(data))
        return mixtures[-1]

    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _cache_bytes(cache_root))

    sampler = threading.Thread(target=sample, daemon=True)
    trainer.make_mixture = keep
    sampler.start()
    wall, moto_cpu, own_cpu = time.time(), _cpu_seconds(moto_pid), time.process_time()
    try:
        result = trainer.train(config)
    finally:
        trainer.make_mixture = original
        done.set()
        sampler.join()
    peak[0] = max(peak[0], _cache_bytes(cache_root))
    records = [r for r in trainer.read_metrics(result.metrics_path) if "tokens_per_s" in r and "step" in r]
    first = next(r for r in records if r["step"] == 1)
    steady = sorted(r["tokens_per_s"] for r in records if r["step"] > 1)  # per step; less swayed by load swings
    stats = mixtures[0].components[0].store.fetch_stats
    return {
        "tokens_per_s": result.tokens_per_second,
        "median_step_tok_s": steady[len(steady) // 2],
        "final_loss": result.final_loss,
        "first_step_s": first["time"] - wall,
        "bytes_fetched": stats.bytes_fetched if stats else 0,
        "requests": stats.requests if stats else 0,
        "cache_peak": peak[0],
        "moto_cpu_s": _cpu_seconds(moto_pid) - moto_cpu,  # the emulator's work: a bucket's, done on this machine
        "train_cpu_s": time.process_time() - own_cpu,
        "wall_s": time.time() - wall,
    }


def first_batch_seconds(store: str) -> float:
    from zephyr.tokenize.mixture import Mixture

    started = time.perf_counter()
    Mixture({"bench": (store, 1.0)}, seq_len=SEQ_LEN, seed=0).batch(0, BATCH)
    return time.perf_counter() - started


def raw_reads(url: str, local: Path, endpoint: str, batches: int) -> dict:
    """Windows/s from the bucket: ours, plain fsspec cat_ranges, TensorStore (section 4)."""
    import numpy as np

    from zephyr.fs import url_to_fs
    from zephyr.tokenize.store import TokenStore

    store = TokenStore(url)
    rng = np.random.default_rng(7)
    picks = [rng.integers(0, store.num_windows(SEQ_LEN), size=16) for _ in range(batches)]
    out = {}
    started = time.perf_counter()
    for rows in picks:
        store.windows(rows, SEQ_LEN)
    out["ours_windows_s"] = 16 * batches / (time.perf_counter() - started)
    # The same windows as exact byte ranges of tokens.bin (one window may span two shards: then its first part).
    starts = np.cumsum([0] + [int(s["tokens"]) for s in store.manifest["shards"]])
    ranges = []
    for rows in picks:
        batch = []
        for w in rows.tolist():
            k = int(np.searchsorted(starts, w * SEQ_LEN, side="right")) - 1
            a = w * SEQ_LEN - int(starts[k])
            b = min(a + SEQ_LEN + 1, int(starts[k + 1] - starts[k]))
            batch.append((f"{store.manifest['shards'][k]['path']}/tokens.bin", 2 * a, 2 * b))
        ranges.append(batch)
    fs, root = url_to_fs(url)
    started = time.perf_counter()
    for batch in ranges:
        fs.cat_ranges([f"{root}/{p}" for p, _, _ in batch], [a for _, a, _ in batch], [b for _, _, b in batch])
    out["fsspec_windows_s"] = 16 * batches / (time.perf_counter() - started)
    out["tensorstore_windows_s"] = _tensorstore(root, ranges, endpoint)
    return out


_TENSORSTORE = """
import json, sys, time
import tensorstore as ts
spec, ranges = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
bucket, prefix = spec["root"].split("/", 1)
kv = ts.KvStore.open({"driver": "s3", "bucket": bucket, "endpoint": spec["endpoint"], "aws_region": "us-east-1",
                      "path": prefix + "/"}).result()
kv.read(ranges[0][0][0], byte_range=slice(0, 8)).result()  # connect
start = time.perf_counter()
for batch in ranges:
    futures = [kv.read(p, byte_range=slice(a, b)) for p, a, b in batch]
    sizes = [len(f.result().value) for f in futures]
    assert sizes == [b - a for _, a, b in batch], sizes
print(json.dumps({"windows_s": sum(map(len, ranges)) / (time.perf_counter() - start)}))
"""


def _tensorstore(root: str, ranges: list, endpoint: str) -> float | None:
    python = Path(os.environ.get("ZEPHYR_BENCH_TENSORSTORE_PYTHON", PEER_PYTHON))
    if not python.exists():
        print(f"  (TensorStore skipped: {python} missing; `make peers` installs it)")
        return None
    with open(Path(os.environ["ZEPHYR_STORE_CACHE"]) / "ranges.json", "w") as handle:
        json.dump(ranges, handle)
    proc = subprocess.run(
        [str(python), "-c", _TENSORSTORE, json.dumps({"root": root, "endpoint": endpoint}), handle.name],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode:
        print(f"  (TensorStore failed: {proc.stderr.strip()[-600:]})")
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["windows_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 0.1 GB store, 6 steps")
    parser.add_argument("--gb", type=float, default=None, help="store size in GB (default 4.2; --quick 0.1)")
    parser.add_argument("--cache", default="256MB", help="chunk cache bound (ZEPHYR_STORE_CACHE_MAX)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 20; --quick 6)")
    parser.add_argument("--workdir", default=str(REPO / ".zephyr" / "bench_store_remote"))
    parser.add_argument("--keep", action="store_true", help="keep the local store for a rerun")
    args = parser.parse_args()
    gb = args.gb if args.gb is not None else (0.1 if args.quick else 4.2)
    steps = args.steps if args.steps is not None else (6 if args.quick else 20)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still removes its multi-GB files
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    cache_root = work / "cache"
    shutil.rmtree(cache_root, ignore_errors=True)
    os.environ.update(ZEPHYR_STORE_CACHE=str(cache_root), ZEPHYR_STORE_CACHE_MAX=args.cache)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from zephyr.tokenize.store_format import store_cache_max

    bound = store_cache_max()
    print(f"load before: {_load()}")
    started = time.perf_counter()
    local = build_store(work, int(gb * 1e9))
    size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    tokens_bytes = sum(p.stat().st_size for p in local.rglob("tokens.bin"))
    shards = len(list(local.glob("shards/*")))
    print(
        f"store: {local} ({size / 1e9:.2f} GB, tokens.bin {tokens_bytes / 1e9:.2f} GB) in "
        f"{time.perf_counter() - started:.0f}s"
    )
    try:
        with moto_server(work / "moto-spill") as (endpoint, moto_pid):
            url = "s3://zephyr-bench/stores/web"
            print(f"upload to moto: {upload(local, url):.0f}s")
            shutil.rmtree(cache_root, ignore_errors=True)
            first = {"local": first_batch_seconds(str(local)), "bucket": first_batch_seconds(url)}
            runs: dict[str, list[dict]] = {"local": [], "bucket": []}
            for round_ in range(2):
                order = [("local", str(local)), ("bucket", url)]
                for name, path in order if round_ % 2 == 0 else order[::-1]:  # neither always runs first
                    shutil.rmtree(cache_root, ignore_errors=True)
                    run = train_once(path, work / "runs" / f"{name}-{round_}", steps, cache_root, moto_pid)
                    runs[name].append(run)
                    print(
                        f"  round {round_} {name:6s}: {run['tokens_per_s']:,.0f} tok/s, loss {run['final_loss']:.4f}, "
                        f"first step {run['first_step_s']:.1f}s, fetched {run['bytes_fetched'] / 1e6:.1f} MB, "
                        f"cache peak {run['cache_peak'] / 1e6:.1f} MB, CPU s: trainer {run['train_cpu_s']:.0f} "
                        f"moto {run['moto_cpu_s']:.1f} in {run['wall_s']:.0f}s wall | load {_load()}"
                    )
            shutil.rmtree(cache_root, ignore_errors=True)
            raw = raw_reads(url, local, endpoint, 8 if args.quick else 40)
    finally:
        if not args.keep:
            shutil.rmtree(local, ignore_errors=True)
        shutil.rmtree(work / "moto-spill", ignore_errors=True)
        shutil.rmtree(cache_root, ignore_errors=True)
        shutil.rmtree(work / "runs", ignore_errors=True)

    best = {name: max(rs, key=lambda r: r["tokens_per_s"]) for name, rs in runs.items()}
    trained = steps * BATCH * (SEQ_LEN + 1) * 2
    fetched = max(r["bytes_fetched"] for r in runs["bucket"])
    peak = max(r["cache_peak"] for r in runs["bucket"])
    same = len({round(r["final_loss"], 6) for rs in runs.values() for r in rs}) == 1
    ratio = best["bucket"]["tokens_per_s"] / best["local"]["tokens_per_s"]
    median = {name: max(r["median_step_tok_s"] for r in rs) for name, rs in runs.items()}
    print()
    print(
        f"store {size / 1e9:.2f} GB ({shards} shards), cache bound {bound / 1e6:.0f} MB, "
        f"model: Llama hidden 32 x 2 layers, vocab 49,152, batch {BATCH} x {SEQ_LEN}, {steps} steps; load {_load()}"
    )
    print(f"{'':24s}{'local (mmap)':>16s}{'bucket (ranges)':>18s}")
    print(
        f"{'training tokens/s':24s}{best['local']['tokens_per_s']:>16,.0f}{best['bucket']['tokens_per_s']:>18,.0f}"
        f"   ratio {ratio:.3f}"
    )
    print(
        f"{'median step tokens/s':24s}{median['local']:>16,.0f}{median['bucket']:>18,.0f}"
        f"   ratio {median['bucket'] / median['local']:.3f}"
    )
    print(f"{'first batch (s)':24s}{first['local']:>16.2f}{first['bucket']:>18.2f}")
    print(
        f"{'first step (s, +compile)':24s}{best['local']['first_step_s']:>16.1f}{best['bucket']['first_step_s']:>18.1f}"
    )
    print(
        f"bytes fetched {fetched / 1e6:.2f} MB for {trained / 1e6:.2f} MB trained on: {fetched / trained:.3f}x "
        f"({max(r['requests'] for r in runs['bucket'])} requests)"
    )
    print(
        f"cache peak on disk {peak / 1e6:.1f} MB, bound {bound / 1e6:.1f} MB: {'within' if peak <= bound else 'OVER'}"
    )
    print(f"same losses local and bucket (same batches): {same}")
    ts_s = raw["tensorstore_windows_s"]
    print(
        f"raw reads, windows of {SEQ_LEN + 1} tokens/s: ours {raw['ours_windows_s']:,.0f}, fsspec cat_ranges "
        f"{raw['fsspec_windows_s']:,.0f}, TensorStore {'-' if ts_s is None else f'{ts_s:,.0f}'}"
    )
    print(
        json.dumps(
            {
                "bench": "store_remote",
                "store_gb": round(size / 1e9, 3),
                "shards": shards,
                "cache_bound": bound,
                "steps": steps,
                "local_tok_s": round(best["local"]["tokens_per_s"], 1),
                "bucket_tok_s": round(best["bucket"]["tokens_per_s"], 1),
                "ratio": round(ratio, 4),
                "median_step_tok_s": {k: round(v, 1) for k, v in median.items()},
                "median_ratio": round(median["bucket"] / median["local"], 4),
                "bytes_fetched_over_trained": round(fetched / trained, 4),
                "cache_peak": peak,
                "cache_within_bound": peak <= bound,
                "first_batch_s": {k: round(v, 3) for k, v in first.items()},
                "first_step_s": {k: round(v["first_step_s"], 2) for k, v in best.items()},
                "same_losses": same,
                "moto_cpu_s_per_bucket_run": round(max(r["moto_cpu_s"] for r in runs["bucket"]), 2),
                "raw_windows_s": {k: (round(v, 1) if v is not None else None) for k, v in raw.items()},
                "load": _load(),
            }
        )
    )


if __name__ == "__main__":
    main()
