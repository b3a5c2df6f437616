"""Labeling with llama.cpp on CPU (`llama-cpp-python`), from the packaged SmolLM2 GGUF file.

Why: the `transformers` backend dequantizes SmolLM2's Q4_1 GGUF to float32 and runs PyTorch eager,
padding every batch to its longest prompt and recomputing the shared instructions for every document.
Scores are the transformers backend's exactly in definition: the prompt is rendered and tokenized by
the same Hugging Face tokenizer and chat template (`HFCodec`), the token ids are fed to llama.cpp as
they are, and the label probabilities are the softmax over the full vocabulary of the next-token
logits, summed over the same label token ids (`label_token_ids`).

Weights: the packaged Q4_1 file is converted once (seconds, cached beside the safetensors export) to
bfloat16 where the CPU has bfloat16 dot products (AVX512_BF16, as llama.cpp reports), else to float16:
the dequantized weights the transformers backend uses, rounded to 16 bits. Measured on 16 real pages
at 256 example tokens, one thread (docs/s relative to transformers; Spearman and largest score
difference against transformers' scores): Q4_1 as shipped 0.7x, rho 0.968, 0.10 (llama.cpp has no
fast Q4_1 matrix kernel, and 8-bit activations move the bunched scores); Q8_0 1.9x, rho 0.950;
bfloat16 2.8x, rho 0.997, 0.016; float16 2.2x, rho 1.000, 0.006; float32 2.2x, rho 1.000, 0.002.
Prompt evaluation per CPU-second on this 2-core AVX512_BF16 machine (one thread, 96-token documents after
the cached prefix): bfloat16 ~820 tokens, Q4_0 ~870, float16 ~600, Q8_0 ~440; so bfloat16, the fastest
that keeps Spearman >= 0.99. A document costs about its own token count: see `max_example_tokens`.
Other GGUF files (`model: /path/x.gguf`) are used as they are.

Speed: every prompt of a run shares its instructions and few-shot examples, so their keys and values
are computed once and kept in the KV cache; each document then costs one `llama_decode` over its own
tokens only (one batched matrix-matrix pass per document), after dropping the previous document's
positions (`llama_memory_seq_rm`, microseconds; nothing is copied or restored). Prompts arrive sorted by
length, and the prefix shared with the previous prompt is reused, whatever it is. Per document, a
decode costs ~18 ms of reading the weights (the same for 8 tokens or 128) plus ~1.1 ms per token (bf16,
one core). Measured and not used: several documents as sequences of one `llama_decode` sharing the
prefix through `seq_cp` was 5-10% slower per document (the unified KV cache makes every sequence attend
over all of them); in separate KV streams (`kv_unified` off, the prefix decoded once per stream) it gave
4-8% more documents per CPU-second at 128 tokens and 17-20% at 64 (the weights are read once per
decode, not once per document): worth it for short documents, not done yet. Flash attention was no
faster per CPU-second. Cores: every core runs one single-threaded llama.cpp process (this one plus
spawned helpers, started with the backend and each loading the model once) that takes the batch's
prompts one at a time as it finishes the last; threads are set once, when a process loads the model.
Single-threaded processes need no barrier across cores, so on cores other jobs also use each simply gets
its share of CPU time, and a process that gets less takes fewer prompts.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zephyr.datashop.config import LabelerConfig
from zephyr.datashop.models import SMOLLM2_ALIAS, cache_root, resolve_causal_lm, smollm2_gguf_path
from zephyr.datashop.prompts import HFCodec

__all__ = ["LlamaCppBackend", "gguf_path", "dequantized_gguf", "cpu_has_bf16_dot", "load_llama"]

_LOCK = threading.Lock()
_LLAMAS: dict[tuple[str, int, int], Any] = {}
_TOKENIZERS: dict[str, Any] = {}
_INSTALL = (
    'pip install "llama-cpp-python==0.3.36" (it compiles llama.cpp with cmake, ~20 min on 2 cores; '
    'CMAKE_ARGS="-DGGML_NATIVE=ON" builds for this CPU), or use labeler backend: transformers'
)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence C-level stderr (llama.cpp's loader prints a line per tensor) for the duration of the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _llama_cpp(threads: int = 1) -> Any:
    """The llama_cpp module. Before its first import (which loads OpenMP), a process that will run llama.cpp
    with several threads gets OMP_WAIT_POLICY=passive unless the variable is set: OpenMP's threads otherwise
    spin at the barrier after every operation, and on cores other jobs also use a spinning thread holds the
    core its peer needs (one process with 2 threads, bf16 at 128 tokens, load ~7.7 on 2 cores: 0.69 docs per
    CPU-second spinning, 6.06 passive; 6.2 for single-threaded processes, which use no OpenMP region)."""
    if threads > 1 and "llama_cpp" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError(f"The llamacpp labeling backend needs llama-cpp-python: {_INSTALL}") from exc
    return llama_cpp


def cpu_has_bf16_dot() -> bool:
    """Whether llama.cpp's CPU backend runs bfloat16 dot products natively here (AVX512_BF16)."""
    info = _llama_cpp().llama_print_system_info().decode(errors="replace")
    return "AVX512_BF16 = 1" in info


