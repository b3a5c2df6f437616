"""Fast classifiers trained on LM labels, so the whole corpus never has to see the LM.

Two kinds, both predicting a score on the label scale:
- `fasttext`: labels binned to the nearest label value, supervised fastText; the score is the
  expected bin value under the predicted distribution (so it is continuous and ranks documents).
- `embedding`: mean-pooled sentence embeddings (all-MiniLM-L6-v2, packaged offline) and a ridge
  regression on the LM scores, clipped to the label range.

A trained classifier is a directory (`meta.json` + model file) that `load_classifier` reads once
per process: scoring on many engine batches reuses the loaded model.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zephyr.datashop.config import ClassifierConfig

__all__ = ["TrainedClassifier", "train_classifier", "load_classifier", "is_loaded", "nearest_bin", "fasttext_text"]

_FORMAT_VERSION = 1
_LOCK = threading.Lock()
_LOADED: dict[tuple[str, int], TrainedClassifier] = {}
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def nearest_bin(scores: Sequence[float] | np.ndarray, bin_values: Sequence[float]) -> np.ndarray:
    """Index of the nearest label value for each score (ties go to the lower value)."""
    values = np.asarray(bin_values, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    return np.abs(s[:, None] - values[None, :]).argmin(axis=1)


def fasttext_text(text: str, max_chars: int) -> str:
    """fastText input: lowercased word and punctuation tokens on one line."""
    return " ".join(_TOKEN.findall(text[:max_chars].lower()))


@dataclass(frozen=True)
class TrainedClassifier:
    """A loaded classifier. `predict` maps texts to scores on the label scale."""

    path: str
    kind: str
    bin_values: tuple[float, ...]
    max_chars: int
    meta: dict[str, Any]
    model: Any  # fasttext model, or (embedder, weights, bias)

    @property
    def score_range(self) -> tuple[float, float]:
        return min(self.bin_values), max(self.bin_values)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float64)
        lo, hi = self.score_range
        if self.kind == "fasttext":
            values = dict(zip((f"__label__{i}" for i in range(len(self.bin_values))), self.bin_values, strict=False))
            lines = [fasttext_text(t, self.max_chars) for t in texts]
            labels, probs = self.model.predict(lines, k=-1)
            out = np.empty(len(texts), dtype=np.float64)
            for j, (row_labels, row_probs) in enumerate(zip(labels, probs, strict=False)):
                total = float(np.sum(row_probs))
                out[j] = (
                    sum(values[lab] * p for lab, p in zip(row_labels, row_probs, strict=False)) / total
                    if total > 0
                    else lo
                )
            return np.clip(out, lo, hi)
        embedder, weights, bias = self.model
        emb = _embed(embedder, texts, self.max_chars, int(self.meta.get("batch_size", 64)))
        return np.clip(emb @ weights + bias, lo, hi)


def _embed(embedder: Any, texts: Sequence[str], max_chars: int, batch_size: int) -> np.ndarray:
    """[N, D] normalized embeddings, `batch_size` texts per forward pass (sentence-transformers sorts by length).

    Texts are cut to what the tokenizer can keep (~16 characters per kept token) before tokenizing, and the
    thread count is whatever the process set once (`set_torch_threads_once`): flipping it per call costs more
    than a small batch's forward pass.
    """
    import torch

    limit = min(max_chars, 16 * int(embedder.max_seq_length or max_chars))
    cut = [t[:limit] for t in texts]
    with torch.inference_mode():
        vectors = embedder.encode(
            cut, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_tensor=True
        )  # a tensor: numpy has no bfloat16
    return vectors.float().numpy().astype(np.float64)  # [N, D]


def train_classifier(
    texts: Sequence[str],
    scores: Sequence[float],
    config: ClassifierConfig,
    out_dir: str | Path,
    *,
    bin_values: Sequence[float],
) -> TrainedClassifier:
    """Train on (text, LM score) pairs and save to `out_dir`; returns the loaded classifier."""
    if len(texts) != len(scores):
        raise ValueError(f"train_classifier got {len(texts)} texts but {len(scores)} scores; they must pair up")
    if len(texts) < 2:
        raise ValueError(f"train_classifier needs at least 2 labeled documents, got {len(texts)}; raise pool.size")
    bin_values = tuple(float(v) for v in sorted(set(bin_values)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    meta: dict[str, Any] = {
        "format_version": _FORMAT_VERSION,
        "kind": config.kind,
        "bin_values": list(bin_values),
        "max_chars": config.max_chars,
        "train_size": len(texts),
        "batch_size": config.batch_size,
    }
    if config.kind == "fasttext":
        meta.update(_train_fasttext(texts, scores, config, out, bin_values))
    else:
        meta.update(_train_embedding(texts, scores, config, out))
    meta["train_seconds"] = time.perf_counter() - start
    tmp = out / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, out / "meta.json")  # meta.json last: its presence means the directory is complete
    return load_classifier(out)


def _train_fasttext(
    texts: Sequence[str], scores: Sequence[float], config: ClassifierConfig, out: Path, bin_values: tuple[float, ...]
) -> dict[str, Any]:
    try:
        # The import is the check (training runs in a subprocess): a missing or broken install fails here.
        import fasttext  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("The fastText classifier needs fastText: pip install 'fasttext-numpy2-wheel>=0.9.2'") from exc
    bins = nearest_bin(scores, bin_values)
    fd, train_path = tempfile.mkstemp(prefix="fasttext-train-", suffix=".txt", dir=out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for text, b in zip(texts, bins, strict=False):
                f.write(f"__label__{int(b)} {fasttext_text(text, config.max_chars)}\n")
        lr = config.lr
        for attempt in range(3):
            error = _fasttext_subprocess(
                train_path,
                out / "model.bin",
                {
                    "epoch": config.epoch,
                    "lr": lr,
                    "wordNgrams": config.word_ngrams,
                    "dim": config.dim,
                    "minCount": config.min_count,
                    "bucket": config.bucket,
                    "seed": config.seed,
                },
            )
            if error is None:
                break
            if "NaN" not in error or attempt == 2:
                raise RuntimeError(f"fastText training on {len(texts)} documents failed: {error}")
            lr /= 2  # diverged: the standard remedy is a lower learning rate
    finally:
        os.unlink(train_path)
    counts = np.bincount(bins, minlength=len(bin_values))
    return {
        "model_file": "model.bin",
        "bin_counts": counts.tolist(),
        "epoch": config.epoch,
        "lr": lr,
        "word_ngrams": config.word_ngrams,
        "dim": config.dim,
        "bucket": config.bucket,
    }


def _fasttext_subprocess(train_path: str, model_path: Path, params: dict[str, Any]) -> str | None:
    """Train fastText in a fresh interpreter; returns None on success, else the error text.

    fastText 0.9.2 training is not reliable inside a process that has loaded PyTorch (the LM labeler):
    it intermittently diverges to "Encountered NaN" on data that trains cleanly in a fresh process,
    which made results differ from run to run. A subprocess costs ~1 s and gives the same model for the
    same (data, seed) every time (thread=1).
    """
    import subprocess
    import sys

    model_path.unlink(missing_ok=True)
    args = json.dumps({"input": train_path, "output": str(model_path), "params": params})
    proc = subprocess.run([sys.executable, "-m", "zephyr.datashop.classifiers", args], capture_output=True, text=True)
    if proc.returncode == 0 and model_path.exists():
        return None
    return (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]


def _fasttext_train_main(argv: list[str]) -> int:
    import fasttext

    spec = json.loads(argv[0])
    model = fasttext.train_supervised(input=spec["input"], loss="softmax", thread=1, verbose=0, **spec["params"])
    model.save_model(spec["output"])
    return 0


def _train_embedding(
    texts: Sequence[str], scores: Sequence[float], config: ClassifierConfig, out: Path
) -> dict[str, Any]:
    from zephyr.datashop.models import load_sentence_embedder

    embedder = load_sentence_embedder(
        config.embedding_model, dtype=config.embedding_dtype, max_tokens=config.embedding_max_tokens
    )
    x = _embed(embedder, texts, config.max_chars, config.batch_size)  # [N, D]
    y = np.asarray(scores, dtype=np.float64)  # [N]
    x_mean, y_mean = x.mean(axis=0), y.mean()
    xc = x - x_mean
    # Ridge in closed form on centred data: (Xc^T Xc + alpha I) w = Xc^T yc; the intercept absorbs the means.
    gram = xc.T @ xc + config.ridge_alpha * np.eye(x.shape[1])
    weights = np.linalg.solve(gram, xc.T @ (y - y_mean))
    bias = float(y_mean - x_mean @ weights)
    np.savez(out / "ridge.npz", weights=weights, bias=np.array(bias))
    return {
        "model_file": "ridge.npz",
        "embedding_model": config.embedding_model,
        "ridge_alpha": config.ridge_alpha,
        "embedding_dim": int(x.shape[1]),
        "embedding_dtype": config.embedding_dtype,
        "embedding_max_tokens": config.embedding_max_tokens,
    }


def _cache_key(path: Path) -> tuple[str, int] | None:
    try:
        return str(path.resolve()), (path / "meta.json").stat().st_mtime_ns
    except FileNotFoundError:
        return None


def is_loaded(path: str | Path) -> bool:
    """Whether this process already holds the current version of the classifier at `path`."""
    key = _cache_key(Path(path))
    return key is not None and key in _LOADED


def load_classifier(path: str | Path, *, threads: int | None = None) -> TrainedClassifier:
    """Load a trained classifier directory, once per process (re-read if it was retrained since).

    `threads`: PyTorch threads for an embedding classifier, set once when this process first loads it (a
    scoring worker passes its share of the cores); None leaves the process's setting alone.
    """
    path = Path(path)
    meta_path = path / "meta.json"
    key = _cache_key(path)
    if key is None:
        raise FileNotFoundError(
            f"No trained classifier at {path}: expected {meta_path} (written last by train_classifier). "
            "Train one first (run_datashop or train_classifier)."
        )
    with _LOCK:
        cached = _LOADED.get(key)
        if cached is not None:
            return cached
        meta = json.loads(meta_path.read_text())
        if meta.get("format_version") != _FORMAT_VERSION:
            raise ValueError(
                f"{meta_path}: classifier format {meta.get('format_version')!r}, expected {_FORMAT_VERSION}; retrain it"
            )
        kind = meta["kind"]
        if kind == "fasttext":
            import fasttext

            model: Any = fasttext.load_model(str(path / meta["model_file"]))
        elif kind == "embedding":
            from zephyr.datashop.models import load_sentence_embedder, set_torch_threads_once

            set_torch_threads_once(threads)
            ridge = np.load(path / meta["model_file"])
            embedder = load_sentence_embedder(
                meta["embedding_model"],
                dtype=meta.get("embedding_dtype", "float32"),
                max_tokens=meta.get("embedding_max_tokens"),
            )
            model = (embedder, ridge["weights"], float(ridge["bias"]))
        else:
            raise ValueError(f"{meta_path}: unknown classifier kind {kind!r}; expected fasttext or embedding")
        loaded = TrainedClassifier(
            path=str(path),
            kind=kind,
            bin_values=tuple(meta["bin_values"]),
            max_chars=int(meta["max_chars"]),
            meta=meta,
            model=model,
        )
        _LOADED[key] = loaded
        return loaded


if __name__ == "__main__":
    import sys

    raise SystemExit(_fasttext_train_main(sys.argv[1:]))
