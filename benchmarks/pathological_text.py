"""Pathological text: one huge document without spaces, through MinHash and tokenization (issue #17 item 15).

    .venv/bin/python benchmarks/pathological_text.py [--mb 4]

Inputs (generated, same for everyone): a document of N MB without a single space ("nospace"), and
N MB of ordinary words ("words"), for reference. Each measurement runs in its own process, so
the peak RSS is that measurement's.

- minhash: ours `minhash_signatures` (word 5-grams, 112 permutations) beside datasketch's
  `MinHash` fed the same word 5-gram shingles (the peer).
- tokenize: ours `Tokenizer.encode_flat` (SmolLM2 tokenizer, chunked at safe spaces; a stretch
  without one past 10 chunk lengths is cut anyway) beside Hugging Face `tokenizers` encoding the
  whole document (the peer).

Prints a table with the machine load (`uptime`), then one JSON line.

Measured here (2 cores shared with other engineers), 4 MB documents, seconds / peak MB:

                               before #17 item 15 (load 8.0)   after (load 6.2)
  minhash ours, no spaces        26.96 s                         0.04 s
  minhash datasketch, no spaces   0.01 s                         0.03 s
  tokenize ours, no spaces        5.12 s / 281 MB                1.51 s / 198 MB
  tokenize HF whole, no spaces    8.57 s / 445 MB                9.85 s / 444 MB
  tokenize ours, words            0.19 s / 200 MB                0.25 s / 201 MB
(peak MB includes the imports; on today's main `import zephyr.operators` alone takes ~125 MB, 39 MB before)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_MEASURE = r"""
import json, resource, sys, time
kind, who, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
n = int(mb * 1_000_000)
text = "a" * n if kind == "nospace" else ("word " * (n // 5))
if who.startswith("minhash"):
    from zephyr.operators.minhash import minhash_signatures
    if who == "minhash-ours":
        minhash_signatures(["warm up text here"])
        t = time.perf_counter(); minhash_signatures([text]); dt = time.perf_counter() - t
    else:
        from datasketch import MinHash
        t = time.perf_counter()
        words = text.split()
        shingles = {" ".join(words[i:i + 5]) for i in range(max(1, len(words) - 4))}
        m = MinHash(num_perm=112); m.update_batch([s.encode() for s in shingles]); dt = time.perf_counter() - t
else:
    from zephyr.tokenize import load_tokenizer
    tok = load_tokenizer()
    tok.encode_flat(["warm up"])
    t = time.perf_counter()
    if who == "tokenize-ours":
        tok.encode_flat([text])
    else:
        tok.hf.encode(text, add_special_tokens=False)
    dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _measure(kind: str, who: str, mb: float) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, kind, who, str(mb)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=4.0, help="document size in MB (default 4)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = {}
    print(f"pathological text, {args.mb:g} MB documents; load {load:.1f} on {os.cpu_count()} cores")
    print(f"{'measurement':<28} {'seconds':>9} {'peak MB':>9}")
    for kind in ("nospace", "words"):
        for who in ("minhash-ours", "minhash-datasketch", "tokenize-ours", "tokenize-hf-whole"):
            r = _measure(kind, who, args.mb)
            rows[f"{who}-{kind}"] = r
            print(f"{who + ' ' + kind:<28} {r['seconds']:>9.2f} {r['peak_mb']:>9.0f}")
    result = {
        "bench": "pathological_text",
        "mb": args.mb,
        "load": round(load, 1),
        "ours_minhash_nospace_s": round(rows["minhash-ours-nospace"]["seconds"], 3),
        "peer_minhash_nospace_s": round(rows["minhash-datasketch-nospace"]["seconds"], 3),
        "ours_tokenize_nospace_s": round(rows["tokenize-ours-nospace"]["seconds"], 2),
        "ours_tokenize_nospace_peak_mb": round(rows["tokenize-ours-nospace"]["peak_mb"]),
        "peer_tokenize_nospace_s": round(rows["tokenize-hf-whole-nospace"]["seconds"], 2),
        "peer_tokenize_nospace_peak_mb": round(rows["tokenize-hf-whole-nospace"]["peak_mb"]),
        "ours_tokenize_words_s": round(rows["tokenize-ours-words"]["seconds"], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