def dequantized_gguf(source: Path, dtype: str) -> Path:
    """`source` with every quantized tensor dequantized and stored as `dtype` (f16 or bf16), converted once, cached.

    Written to a temporary name and renamed, so concurrent processes never load half a file.
    """
    llama_cpp = _llama_cpp()
    ftypes = {"f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16, "bf16": llama_cpp.LLAMA_FTYPE_MOSTLY_BF16}
    if dtype not in ftypes:
        raise ValueError(f"dequantized_gguf converts to f16 or bf16, got {dtype!r}")
    stat = source.stat()
    tag = hashlib.sha256(f"{source.name}:{stat.st_size}".encode()).hexdigest()[:12]
    target = cache_root() / "models" / f"{source.stem}-{dtype}-{tag}.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftypes[dtype]
    params.allow_requantize = True
    params.nthread = 1
    with _quiet_stderr():
        code = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
    if code != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(
            f"llama.cpp could not convert {source} to {dtype} (code {code}); check the file, or use "
            "labeler backend: transformers"
        )
    os.replace(tmp, target)
    return target


def gguf_path(model: str) -> Path:
    """The GGUF file for `model`: the packaged SmolLM2 (as bfloat16 or float16) for its alias, else a .gguf path."""
    if model.lower() == SMOLLM2_ALIAS:
        return dequantized_gguf(smollm2_gguf_path(), "bf16" if cpu_has_bf16_dot() else "f16")
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    raise FileNotFoundError(
        f"The llamacpp backend needs a GGUF file: expected the alias {SMOLLM2_ALIAS!r} or a path to a .gguf "
        f"file, got {model!r}. For a transformers model directory use backend: transformers."
    )


def _tokenizer_for(model: str, tokenizer: str | None) -> Any:
    """The Hugging Face tokenizer the transformers backend would use for `model` (same ids, same template).

    For the SmolLM2 alias that is the tokenizer of the cached safetensors export (parsing the GGUF's
    tokenizer takes ~40 s on a busy machine, loading the exported one well under a second).
    """
    source = tokenizer or model
    if source.lower() == SMOLLM2_ALIAS:
        path = str(resolve_causal_lm(SMOLLM2_ALIAS))
    elif Path(source).expanduser().is_dir():
        path = str(Path(source).expanduser())
    else:
        raise FileNotFoundError(
            f"The llamacpp backend tokenizes with a Hugging Face tokenizer so that its prompts are the transformers "
            f"backend's token for token: set labeler.tokenizer to a local tokenizer directory (got model {model!r}, "
            f"tokenizer {tokenizer!r})."
        )
    with _LOCK:
        if path not in _TOKENIZERS:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(path)
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            _TOKENIZERS[path] = tok
        return _TOKENIZERS[path]


def load_llama(path: Path, *, threads: int, n_ctx: int) -> Any:
    """A llama.cpp model + context on CPU, loaded once per process for each (file, threads, context)."""
    key = (str(path), threads, n_ctx)
    with _LOCK:
        if key not in _LLAMAS:
            Llama = _llama_cpp().Llama
            _LLAMAS[key] = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_ubatch=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                logits_all=False,
                verbose=False,
            )
        return _LLAMAS[key]


