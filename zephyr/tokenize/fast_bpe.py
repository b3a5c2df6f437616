"""Run a Hugging Face byte-level BPE tokenizer on tiktoken's engine, with identical ids.

Why: ``tokenizers`` spends most of its time outside BPE (offsets, normalised
strings, per-word allocations). tiktoken's Rust core does only what a
pretraining tokenizer needs. Given the same vocabulary, merges and
pre-tokenizer regex it yields the same ids, several times faster. Nothing here
is trusted blindly: :func:`build_fast_encoder` returns an encoder only after it
reproduced ``tokenizers`` exactly on :data:`VERIFICATION_SAMPLES` (Unicode,
digits, whitespace runs of every kind, control bytes, special tokens, emoji,
CJK, code); otherwise it returns the reason and the caller stays on
``tokenizers``.

How the translation works
-------------------------
* Vocabulary: HF byte-level tokens are strings over GPT-2's byte->unicode
  alphabet; mapping each character back gives the token's bytes. tiktoken
  merges the adjacent pair whose concatenation has the lowest rank; HF merges
  the pair listed first in ``merges``. When token ids grow with merge order
  (true for tokenizers trained by ``tokenizers``), rank = id gives the same
  merges; otherwise ranks follow merge order and ids are mapped back.
* Bytes the vocabulary lacks (SmolLM2 lacks 21, e.g. ``\\x04``): HF silently
  drops them, which can let their neighbours merge. They get sentinel ranks
  here; a text that produces a sentinel is re-encoded by ``tokenizers``.
* Pre-tokenizer: GPT-2's regex ends in ``\\s+(?!\\S)`` ("a whitespace run gives
  its last character to the next word"). That one lookahead forces tiktoken
  onto fancy-regex's backtracking VM and halves its speed. We drop it and
  instead insert a private separator (a special token, removed from the
  output) before the last character of every whitespace run of length >= 2
  that the lookahead would have split. tiktoken encodes the text on each side
  of a special token separately, so each piece is pre-tokenized as HF would.
  ``Digits(individual_digits=True)`` (SmolLM2, StarCoder) becomes ``\\p{N}``
  and makes digits piece boundaries, which the insertion rule respects.
  A ``Split`` regex pre-tokenizer (Llama 3, Qwen style) is passed through to
  tiktoken unchanged.
* Special (added) tokens: matched in the text like ``tokenizers`` does when
  ``parse_special`` is true; otherwise treated as plain text, like
  ``tokenizers`` with ``encode_special_tokens = True``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "FastEncoder",
    "build_fast_encoder",
    "bpe_model_problem",
    "bytes_to_unicode",
    "recognise_pre_tokenizer",
    "verify_fast_encoder",
    "verification_samples",
    "BatchEncoder",
    "VERIFICATION_SAMPLES",
]

# Used to mark insertion points. Private-use and noncharacter code points: never in real text
# (and if one ever is, that text is encoded by tokenizers instead).
_SEPARATOR = "\ue000\U000ffffe\U000fffff\ue001"
_DOCUMENT = "\ue002\U000ffffe\U000fffff\ue003"

_GPT2_NOLOOK = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"""
_GPT2_DIGITS_NOLOOK = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+"""

VERIFICATION_SAMPLES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog. It's 2024; we've paid $1,234.56 (12.5%)!",
    "Don't, I'll, we're, they've, she'd, I'm, it'S, DON'T, l'été, rock 'n' roll, ’s curly",
    "Numbers: 0 1 12 123 1234 12345678901234567890 3.14159 -42 +7 1e10 0x1F ²³ ½ Ⅻ ٣٤٥ ५६ ５６７",
    "Whitespace:  two   three    four\tTab\t\tTabs\n\nnew\r\nCRLF\n \n  \n\t "
    "\u00a0nbsp\u3000ideo\u2028ls\u2029ps\x0bvt\x0cff",
    "Trailing runs   \n\n\n   ",
    "   leading spaces and  1  2   3 digits after runs\n\n42\n  \n7",
    "Control bytes: \x00\x01\x04\x06\x13\x14\x16\x1c\x1d\x1e\x1f\x7f\x85 a\x04b !\x04! x\x1dy",
    "Deutsch: Größenwahn, Übermäßig, Straße; Français: où, déjà, garçon, cœur; Español: ¿Qué tal? ¡Olé!",
    "中文测试：我们今天去公园散步。日本語のテキスト、カタカナ、ひらがな。한국어 문장입니다.",
    "Русский текст, Ελληνικά, עברית, العربية ١٢٣, हिन्दी पाठ, ไทย, Tiếng Việt",
    "Emoji: 😀🎉👍🏽 👩\u200d👩\u200d👧 🇩🇪🇫🇷 ❤️ ✔︎ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0001f9ea\U000e0067",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\n\tif x  >= 10:\n\t\tpass\n",
    "URLs https://example.com/path?q=1&b=%20x#frag and emails a.b@c.org ... --- *** ___ ===",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!!!!!! ............",
    "Combining: e\u0301 a\u0308 n\u0303 Zalgo z\u0351\u0352\u0353 ﬁ ligature Å Ω",
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=False)}


@functools.lru_cache(maxsize=1)
def _unicode_classes() -> tuple[str, str]:
    """``re`` character-class bodies equal to Unicode White_Space and \\p{N}.

    Python's ``re`` has no \\p{..}, and its \\s also matches \\x1c-\\x1f, which
    Rust's (tiktoken's) \\s does not. The ``regex`` module knows the properties,
    but the stdlib ``re`` scans about 1.5x faster, so the classes are built once.
    """
    import regex

    everything = "".join(map(chr, range(0x110000)))

    def ranges(pattern: str) -> str:
        cps = [ord(c) for c in regex.findall(pattern, everything)]
        out, start, prev = [], cps[0], cps[0]
        for cp in cps[1:] + [-2]:
            if cp != prev + 1:
                out.append(re.escape(chr(start)) + ("" if start == prev else "-" + re.escape(chr(prev))))
                start = cp
            prev = cp
        return "".join(out)

    return ranges(r"\p{White_Space}"), ranges(r"\p{N}")


@dataclass(frozen=True)
class _PreTokenizer:
    kind: str  # "gpt2" (GPT-2 regex, our lookahead-free rewrite) or "regex" (pattern passed through)
    pattern: str
    digits_split: bool = False


def recognise_pre_tokenizer(pre: Any) -> _PreTokenizer | str:
    """Which of the pre-tokenizers the fast path implements a tokenizer.json's `pre_tokenizer` is, or the reason it
    is none of them."""

    def is_byte_level(p: Any, use_regex: bool) -> bool:
        return (
            isinstance(p, dict)
            and p.get("type") == "ByteLevel"
            and bool(p.get("use_regex", True)) == use_regex
            and not p.get("add_prefix_space", False)
        )

    if is_byte_level(pre, True):
        return _PreTokenizer("gpt2", _GPT2_NOLOOK)
    if isinstance(pre, dict) and pre.get("type") == "Sequence":
        parts = pre.get("pretokenizers", [])
        if (
            len(parts) == 2
            and parts[0].get("type") == "Digits"
            and parts[0].get("individual_digits")
            and is_byte_level(parts[1], True)
        ):
            return _PreTokenizer("gpt2", _GPT2_DIGITS_NOLOOK, digits_split=True)
        if (
            len(parts) == 2
            and parts[0].get("type") == "Split"
            and isinstance(parts[0].get("pattern"), dict)
            and "Regex" in parts[0]["pattern"]
            and parts[0].get("behavior") == "Isolated"
            and not parts[0].get("invert", False)
            and is_byte_level(parts[1], False)
        ):
            return _PreTokenizer("regex", parts[0]["pattern"]["Regex"])
    return f"pre-tokenizer {str(pre)[:200]} has no tiktoken translation"


class BatchEncoder(Protocol):
    """What the tokenizer asks of a fast engine (this module's tiktoken one, or zephyr.tokenize.native_bpe)."""

    def encode(self, text: str) -> np.ndarray | None: ...

    def encode_many(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[int]]: ...


class FastEncoder:
    """tiktoken-backed encoder for one tokenizer.json; build with :func:`build_fast_encoder`.

    :meth:`encode_many` encodes a whole batch in one tiktoken call: the texts
    are joined with a private document separator (a special token, so each
    text is pre-tokenized on its own, exactly as if encoded alone) and the
    output is cut at the separator ids. That removes the per-text call and
    array overheads, which matter at several million tokens per second.
    Texts it cannot reproduce exactly (bytes missing from the vocabulary, or a
    private marker inside the text) are reported back for ``tokenizers``.
    """

    def __init__(
        self,
        encoding: Any,
        pre: _PreTokenizer,
        allowed: frozenset[str],
        vocab_size: int,
        separator_id: int,
        document_id: int,
        rank_to_id: np.ndarray | None,
    ) -> None:
        self._core = encoding._core_bpe
        self._allowed = allowed
        self._vocab_size = vocab_size
        self._separator_id = separator_id
        self._document_id = document_id
        self._rank_to_id = rank_to_id
        self._insert: re.Pattern[str] | None = None
        if pre.kind == "gpt2":
            ws, num = _unicode_classes()
            follow = f"[^{ws}{num}]" if pre.digits_split else f"[^{ws}]"
            # A whitespace run followed by a special token (or our document marker) ends its text
            # segment, where the lookahead sees "end of text": no split there.
            guard_tokens = sorted((t for t in allowed if t != _SEPARATOR), key=len, reverse=True)
            guard = "(?!" + "|".join(re.escape(t) for t in guard_tokens) + ")"
            # Matches the next-to-last character of each such run; the separator goes right after it.
            # (No capture groups: they would disable the regex engine's fast first-character scan.)
            self._insert = re.compile(f"[{ws}](?=[{ws}]{guard}{follow})")
        self._native_buffer = hasattr(self._core, "encode_to_tiktoken_buffer")

    def _raw(self, text: str) -> np.ndarray:
        inserted = 0
        if self._insert is not None:
            cuts = [m.end() for m in self._insert.finditer(text)]
            if cuts:
                inserted = len(cuts)
                text = _SEPARATOR.join([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=False)])
        if self._native_buffer:
            ids = np.frombuffer(self._core.encode_to_tiktoken_buffer(text, self._allowed), dtype=np.uint32)
        else:  # older tiktoken
            ids = np.asarray(self._core.encode(text, self._allowed), dtype=np.uint32)
        if inserted:
            ids = ids[ids != self._separator_id]
        if self._rank_to_id is not None:
            ids = self._rank_to_id[ids]
        return ids

    def encode(self, text: str) -> np.ndarray | None:
        """Token ids (uint32) of ``text``, or None when ``tokenizers`` must encode it."""
        if _SEPARATOR in text or _DOCUMENT in text:
            return None
        ids = self._raw(text)
        if ids.size and int(ids.max()) >= self._vocab_size:
            return None
        return ids

    def encode_many(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Encode ``texts`` in one call: (flat ids, per-text lengths, indices to redo with tokenizers).

        Texts listed in the third element have length 0 in the first two.
        """
        if not texts:
            return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64), []
        joined = _DOCUMENT.join(texts)
        if _SEPARATOR in joined or joined.count(_DOCUMENT) != len(texts) - 1:
            return self._one_by_one(texts)
        ids = self._raw(joined)
        marks = np.flatnonzero(ids == self._document_id)
        bounds = np.concatenate([[-1], marks, [len(ids)]])
        lengths = np.diff(bounds) - 1
        if len(marks):
            ids = np.delete(ids, marks)
        redo: list[int] = []
        if ids.size and int(ids.max()) >= self._vocab_size:
            bad_positions = np.flatnonzero(ids >= self._vocab_size)
            ends = np.cumsum(lengths)
            redo = sorted(set(np.searchsorted(ends, bad_positions, side="right").tolist()))
            keep = np.ones(len(ids), dtype=bool)
            starts = ends - lengths
            for i in redo:
                keep[starts[i] : ends[i]] = False
                lengths[i] = 0
            ids = ids[keep]
        return ids, lengths.astype(np.int64), redo

    def _one_by_one(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        parts, lengths, redo = [], [], []
        for i, text in enumerate(texts):
            ids = self.encode(text)
            if ids is None:
                redo.append(i)
                ids = np.zeros(0, dtype=np.uint32)
            parts.append(ids)
            lengths.append(len(ids))
        return np.concatenate(parts), np.asarray(lengths, dtype=np.int64), redo


def _rank_table(
    vocab: dict[str, int], merges: list[Any], added: dict[str, int], byte_of: dict[str, int]
) -> tuple[dict[bytes, int], np.ndarray | None, int] | str:
    """Mergeable ranks for tiktoken; a rank->id array when ids are not in merge order."""
    token_bytes: dict[str, bytes] = {}
    for token in vocab:
        if token in added:
            continue
        try:
            token_bytes[token] = bytes(byte_of[c] for c in token)
        except KeyError:
            return f"vocabulary token {token!r} is not byte-level encoded"
    pairs = [m.split(" ", 1) if isinstance(m, str) else m for m in merges]
    singles = sorted((t for t, b in token_bytes.items() if len(b) == 1), key=vocab.__getitem__)
    merged = [a + b for a, b in pairs]
    if len(set(merged)) != len(merged) or any(m not in vocab for m in merged):
        return "merges are not one-to-one with vocabulary entries"
    merged_ids = [vocab[m] for m in merged]
    monotone = all(x < y for x, y in zip(merged_ids, merged_ids[1:], strict=False)) and (
        not singles or not merged_ids or vocab[singles[-1]] < merged_ids[0]
    )
    orphans = set(token_bytes) - set(singles) - set(merged)
    if monotone and not orphans:
        ranks = {token_bytes[t]: vocab[t] for t in token_bytes}
        return ranks, None, max(vocab.values()) + 1
    # Ranks in merge order, placed above every added-token id so the two never collide
    # (tiktoken keeps special ids and ranks in one space); the table maps ranks back to ids.
    order = singles + merged + sorted(orphans, key=vocab.__getitem__)
    base = max(added.values(), default=-1) + 1
    ranks = {token_bytes[t]: base + r for r, t in enumerate(order)}
    table = np.arange(base + len(order), dtype=np.uint32)
    table[base:] = [vocab[t] for t in order]
    return ranks, table, base + len(order)


def bpe_model_problem(tokenizer_json: dict[str, Any], engine: str) -> str | None:
    """Why `tokenizer_json` cannot run on a byte-level BPE `engine` other than ``tokenizers`` (None: it can).

    Those engines do byte-level BPE and nothing else: no normalizer, no BPE dropout, byte fallback or
    subword affixes, a pre-tokenizer :func:`recognise_pre_tokenizer` knows, and added tokens matched as
    plain strings (no lstrip/rstrip/single_word).
    """
    model = tokenizer_json.get("model", {})
    if model.get("type") != "BPE":
        return f"model type {model.get('type')!r} is not BPE"
    if (
        model.get("dropout")
        or model.get("byte_fallback")
        or model.get("continuing_subword_prefix")
        or model.get("end_of_word_suffix")
    ):
        return f"BPE options (dropout/byte_fallback/subword prefix/suffix) have no {engine} equivalent"
    if tokenizer_json.get("normalizer") is not None:
        return f"normalizer {tokenizer_json['normalizer'].get('type')!r} has no {engine} equivalent"
    pre = recognise_pre_tokenizer(tokenizer_json.get("pre_tokenizer"))
    if isinstance(pre, str):
        return pre
    added_list = tokenizer_json.get("added_tokens", [])
    if any(t.get("lstrip") or t.get("rstrip") or t.get("single_word") for t in added_list):
        return f"added tokens with lstrip/rstrip/single_word have no {engine} equivalent"
    return None


def build_fast_encoder(tokenizer_json: dict[str, Any], hf_tokenizer: Any, *, parse_special: bool) -> FastEncoder | str:
    """Build and verify a :class:`FastEncoder`; return the reason (a string) when not possible.

    ``hf_tokenizer`` is the ``tokenizers.Tokenizer`` built from the same JSON,
    configured like the caller will use it (``encode_special_tokens``), and is
    the reference the result must match on :data:`VERIFICATION_SAMPLES`.
    """
    try:
        import tiktoken
    except ImportError:
        return "tiktoken is not installed (pip install 'tiktoken>=0.8')"
    problem = bpe_model_problem(tokenizer_json, "tiktoken")
    if problem:
        return problem
    model = tokenizer_json["model"]
    pre = recognise_pre_tokenizer(tokenizer_json.get("pre_tokenizer"))
    assert not isinstance(pre, str)  # bpe_model_problem checked it
    added_list = tokenizer_json.get("added_tokens", [])
    added = {t["content"]: int(t["id"]) for t in added_list}
    if any(any(ch.isspace() for ch in t) for t in added) and pre.kind == "gpt2":
        return "an added token contains whitespace, which the whitespace-run rewrite cannot guard"
    byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
    table = _rank_table(model.get("vocab", {}), model.get("merges", []), added, byte_of)
    if isinstance(table, str):
        return table
    ranks, rank_to_id, next_rank = table
    vocab_size = int(hf_tokenizer.get_vocab_size(with_added_tokens=True))
    # Sentinels: bytes the vocabulary lacks, then the separator; all >= every real id.
    sentinel = max(next_rank, vocab_size, max(added.values(), default=0) + 1)
    for b in range(256):
        if bytes([b]) not in ranks:
            ranks[bytes([b])] = sentinel
            sentinel += 1
    separator_id, document_id = sentinel, sentinel + 1
    specials = dict(added)
    specials[_SEPARATOR] = separator_id
    specials[_DOCUMENT] = document_id
    if rank_to_id is not None:
        # The remap runs over every output id: identity below the ranks (added-token ids), the
        # rank -> id table, then out-of-range markers for missing bytes, and the two markers.
        full = np.full(document_id + 1, vocab_size, dtype=np.uint32)
        full[: len(rank_to_id)] = rank_to_id
        full[separator_id] = separator_id
        full[document_id] = document_id
        rank_to_id = full
    special_flags = {t["content"]: bool(t.get("special")) for t in added_list}
    allowed = {t for t in added if parse_special or not special_flags[t]}
    allowed.update((_SEPARATOR, _DOCUMENT))
    pattern = pre.pattern
    try:
        encoding = tiktoken.Encoding(
            name=f"zephyr-{id(tokenizer_json):x}", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials
        )
    except Exception as exc:  # noqa: BLE001 - any failure means "stay on tokenizers"
        return f"tiktoken rejected the translated tokenizer: {exc}"
    encoder = FastEncoder(encoding, pre, frozenset(allowed), vocab_size, separator_id, document_id, rank_to_id)
    problem = verify_fast_encoder(encoder, hf_tokenizer, verification_samples(added))
    return problem or encoder


def verification_samples(added: dict[str, int]) -> list[str]:
    """:data:`VERIFICATION_SAMPLES` plus texts around the tokenizer's own added tokens."""
    samples = list(VERIFICATION_SAMPLES)
    names = sorted(added)[:8]
    if names:
        samples.append("".join(f"text {n}more  {n}\n\n{n} 12{n}" for n in names))
        samples.append("  ".join(names) + "\n\n" + "\n".join(names))
    return samples


def verify_fast_encoder(encoder: BatchEncoder, hf_tokenizer: Any, texts: list[str]) -> str | None:
    """None when ``encoder`` reproduces ``hf_tokenizer`` on every text, else a description.

    Texts the encoder hands back to ``tokenizers`` (it returns None) are not
    compared; the texts it accepts are also compared joined into one document.
    """
    accepted = [t for t in texts if encoder.encode(t) is not None]
    if len(accepted) < len(texts) // 2:
        return f"the fast encoder declined {len(texts) - len(accepted)} of {len(texts)} verification samples"
    texts = list(texts) + ["\n".join(accepted)]
    reference = [e.ids for e in hf_tokenizer.encode_batch(texts, add_special_tokens=False)]
    for text, ref in zip(texts, reference, strict=False):
        ids = encoder.encode(text)
        if ids is None:
            continue  # handled by the tokenizers fallback: nothing to compare
        problem = _compare(ids.tolist(), ref, text)
        if problem:
            return problem
    flat, lengths, redo = encoder.encode_many(texts)
    ends = np.cumsum(lengths)
    for i, (text, ref) in enumerate(zip(texts, reference, strict=False)):
        if i in redo:
            if encoder.encode(text) is not None:
                return f"batch encoding declined sample {text[:40]!r} that single encoding accepts"
            continue
        problem = _compare(flat[ends[i] - lengths[i] : ends[i]].tolist(), ref, text)
        if problem:
            return "batched: " + problem
    return None


def _compare(got: list[int], ref: list[int], text: str) -> str | None:
    if got == ref:
        return None
    at = next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), min(len(got), len(ref)))
    return f"ids differ from tokenizers at token {at} of sample {text[:40]!r}: {got[at : at + 5]} vs {ref[at : at + 5]}"
