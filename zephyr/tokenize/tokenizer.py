"""The tokenizer used by the pipeline: what to load (:class:`TokenizerSpec`), what
was loaded (:class:`TokenizerInfo`, recorded in every store manifest), and the
encoder itself (:class:`Tokenizer`).

Ids always equal those of Hugging Face ``tokenizers`` for the same
``tokenizer.json`` (``add_special_tokens=False``): a fast engine, Zephyr's C
kernel (:mod:`zephyr.tokenize.native_bpe`) or else tiktoken
(:mod:`zephyr.tokenize.fast_bpe`), is used only after it reproduced
``tokenizers`` on a built-in sample at load time, and any single text it cannot
handle exactly is encoded by ``tokenizers``.

Long documents are cut into chunks of at most ``max_chunk_chars`` characters
before encoding, which bounds the memory and latency of one encode call. A cut
is only made at a single ASCII space whose two neighbours are not whitespace,
and only for GPT-2-style byte-level pre-tokenizers. For those the ids are
provably the same as encoding the whole text: no pre-token of the GPT-2 regex
(with or without split digits) contains a space right after a
non-whitespace character, so a pre-token boundary always falls before such a
space; the regex only looks ahead, so what follows the cut is pre-tokenized
the same; and added tokens hold no whitespace, so none can straddle the cut.
For other pre-tokenizers (e.g. Metaspace, which would prefix the next chunk
with a new word marker) documents are encoded whole.

Pathological text has no such space for a long stretch (100 MB without one: one
pre-token, which ``tokenizers`` encodes with several GB of memory). A stretch of
more than ``_UNSAFE_AFTER`` chunk lengths without a safe space, and any document
over ``_UNSAFE_AFTER`` chunk lengths under another pre-tokenizer, is cut at
``max_chunk_chars`` anyway: memory stays bounded, the ids next to such a cut may
differ from encoding the whole text, and every such cut is counted
(``tokenize/unsafe_cuts``).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from zephyr import counters

from .fast_bpe import BatchEncoder, build_fast_encoder, recognise_pre_tokenizer
from .loader import DEFAULT_TOKENIZER, TokenizerSource, resolve_tokenizer_source
from .native_bpe import build_native_encoder

__all__ = ["TokenizerSpec", "TokenizerInfo", "Tokenizer", "load_tokenizer"]

_UNSAFE_AFTER = 10  # chunk lengths without a safe space before a cut is made anyway

Engine = Literal["auto", "native", "tiktoken", "tokenizers"]
ENGINES: tuple[str, ...] = ("auto", "native", "tiktoken", "tokenizers")


@dataclass(frozen=True)
class TokenizerSpec:
    """What to load. Frozen and hashable, so workers can cache one tokenizer per spec.

    ``source``: ``"smollm2"`` (offline default), a tokenizer.json / directory /
    .gguf path, or a hub name. ``parse_special``: when true, special-token
    strings inside the text (e.g. a literal ``<|endoftext|>`` on a web page)
    become special ids, as ``tokenizers`` does by default; the default false
    encodes them as ordinary text so raw web data cannot inject document
    boundaries. ``engine``: ``"auto"`` uses the first fast engine verified
    identical to ``tokenizers`` (the C kernel, then tiktoken); ``"native"`` or
    ``"tiktoken"`` insists on one (error if not possible); ``"tokenizers"`` uses
    neither.
    ``bos_token``/``eos_token`` override the detected document markers.
    """

    source: str = DEFAULT_TOKENIZER
    parse_special: bool = False
    engine: Engine = "auto"
    bos_token: str | None = None
    eos_token: str | None = None
    max_chunk_chars: int = 100_000

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"TokenizerSpec.engine must be one of {', '.join(ENGINES)}; got {self.engine!r}.")
        if self.max_chunk_chars < 1000:
            raise ValueError(
                f"TokenizerSpec.max_chunk_chars={self.max_chunk_chars} is too small to find safe split points; "
                "use at least 1000 (default 100000)."
            )


@dataclass(frozen=True)
class TokenizerInfo:
    """What was loaded; :meth:`to_manifest` is written into every token store."""

    name: str
    source: str  # the spec's source string, so a reader can load the same tokenizer again
    content_hash: str
    vocab_size: int
    bos_token: str | None
    bos_id: int | None
    eos_token: str | None
    eos_id: int | None
    engine: str  # the engine actually in use
    fast_path_note: str  # why the fast path is (not) used
    parse_special: bool
    split_safe: bool
    origin: str

    def to_manifest(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "content_hash": self.content_hash,
            "vocab_size": self.vocab_size,
            "bos_token": self.bos_token,
            "bos_id": self.bos_id,
            "eos_token": self.eos_token,
            "eos_id": self.eos_id,
            "parse_special": self.parse_special,
        }


class Tokenizer:
    """A loaded tokenizer. Use :func:`load_tokenizer` (cached per process)."""

    def __init__(self, spec: TokenizerSpec, source: TokenizerSource) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.spec = spec
        data = json.loads(source.json_text)
        self.hf = HFTokenizer.from_str(source.json_text)
        self.hf.encode_special_tokens = not spec.parse_special
        self._fast: BatchEncoder | None = None
        engine = "tokenizers"
        notes = ["engine='tokenizers' requested"] if spec.engine == "tokenizers" else []
        builders = {"native": build_native_encoder, "tiktoken": build_fast_encoder}
        for name, build in builders.items():
            if spec.engine not in ("auto", name):
                continue
            built = build(data, self.hf, parse_special=spec.parse_special)
            if not isinstance(built, str):
                self._fast, engine = built, name
                notes = [f"{name}: verified identical to tokenizers on the built-in sample"]
                break
            if spec.engine == name:
                raise ValueError(
                    f"engine={name!r} was requested for tokenizer {source.name!r} ({source.origin}), "
                    f"but it is not exact for it: {built}. Use engine='auto' to fall back to the next engine."
                )
            notes.append(f"{name}: {built}")
        note = "; ".join(notes)
        added = {t["content"] for t in data.get("added_tokens", [])}
        pre = recognise_pre_tokenizer(data.get("pre_tokenizer"))
        split_safe = (
            not isinstance(pre, str)
            and pre.kind == "gpt2"
            and data.get("normalizer") is None
            and not any(any(c.isspace() for c in t) for t in added)
        )
        bos = spec.bos_token or source.bos_token
        eos = spec.eos_token or source.eos_token
        self.info = TokenizerInfo(
            name=source.name,
            source=spec.source,
            content_hash=source.content_hash,
            vocab_size=int(self.hf.get_vocab_size(with_added_tokens=True)),
            bos_token=bos,
            bos_id=self._token_id(bos, "bos_token"),
            eos_token=eos,
            eos_id=self._token_id(eos, "eos_token"),
            engine=engine,
            fast_path_note=note,
            parse_special=spec.parse_special,
            split_safe=split_safe,
            origin=source.origin,
        )

    def _token_id(self, token: str | None, what: str) -> int | None:
        if token is None:
            return None
        token_id = self.hf.token_to_id(token)
        if token_id is None:
            raise ValueError(
                f"{what}={token!r} is not in the vocabulary of tokenizer {self.spec.source!r}; "
                "pass an existing token (TokenizerSpec(bos_token=..., eos_token=...))."
            )
        return int(token_id)

    # -- encoding --------------------------------------------------------------------------

    def split_long_text(self, text: str) -> list[str]:
        """Cut ``text`` into chunks of at most ``max_chunk_chars`` at id-preserving spaces.

        Returns ``[text]`` when the text is short, when the pre-tokenizer is not
        one for which cuts are proven safe, or when no safe space exists.
        """
        limit = self.spec.max_chunk_chars
        if len(text) <= limit:
            return [text]
        if not self.info.split_safe:
            if len(text) <= _UNSAFE_AFTER * limit:
                return [text]
            cuts = list(range(limit, len(text), limit))
            counters.increment("tokenize/unsafe_cuts", len(cuts))
            return [text[i : i + limit] for i in range(0, len(text), limit)]
        chunks, start, n = [], 0, len(text)
        while n - start > limit:
            cut = _safe_space(text, start + limit // 2, start + limit, backwards=True)
            if cut < 0:
                cut = _safe_space(text, start + limit, min(n, start + _UNSAFE_AFTER * limit), backwards=False)
            if cut < 0:
                if n - start <= _UNSAFE_AFTER * limit:
                    break
                cut = start + limit  # no safe space for a long stretch: bound the memory, count the cut
                counters.increment("tokenize/unsafe_cuts")
            chunks.append(text[start:cut])
            start = cut
        chunks.append(text[start:])
        return chunks

    def encode(self, text: str) -> np.ndarray:
        """Ids (uint32) of one text, without BOS/EOS."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str], *, add_bos: bool = False, add_eos: bool = False) -> list[np.ndarray]:
        """Ids (uint32 arrays) of each text, with BOS/EOS added when asked."""
        flat, lengths = self.encode_flat(texts, add_bos=add_bos, add_eos=add_eos)
        return np.split(flat, np.cumsum(lengths)[:-1]) if len(texts) else []

    def encode_flat(
        self, texts: Sequence[str], *, add_bos: bool = False, add_eos: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """All texts' ids back to back (uint32) and each text's length (int64): the store's layout."""
        bos = self._marker(self.info.bos_id, "bos", add_bos)
        eos = self._marker(self.info.eos_id, "eos", add_eos)
        chunked = [self.split_long_text(t) for t in texts]
        pieces = [c for chunks in chunked for c in chunks] if any(len(c) > 1 for c in chunked) else list(texts)
        if self._fast is not None:
            flat, lengths, redo = self._fast.encode_many(pieces)
            if redo:
                flat, lengths = self._splice_reference(pieces, flat, lengths, redo)
        else:
            encodings = self.hf.encode_batch(pieces, add_special_tokens=False)
            lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
            flat = np.fromiter((i for e in encodings for i in e.ids), dtype=np.uint32, count=int(lengths.sum()))
        if len(pieces) != len(texts):  # merge chunk lengths back into document lengths
            firsts = np.cumsum([0] + [len(c) for c in chunked[:-1]])
            lengths = np.add.reduceat(lengths, firsts) if len(lengths) else lengths
        if bos is None and eos is None:
            return flat, lengths
        ends = np.cumsum(lengths)
        starts = ends - lengths
        positions, values = [], []
        if bos is not None:
            positions.append(starts)
            values.append(np.full(len(starts), bos, dtype=np.uint32))
        if eos is not None:
            positions.append(ends)
            values.append(np.full(len(ends), eos, dtype=np.uint32))
        # Interleave per document (BOS at its start, EOS at its end) so that at a shared index
        # the previous document's EOS goes in before the next one's BOS.
        pos = np.stack(positions, axis=1).reshape(-1)
        val = np.stack(values, axis=1).reshape(-1)
        flat = np.insert(flat, pos, val)
        return flat, lengths + len(positions)

    def _splice_reference(
        self, pieces: Sequence[str], flat: np.ndarray, lengths: np.ndarray, redo: list[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Put ``tokenizers``' ids for the texts the fast path declined into the flat batch."""
        parts = np.split(flat, np.cumsum(lengths)[:-1])
        for i, enc in zip(
            redo, self.hf.encode_batch([pieces[i] for i in redo], add_special_tokens=False), strict=False
        ):
            parts[i] = np.asarray(enc.ids, dtype=np.uint32)
        lengths = np.asarray([len(p) for p in parts], dtype=np.int64)
        return np.concatenate(parts).astype(np.uint32, copy=False), lengths

    def _marker(self, token_id: int | None, what: str, wanted: bool) -> int | None:
        if not wanted:
            return None
        if token_id is None:
            raise ValueError(
                f"add_{what}=True but tokenizer {self.info.name!r} has no {what} token; "
                f"pass TokenizerSpec({what}_token='...') or add_{what}=False."
            )
        return token_id

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of ``ids`` (special tokens kept, so document boundaries stay visible)."""
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=False)


def _safe_space(text: str, lo: int, hi: int, *, backwards: bool) -> int:
    """Index of a ' ' in [lo, hi) whose neighbours are both non-whitespace, or -1."""
    lo = max(lo, 1)
    while lo < hi:
        i = text.rfind(" ", lo, hi) if backwards else text.find(" ", lo, hi)
        if i < 0:
            return -1
        if i + 1 < len(text) and not text[i - 1].isspace() and not text[i + 1].isspace():
            return i
        if backwards:
            hi = i
        else:
            lo = i + 1
    return -1


@functools.lru_cache(maxsize=8)
def _load_cached(spec: TokenizerSpec, env_key: str) -> Tokenizer:
    return Tokenizer(spec, resolve_tokenizer_source(spec.source))


def load_tokenizer(spec: TokenizerSpec | str | os.PathLike[str] = DEFAULT_TOKENIZER) -> Tokenizer:
    """Load (once per process) the tokenizer described by ``spec`` or a source string."""
    if not isinstance(spec, TokenizerSpec):
        spec = TokenizerSpec(source=os.fspath(spec))
    return _load_cached(spec, os.environ.get("ZEPHYR_CACHE_DIR", ""))
