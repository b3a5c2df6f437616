"""Token store exports that other trainers read: Megatron-LM's indexed dataset (`.bin` + `.idx`).

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

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["MEGATRON_DTYPE_CODES", "MegatronExport", "export_megatron"]

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
