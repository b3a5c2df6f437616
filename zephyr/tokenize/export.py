"""Token store exports that other tools read: Megatron-LM's indexed dataset (`.bin` + `.idx`), and the
tokenizer that made a store as Hugging Face files (`export_tokenizer_hf`), so a model trained on the store
and exported with `zephyr export hf` loads with `AutoTokenizer.from_pretrained`.

Megatron-LM (and NeMo, GPT-NeoX) read a tokenized corpus as a pair of files sharing a prefix:

- `PREFIX.bin`: every document's token ids back to back (no separators beyond what the tokenizer put in);
- `PREFIX.idx`: the magic `MMIDIDX\\x00\\x00`, version 1 (`<Q`), the dtype code (`<B`: 8 = uint16,
  4 = int32), the sequence count and the document count (`<Q` each), then the sequence lengths
  (int32 [sequences]), the sequence byte offsets into `.bin` (int64 [sequences]) and the document
  indices (int64 [documents + 1]: 0, then the index one past each document's last sequence).

One Zephyr document is one sequence and one Megatron document. The store's uint32 ids (vocabularies above
65535) are written as int32, which Megatron's dtype codes cover (it has no uint32).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["MEGATRON_DTYPE_CODES", "MegatronExport", "export_megatron", "export_tokenizer_hf"]

_MAGIC = b"MMIDIDX\x00\x00"
_VERSION = 1
MEGATRON_DTYPE_CODES = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}


@dataclass(frozen=True)
class MegatronExport:
    """What was written: the two paths, the dtype and the counts."""

    bin_path: str
    idx_path: str
    dtype: str
    documents: int
    tokens: int


def _prefix(out: str | os.PathLike[str]) -> Path:
    text = os.fspath(out)
    for suffix in (".bin", ".idx"):
        text = text.removesuffix(suffix)
    return Path(text)


def export_megatron(
    store: str | os.PathLike[str], out: str | os.PathLike[str], *, split: str = "train"
) -> MegatronExport:
    """Write the token store at `store` (local or a bucket URL, streamed by ranges) as `OUT.bin` + `OUT.idx`.

    `split="validation"` exports the store's held-out split instead. Files are written under temporary
    names and renamed when complete, so a reader never sees half an export.
    """
    from zephyr.tokenize.store import open_store

    opened = open_store(store)
    if split == "validation":
        validation = opened.validation
        if validation is None:
            raise FileNotFoundError(f"{opened.location} has no validation split (tokenize with --validation-fraction)")
        opened = validation
    elif split != "train":
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    dtype = np.dtype(np.uint16) if opened.dtype == np.uint16 else np.dtype(np.int32)
    code = MEGATRON_DTYPE_CODES[dtype]
    prefix = _prefix(out)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    bin_tmp, idx_tmp = Path(f"{prefix}.bin.tmp-{os.getpid()}"), Path(f"{prefix}.idx.tmp-{os.getpid()}")
    lengths = opened.document_lengths()
    if len(lengths) and int(lengths.max()) > np.iinfo(np.int32).max:
        raise ValueError(f"a document of {int(lengths.max())} tokens does not fit Megatron's int32 sequence lengths")
    try:
        with open(bin_tmp, "wb") as handle:
            for block in opened.iter_shard_tokens():  # bounded memory; a bucket store streams, no copy
                np.ascontiguousarray(block, dtype=dtype).tofile(handle)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1] * dtype.itemsize, out=pointers[1:])
        with open(idx_tmp, "wb") as handle:
            handle.write(_MAGIC)
            handle.write(struct.pack("<Q", _VERSION))
            handle.write(struct.pack("<B", code))
            handle.write(struct.pack("<Q", len(lengths)))
            handle.write(struct.pack("<Q", len(lengths) + 1))
            handle.write(lengths.astype(np.int32).tobytes(order="C"))
            handle.write(pointers.tobytes(order="C"))
            handle.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes(order="C"))
        os.replace(bin_tmp, bin_path)
        os.replace(idx_tmp, idx_path)
    finally:
        bin_tmp.unlink(missing_ok=True)
        idx_tmp.unlink(missing_ok=True)
    return MegatronExport(str(bin_path), str(idx_path), dtype.name, len(lengths), int(lengths.sum()))


def export_tokenizer_hf(stores: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> list[Path]:
    """Write the tokenizer that made `stores` into `out` as `tokenizer.json`, `tokenizer_config.json` and
    `special_tokens_map.json` (what `transformers.AutoTokenizer.from_pretrained(out)` reads).

    Every store's manifest names its tokenizer (source and content hash); they must agree, and the
    tokenizer loaded from that source today must have the same hash (the one that made the ids), else
    ValueError says which store and what to do. Returns the paths written.
    """
    from zephyr.tokenize.loader import resolve_tokenizer_source
    from zephyr.tokenize.store import open_store

    if not stores:
        raise ValueError("export_tokenizer_hf needs the token store(s) the model was trained on; got none")
    named = {os.fspath(path): open_store(path).tokenizer for path in stores}
    hashes = {tok.get("content_hash") for tok in named.values()}
    if len(hashes) != 1:
        listed = "; ".join(f"{path}: {tok.get('name')} ({tok.get('content_hash')})" for path, tok in named.items())
        raise ValueError(f"the stores were made by different tokenizers, so no one tokenizer fits the model: {listed}")
    store, tok = next(iter(named.items()))
    source = resolve_tokenizer_source(str(tok.get("source") or tok.get("name")))
    if source.content_hash != tok.get("content_hash"):
        raise ValueError(
            f"the tokenizer {tok.get('source')!r} that made {store} has changed since (hash {source.content_hash}, "
            f"the store says {tok.get('content_hash')}); pass the original tokenizer.json's folder as the store's "
            "tokenizer source, or retokenize"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    special = {k: tok[k] for k in ("bos_token", "eos_token") if tok.get(k)}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "clean_up_tokenization_spaces": False,
        # the stores' ids: special-token strings inside the text were encoded as text unless the store says so
        "split_special_tokens": not tok.get("parse_special", False),
        "add_bos_token": False,  # a store's documents already hold their BOS/EOS where the manifest says so
        "add_eos_token": False,
    }
    files = {
        "tokenizer.json": source.json_text,
        "tokenizer_config.json": json.dumps(config, indent=2),
        "special_tokens_map.json": json.dumps(special, indent=2),
    }
    written = []
    for name, text in files.items():
        path = out / name
        temp = out / f".tmp-{name}"
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
        written.append(path)
    return written
