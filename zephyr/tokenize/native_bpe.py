"""Byte-level BPE on Zephyr's C kernel (`bpe_kernel.c`): the ids of Hugging Face ``tokenizers``, faster.

Why: on the tokenize benchmark tiktoken (``fast_bpe``) left half of the time in its regex VM and
in the separator insertion its lookahead-free pattern needs, and starts every call with an empty
cache. The kernel writes GPT-2's pre-tokenizer as code (the ``\\s+(?!\\S)`` lookahead included,
so no separator is inserted), applies ``tokenizers``' merges by rank (not tiktoken's "concatenation
is a token" rule) and keeps a per-process cache of the pieces it has seen; web text repeats its
words, so most pieces are one hash lookup.

Used for the ByteLevel pre-tokenizers ``recognise_pre_tokenizer`` calls "gpt2" (GPT-2, SmolLM2,
StarCoder); a ``Split`` regex (Llama 3) stays on tiktoken. As with tiktoken, nothing is trusted
blindly: :func:`build_native_encoder` returns an encoder only after it reproduced ``tokenizers``
on the verification samples, else the reason, and the caller moves on to the next engine.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from zephyr.native import optional_kernel

from .fast_bpe import (
    bpe_model_problem,
    bytes_to_unicode,
    recognise_pre_tokenizer,
    verification_samples,
    verify_fast_encoder,
)

__all__ = ["NativeEncoder", "build_native_encoder"]


def _native() -> Any:
    """The BPE kernel (bpe_kernel.c), or None when it was not built (`zephyr.native`)."""
    return optional_kernel("zephyr.tokenize.bpe_kernel")


@functools.lru_cache(maxsize=1)
def character_classes() -> bytes:
    """One byte per code point: 1 letter (\\p{L}), 2 number (\\p{N}), 3 White_Space, 0 anything else.

    From the ``regex`` module's Unicode data, the classes of the pre-tokenizer's regex as ``tokenizers``
    and tiktoken read them (Python's ``re`` counts \\x1c-\\x1f as space; Unicode does not). ~0.3 s, once
    per process.
    """
    import regex

    everything = "".join(map(chr, range(0x110000)))
    classes = np.zeros(0x110000, dtype=np.uint8)
    for value, pattern in ((1, r"\p{L}+"), (2, r"\p{N}+"), (3, r"\p{White_Space}+")):
        for match in regex.finditer(pattern, everything):
            classes[match.start() : match.end()] = value
    return classes.tobytes()


class NativeEncoder:
    """The C kernel's encoder for one tokenizer.json; build with :func:`build_native_encoder`.

    Same interface as :class:`zephyr.tokenize.fast_bpe.FastEncoder`. Holds a cache of encoded pieces
    (at most 2^18 pieces, ~20 MB; it starts over when full).
    """

    def __init__(self, handle: Any, native: Any) -> None:
        self._handle = handle
        self._encode_many = native.encode_many

    def encode(self, text: str) -> np.ndarray | None:
        """Token ids (uint32) of ``text``, or None when ``tokenizers`` must encode it (a byte without a token)."""
        ids, _, redo = self.encode_many([text])
        return None if redo else ids

    def encode_many(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """(flat ids, per-text lengths, indices to redo with tokenizers); redone texts have length 0."""
        ids, lengths, redo = self._encode_many(self._handle, texts)
        return np.frombuffer(ids, dtype=np.uint32), np.frombuffer(lengths, dtype=np.int64), redo


def build_native_encoder(
    tokenizer_json: dict[str, Any], hf_tokenizer: Any, *, parse_special: bool
) -> NativeEncoder | str:
    """Build and verify a :class:`NativeEncoder`; return the reason (a string) when not possible.

    ``hf_tokenizer`` is the ``tokenizers.Tokenizer`` of the same JSON, configured as the caller uses it
    (``encode_special_tokens``): the reference the encoder must match on the verification samples.
    """
    native = _native()
    if native is None:
        return "the C kernel zephyr.tokenize.bpe_kernel is not built"
    problem = bpe_model_problem(tokenizer_json, "native")
    if problem:
        return problem
    model = tokenizer_json["model"]
    if model.get("ignore_merges"):
        return "BPE ignore_merges (whole words looked up first) is not implemented by the native engine"
    pre = recognise_pre_tokenizer(tokenizer_json.get("pre_tokenizer"))
    if isinstance(pre, str) or pre.kind != "gpt2":
        return "the native engine runs GPT-2 style ByteLevel pre-tokenizers only (a Split regex stays on tiktoken)"
    vocab: dict[str, int] = model.get("vocab", {})
    triples = []
    for merge in model.get("merges", []):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        merged = vocab.get(left + right)
        if left not in vocab or right not in vocab or merged is None:
            return f"merge {left!r} + {right!r} names a token the vocabulary lacks"
        triples.append((vocab[left], vocab[right], merged))
    byte_ids = np.array([vocab.get(char, -1) for _, char in sorted(bytes_to_unicode().items())], dtype=np.int32)
    added_list = tokenizer_json.get("added_tokens", [])
    added = [
        (t["content"].encode("utf-8"), int(t["id"]))
        for t in added_list
        if t["content"] and (parse_special or not t.get("special"))
    ]
    handle = native.new_encoder(
        character_classes(),
        byte_ids.tobytes(),
        np.array(triples, dtype=np.uint32).reshape(-1, 3).tobytes(),
        added,
        pre.digits_split,
    )
    encoder = NativeEncoder(handle, native)
    samples = verification_samples({t["content"]: int(t["id"]) for t in added_list})
    return verify_fast_encoder(encoder, hf_tokenizer, samples) or encoder