class LlamaCppBackend:
    """In-process CPU labeling with llama.cpp; the model file is a GGUF (default: the packaged SmolLM2)."""

    def __init__(self, config: LabelerConfig) -> None:
        # llama.cpp's threads meet at a spinning barrier after every operation: on cores other jobs also use, a
        # descheduled thread stalls the others (measured at load 14 on 2 cores: 2 threads 0.05 docs/s, 1 thread
        # 0.36; at load 5: 0.24 vs 1.95; bf16 at 128 tokens, load 8: one process with 2 threads 0.22-0.31 docs/s,
        # two single-threaded processes 3.2 together). So by default every core runs a single-threaded process
        # taking prompts from every batch: no barrier spans two cores, and a busy core only slows its own share.
        # `torch_threads` set: one process with that many threads.
        self.threads = config.torch_threads or 1
        self.processes = 1 if config.torch_threads else (os.cpu_count() or 1)
        self._config = config
        self._pool: Any = None
        _llama_cpp(self.threads)  # fail first, and with the install command, when llama-cpp-python is missing
        self.tokenizer = _tokenizer_for(config.model, config.tokenizer)
        self.codec = HFCodec(self.tokenizer)
        path = self.weights = gguf_path(config.model)
        self.model_id = f"llamacpp:{config.model}"
        self.context_tokens = config.max_context_tokens
        self.llm = load_llama(path, threads=self.threads, n_ctx=self.context_tokens)
        import llama_cpp

        self.context_tokens = min(self.context_tokens, int(llama_cpp.llama_model_n_ctx_train(self.llm.model)))
        self.n_vocab = int(self.llm.n_vocab())
        self._label_ids: dict[tuple[str, ...], dict[str, tuple[int, ...]]] = {}
        # The tokens whose keys/values sit in the KV cache, position by position (shared prompt prefix reuse).
        self._cached: list[int] = []
        # Helpers start now and load the model while this process loads or renders prompts; the first batch
        # then finds them ready instead of paying a process start plus a model load inside its timing.
        self._ready: Any = self._helpers().submit(_helper_ready) if self.processes > 1 else None

    def describe(self) -> dict[str, Any]:
        """What this backend runs on, for a benchmark or a report to print beside its figures: llama.cpp's
        version and system info (the instruction sets and options it was built with), the weights file and
        type, threads per process and processes, and the OpenMP settings that apply."""
        import llama_cpp

        desc = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.llm.model, desc, len(desc))
        return {
            "llama_cpp_python": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(" |"),
            "weights": self.weights.name,
            "model": desc.value.decode(errors="replace"),
            "threads": self.threads,
            "processes": self.processes,
            "omp": {
                k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ
            },
        }

    def close(self) -> None:
        # The model stays in the per-process cache (load_llama) for the next stage or run; helpers end.
        self._ready = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _helpers(self) -> Any:
        """Single-threaded helper processes (one per extra idle core), started on first use."""
        if self._pool is None:
            import dataclasses
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            config = dataclasses.replace(self._config, torch_threads=1)
            self._pool = ProcessPoolExecutor(
                self.processes - 1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_helper,
                initargs=(config,),
            )
        return self._pool

    def _encode(self, prompt: str) -> list[int]:
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError("An empty prompt has no next token to score; render the prompt template first")
        if len(ids) > self.context_tokens:
            raise ValueError(
                f"A prompt of {len(ids)} tokens exceeds the llama.cpp context of {self.context_tokens} "
                "tokens; render prompts with render_prompt (it truncates the example) or raise "
                "labeler.max_context_tokens"
            )
        return ids

    def _last_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """[V] float32 logits of the token after `tokens`, reusing the cached prefix's keys and values."""
        import llama_cpp

        tokens = list(tokens)
        keep = 0
        limit = min(len(self._cached), len(tokens) - 1)  # at least one token must run to produce logits
        while keep < limit and self._cached[keep] == tokens[keep]:
            keep += 1
        self.llm.n_tokens = keep  # eval() drops every cached position from here on before decoding
        self._cached = self._cached[:keep]
        self.llm.eval(tokens[keep:])
        self._cached = tokens
        row = llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(self.n_vocab,)).copy()  # [V]

    def next_token_logprobs(self, prompts: Sequence[str]) -> np.ndarray:
        """[B, V] log-probabilities of the token following each prompt (float64)."""
        out = np.empty((len(prompts), self.n_vocab), dtype=np.float64)
        for i, prompt in enumerate(prompts):
            logits = self._last_logits(self._encode(prompt)).astype(np.float64)
            top = logits.max()
            out[i] = logits - (top + np.log(np.exp(logits - top).sum()))
        return out

    def label_probs(self, prompts: Sequence[str], labels: Sequence[str]) -> list[dict[str, float]]:
        if self.processes > 1 and len(prompts) > 1:
            if self._ready is not None:
                self._ready.result()  # a helper that failed to load the model raises its error here
                self._ready = None
            return self._shared_label_probs(prompts, tuple(labels))
        return self._label_probs(prompts, labels)

    def _shared_label_probs(self, prompts: Sequence[str], labels: tuple[str, ...]) -> list[dict[str, float]]:
        """Label `prompts` here (from the front) and in the helpers (from the back), one prompt at a time.

        Work is taken as it is done rather than split in fixed shares: on cores other jobs also use, one
        process often gets less CPU than another, and fixed shares would leave the faster one waiting at the
        end of every batch. Each helper has two prompts queued so that it never waits for this process.
        """
        from concurrent.futures import FIRST_COMPLETED, wait

        out: list[dict[str, float] | None] = [None] * len(prompts)
        front, back = 0, len(prompts)
        running: dict[Any, int] = {}
        pool = self._helpers()
        while front < back or running:
            while front < back and len(running) < 2 * (self.processes - 1):
                back -= 1
                running[pool.submit(_helper_label_probs, [prompts[back]], labels)] = back
            if front < back:
                out[front] = self._label_probs([prompts[front]], labels)[0]
                front += 1
                finished = [f for f in running if f.done()]
            else:
                finished = list(wait(running, return_when=FIRST_COMPLETED).done)
            for future in finished:
                out[running.pop(future)] = future.result()[0]
        assert all(r is not None for r in out)
        return out  # type: ignore[return-value]

    def _label_probs(self, prompts: Sequence[str], labels: Sequence[str]) -> list[dict[str, float]]:
        from zephyr.datashop.backend_transformers import label_token_ids

        key = tuple(labels)
        if key not in self._label_ids:
            self._label_ids[key] = label_token_ids(self.tokenizer, labels)
        ids = self._label_ids[key]
        probs = np.exp(self.next_token_logprobs(prompts))  # [B, V]
        return [{label: float(sum(row[t] for t in toks)) for label, toks in ids.items()} for row in probs]

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuation (argmax each step) until an end-of-sequence token or `max_new_tokens`."""
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id, int(self.llm.token_eos())}
        texts = []
        for prompt in prompts:
            tokens = self._encode(prompt)
            new: list[int] = []
            for _ in range(max_new_tokens):
                if len(tokens) + len(new) >= self.context_tokens:
                    break
                nxt = int(np.argmax(self._last_logits(tokens + new)))
                if nxt in eos:
                    break
                new.append(nxt)
            texts.append(self.tokenizer.decode(new, skip_special_tokens=True))
        return texts


_HELPER: list[LlamaCppBackend] = []


def _start_helper(config: LabelerConfig) -> None:
    _HELPER.append(LlamaCppBackend(config))


def _helper_ready() -> bool:
    return bool(_HELPER)


def _helper_label_probs(prompts: list[str], labels: tuple[str, ...]) -> list[dict[str, float]]:
    return _HELPER[0].label_probs(prompts, labels)
