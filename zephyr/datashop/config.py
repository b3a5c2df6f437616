"""Datashop configuration: frozen dataclasses, checked when built, loadable from YAML.

A run is a list of stages; each stage samples an annotation pool from its input, labels it with an
LM, trains a classifier on the labels, scores its whole input and keeps the best documents. The
first stage reads the corpus; each later stage reads the survivors of the one before (a cascade).

Example YAML (every key except `input`, `output_dir` and the stages' `name`/`prompt.template` has
a default)::

    input: data/*.jsonl.zst
    output_dir: out/datashop
    stages:
      - name: edu
        prompt:
          template: "Rate the educational value of this text from 0 to 5.\\n\\nText: {example}"
          answer_prefix: "Score: "
        labeler: {backend: transformers, model: smollm2-135m-instruct, batch_size: 8}
        pool: {size: 500, seed: 0}
        classifier: {kind: fasttext}
        filter: {keep_fraction: 0.3}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zephyr.config import fail, from_dict, load_yaml

__all__ = [
    "PromptConfig",
    "LabelerConfig",
    "PoolConfig",
    "ClassifierConfig",
    "FilterConfig",
    "StageConfig",
    "DatashopConfig",
    "load_config",
    "config_from_dict",
]

EXAMPLE_SLOT = "{example}"
BACKENDS = ("llamacpp", "transformers", "openai", "vllm")
MODES = ("logprobs", "generate")
CLASSIFIERS = ("fasttext", "embedding")


@dataclass(frozen=True)
class PromptConfig:
    """What the LM is asked, and which answers count as labels.

    `template` holds exactly one `{example}` slot (other braces are left alone); when the prompt would
    overflow the model context, the example is truncated, never the instructions. `labels` are the
    answers scored from next-token probabilities (keep each a single token: digits, Yes/No);
    `values` are their numeric scores (default: the labels read as numbers). `answer_prefix` is
    appended after the chat-formatted prompt, i.e. put in the model's mouth ("Score: "), which makes
    small models answer with a label far more often. `parse_regex` reads a score from generated text
    in `generate` mode; its first group is read as a number or matched against the labels.
    `paraphrase` is a second wording of the same question (one `{example}` slot, same labels): the run
    labels a sample with it and reports how well the two wordings agree (a label-quality check).
    """

    template: str
    labels: tuple[str, ...] = ("0", "1", "2", "3", "4", "5")
    values: tuple[float, ...] | None = None
    answer_prefix: str = ""
    system: str | None = None
    use_chat_template: bool = True
    parse_regex: str = r"(-?\d+(?:\.\d+)?)"
    paraphrase: str | None = None

    def __post_init__(self) -> None:
        owner = "PromptConfig"
        for name, text in (("template", self.template), ("paraphrase", self.paraphrase)):
            if text is not None and text.count(EXAMPLE_SLOT) != 1:
                fail(
                    owner,
                    f"{name} must contain the slot {EXAMPLE_SLOT} exactly once, found "
                    f"{text.count(EXAMPLE_SLOT)} in {text[:80]!r}",
                )
        object.__setattr__(self, "labels", tuple(str(x) for x in self.labels))
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels):
            fail(owner, f"labels must be at least two distinct strings, got {self.labels!r}")
        if self.values is None:
            try:
                values = tuple(float(x) for x in self.labels)
            except ValueError:
                fail(
                    owner,
                    f"labels {self.labels!r} are not numbers, so give `values` (one number per label), "
                    "e.g. labels: ['No', 'Yes'] with values: [0, 1]",
                )
            object.__setattr__(self, "values", values)
        else:
            object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        if len(self.values) != len(self.labels):
            fail(owner, f"values must have one number per label: {len(self.labels)} labels, {len(self.values)} values")
        try:
            pattern = re.compile(self.parse_regex)
        except re.error as exc:
            fail(owner, f"parse_regex {self.parse_regex!r} does not compile: {exc}")
        if pattern.groups < 1:
            fail(owner, f"parse_regex {self.parse_regex!r} needs one capturing group around the score")

    @property
    def score_range(self) -> tuple[float, float]:
        assert self.values is not None
        return min(self.values), max(self.values)


@dataclass(frozen=True)
class LabelerConfig:
    """Which LM labels the pool, and how.

    backend: `llamacpp` (the default: a GGUF model on CPU through llama.cpp, in process; scores as
    `transformers` does, several times faster), `transformers` (local model on CPU, in process), `openai`
    (any OpenAI-compatible server at `url`, completions API with logprobs, e.g. `vllm serve`), or `vllm`
    (`vllm.LLM` in process).
    model: a local model directory, the alias `smollm2-135m-instruct` (packaged, offline), or for
    `openai` the served model name. `tokenizer` (a local directory or the alias) lets the `openai`
    backend apply the chat template and count tokens locally; without it prompts are sent raw and
    lengths are estimated at 4 characters per token.
    mode: `logprobs` (expected score from next-token probabilities over the labels) or `generate`
    (greedy text, parsed with the prompt's `parse_regex`). `torch_threads` (transformers and llamacpp
    backends): CPU threads for labeling, set once when the model loads; default: in an engine stage
    (processes and Ray backends) the worker's CPUs; in-process, for transformers the cores the load
    average leaves idle (see backend_transformers), for llamacpp one single-threaded process per core.
    `quality_sample`: how many pool documents are labeled again in the other mode and with the
    prompt's paraphrase to measure label quality (0: skip the check).
    max_example_tokens: every backend sees each document's first N tokens (null: as many as the context
    holds). On CPU a document costs about its own token count: SmolLM2 through llama.cpp (bf16, one
    single-threaded process per core) labels ~6 documents per CPU-second at 128 tokens on an AMD EPYC
    (Zen 5) core, so ~12 docs/s on 2 idle cores and ~20 at 64; on the 2-vCPU Intel Xeon (AMX) machine of
    issue #31, with the same build flags, 2.2 per CPU-second and 4 docs/s. benchmarks/datashop.py prints
    the CPU and build beside its figures. recipes/datashop_edu.py uses 128 and shows what it costs in
    label quality.
    """

    backend: str = "llamacpp"
    model: str = "smollm2-135m-instruct"
    url: str | None = None
    api_key_env: str | None = None
    tokenizer: str | None = None
    mode: str = "logprobs"
    batch_size: int = 8
    max_context_tokens: int = 2048
    max_example_tokens: int | None = 512
    max_new_tokens: int = 8
    top_logprobs: int = 20
    timeout_s: float = 300.0
    torch_threads: int | None = None
    quality_sample: int = 32

    def __post_init__(self) -> None:
        owner = "LabelerConfig"
        if self.backend not in BACKENDS:
            fail(owner, f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.mode not in MODES:
            fail(owner, f"mode must be one of {MODES}, got {self.mode!r}")
        if self.backend == "openai" and not self.url:
            fail(owner, "backend 'openai' needs `url`, e.g. url: http://127.0.0.1:8000/v1")
        if self.batch_size < 1:
            fail(owner, f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_context_tokens < 16:
            fail(owner, f"max_context_tokens must be >= 16, got {self.max_context_tokens}")
        if self.max_example_tokens is not None and self.max_example_tokens < 1:
            fail(owner, f"max_example_tokens must be >= 1 or null (no limit), got {self.max_example_tokens}")
        if self.max_new_tokens < 1:
            fail(owner, f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.torch_threads is not None and self.torch_threads < 1:
            fail(owner, f"torch_threads must be >= 1 or null (PyTorch's default), got {self.torch_threads}")
        if self.quality_sample < 0:
            fail(owner, f"quality_sample must be >= 0 (0 skips the label-quality check), got {self.quality_sample}")
        if not 1 <= self.top_logprobs <= 20:
            fail(owner, f"top_logprobs must be in 1..20 (the OpenAI API limit), got {self.top_logprobs}")


@dataclass(frozen=True)
class PoolConfig:
    """The annotation pool: the `size` documents with the smallest hash of (seed, id)."""

    size: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.size < 2:
            fail("PoolConfig", f"size must be >= 2 (a train and a held-out document), got {self.size}")


@dataclass(frozen=True)
class ClassifierConfig:
    """The fast classifier trained on LM labels.

    kind: `fasttext` (supervised fastText on labels binned to the nearest label value; the score is
    the expected value over the predicted bins) or `embedding` (sentence embeddings from
    `embedding_model` + a ridge regression on the scores; the first `embedding_max_tokens` tokens of each
    text, computed in `embedding_dtype`: `auto` is bfloat16 where the CPU has native bfloat16 matrix
    instructions (2x float32's speed, cosine 0.9995 to float32's embedding), else float32).
    `holdout_fraction` of the labels, chosen by a hash of the id, is kept out of training to measure
    agreement with the LM.
    """

    kind: str = "fasttext"
    holdout_fraction: float = 0.2
    seed: int = 0
    max_chars: int = 4000
    epoch: int = 50  # annotation pools are small: fastText needs many passes (and lr 1.0) to leave uniform
    lr: float = 1.0
    word_ngrams: int = 2
    dim: int = 32
    min_count: int = 1
    bucket: int = 100_000
    embedding_model: str = "all-minilm-l6-v2"
    ridge_alpha: float = 1.0
    batch_size: int = 64
    embedding_max_tokens: int = 128
    embedding_dtype: str = "auto"

    def __post_init__(self) -> None:
        owner = "ClassifierConfig"
        if self.kind not in CLASSIFIERS:
            fail(owner, f"kind must be one of {CLASSIFIERS}, got {self.kind!r}")
        if not 0.0 < self.holdout_fraction < 1.0:
            fail(owner, f"holdout_fraction must be strictly between 0 and 1, got {self.holdout_fraction}")
        if (
            min(
                self.max_chars,
                self.epoch,
                self.dim,
                self.batch_size,
                self.bucket,
                self.word_ngrams,
                self.embedding_max_tokens,
            )
            < 1
        ):
            fail(
                owner,
                "max_chars, epoch, dim, bucket, word_ngrams, batch_size and embedding_max_tokens must all be >= 1",
            )
        if self.embedding_dtype not in ("auto", "float32", "bfloat16"):
            fail(owner, f"embedding_dtype must be auto, float32 or bfloat16, got {self.embedding_dtype!r}")
        if self.ridge_alpha < 0:
            fail(owner, f"ridge_alpha must be >= 0, got {self.ridge_alpha}")


@dataclass(frozen=True)
class FilterConfig:
    """Keep documents whose score is >= `threshold`, or the best `keep_fraction` of them (give one).

    A `keep_fraction` the scores cannot honour (too many documents tied at the threshold, e.g. a
    classifier that scores every document alike and would keep them all) fails the stage with the
    reason, unless `on_ties: keep`: then the tied documents are all kept and the stage's summary line
    says how many, and why.
    """

    threshold: float | None = None
    keep_fraction: float | None = None
    on_ties: str = "fail"

    def __post_init__(self) -> None:
        if (self.threshold is None) == (self.keep_fraction is None):
            fail(
                "FilterConfig",
                "give exactly one of threshold (e.g. 3.0) or keep_fraction (e.g. 0.1), got "
                f"threshold={self.threshold!r}, keep_fraction={self.keep_fraction!r}",
            )
        if self.keep_fraction is not None and not 0.0 < self.keep_fraction <= 1.0:
            fail("FilterConfig", f"keep_fraction must be in (0, 1], got {self.keep_fraction}")
        if self.on_ties not in ("fail", "keep"):
            fail("FilterConfig", f"on_ties must be 'fail' or 'keep', got {self.on_ties!r}")


@dataclass(frozen=True)
class StageConfig:
    """One cascade stage: pool -> LM labels -> classifier -> score all -> filter."""

    name: str
    prompt: PromptConfig
    labeler: LabelerConfig = field(default_factory=LabelerConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    filter: FilterConfig = field(default_factory=lambda: FilterConfig(keep_fraction=0.5))

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", self.name or ""):
            fail(
                "StageConfig",
                f"name must be a non-empty [A-Za-z0-9_-] string (used in paths and field names), got {self.name!r}",
            )

    @property
    def score_field(self) -> str:
        return f"datashop_{self.name}"


@dataclass(frozen=True)
class DatashopConfig:
    """A whole Datashop run.

    `input`: file glob(s) the engine reads (`Dataset.from_files`). Records need `id_field` and
    `text_field`. Every stage's artifacts go to `output_dir/<stage name>/`; the final dataset is the last
    stage's `kept/` directory. `engine_backend`/`workers` choose how the engine runs the scoring;
    unset, they follow the surrounding `execution(...)` (e.g. `zephyr run --backend ray`).
    """

    input: tuple[str, ...]
    output_dir: str
    stages: tuple[StageConfig, ...]
    text_field: str = "text"
    id_field: str = "id"
    output_format: str = "jsonl"
    engine_backend: str | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        owner = "DatashopConfig"
        inputs = (self.input,) if isinstance(self.input, str) else tuple(self.input)
        object.__setattr__(self, "input", inputs)
        object.__setattr__(self, "stages", tuple(self.stages))
        if not inputs or not all(isinstance(x, str) and x for x in inputs):
            fail(owner, f"input must be a file glob or a list of them, got {self.input!r}")
        if not self.stages:
            fail(owner, "stages is empty: give at least one stage (name, prompt.template)")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            fail(owner, f"stage names must be unique, got {names}")
        if self.output_format not in ("jsonl", "parquet"):
            fail(owner, f"output_format must be 'jsonl' or 'parquet', got {self.output_format!r}")
        from zephyr.engine.backend_registry import backend_names

        if self.engine_backend is not None and self.engine_backend not in backend_names():
            fail(
                owner,
                f"engine_backend must be {', '.join(backend_names()[:-1])} or {backend_names()[-1]} (or unset: the "
                f"current execution's), got {self.engine_backend!r}",
            )


def config_from_dict(data: dict[str, Any], *, where: str = "config") -> DatashopConfig:
    """Build a DatashopConfig from plain dicts/lists (what YAML or JSON gives), via `zephyr.config.from_dict`."""
    if isinstance(data, dict) and isinstance(data.get("input"), str):
        data = {**data, "input": [data["input"]]}
    return from_dict(DatashopConfig, data, where)


def load_config(path: str | Path) -> DatashopConfig:
    """Read a YAML (or JSON) Datashop config; relative `input`/`output_dir` are relative to the file."""
    path = Path(path)
    data = load_yaml(path, "Datashop config")
    base = path.resolve().parent
    if isinstance(data.get("output_dir"), str) and not _is_absolute(data["output_dir"]):
        data["output_dir"] = str(base / data["output_dir"])
    inputs = data.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, list):
        data["input"] = [x if not isinstance(x, str) or _is_absolute(x) else str(base / x) for x in inputs]
    return config_from_dict(data, where=str(path))


def _is_absolute(p: str) -> bool:
    return "://" in p or Path(p).is_absolute()
