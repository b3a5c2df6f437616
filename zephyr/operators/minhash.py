"""MinHash signatures and LSH band keys for near-duplicate detection.

Why this module looks the way it does: signatures are the only per-document cost of fuzzy dedup
that scales with the whole corpus. Word shingles run in a C kernel (`minhash_kernel.c`: each text
normalized, hashed, shingled and min-hashed in one pass, its set sorted by a bucket pass; 68,700
documents/s per core on benchmarks/minhash.py's 2 KB documents, against 23,000 for the numpy code
below, which stays as the reference the kernel is tested bit for bit against, and as the fallback
when the kernel is not built). The numpy path vectorizes everything after tokenization:

- Text is normalized (lowercase; punctuation, symbols and separators become spaces; whitespace
  collapses) so that re-flowed or re-punctuated copies still match.
- Shingles are word n-grams (default 5) or character n-grams. The words of a whole batch are
  hashed at once in numpy (8-byte chunks of each word chained through the murmur3 64-bit mixer:
  no Python call per word); an n-gram's hash is a fixed linear combination of its word hashes
  mod 2^64, mixed again, all in numpy (no per-shingle Python work).
- MinHash permutation i is ``h -> a_i * h + b_i (mod 2^32)`` on the top 32 bits of the shingle
  hash, with odd random ``a_i``: a bijection of the 32-bit space. Because shingle hashes are
  already fully mixed, this cheap universal family estimates Jaccard as well as the
  Mersenne-prime family (datasketch's; tested against exact Jaccard in
  tests/operators/test_minhash.py), and 32-bit lanes make the numpy work half that of 64-bit.
  Signature values are 32-bit like datasketch's: two different minima collide with probability
  ~1e-7, far below the estimator's own noise. All permutations are computed at once, in chunks
  of shingles so memory stays bounded.
- LSH: ``num_bands`` bands of ``rows_per_band`` rows; each band hashes to one 64-bit bucket key
  (the band index is mixed in, so keys of different bands never meet).

Every constant derives from ``seed`` through splitmix64 in pure Python, so signatures are identical
across machines, processes and numpy versions.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import xxhash

from zephyr import counters
from zephyr.fmix64 import fmix64
from zephyr.operators import minhash_native

__all__ = [
    "EMPTY_HASH",
    "MinHashConfig",
    "optimal_bands",
    "lsh_candidate_probability",
    "normalize_text",
    "shingle_set",
    "minhash_signatures",
    "sketch_documents",
    "SketchBatch",
    "sketch_batch",
    "shingle_sets",
    "band_hashes",
    "jaccard",
    "estimated_jaccard",
]

EMPTY_HASH = np.uint32(0xFFFF_FFFF)
"""Signature value of a document without any shingle (nothing to compare; never bucketed)."""

_MASK64 = (1 << 64) - 1
_ROW_CHUNK = 4096  # shingles per MinHash chunk: 112 x 4096 x 4 B = 1.8 MB, stays in cache


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class MinHashConfig:
    """How documents become MinHash signatures and LSH bucket keys.

    The defaults (14 bands x 8 rows = 112 permutations, word 5-grams) make a pair with Jaccard 0.8
    a candidate with probability 0.92 and one with Jaccard 0.5 with probability 0.05; use
    :meth:`for_threshold` to derive bands and rows for another similarity threshold.

    Example:
        >>> MinHashConfig().num_perm
        112
        >>> MinHashConfig.for_threshold(0.7, num_perm=128).rows_per_band
        9
    """

    num_bands: int = 14
    rows_per_band: int = 8
    ngram_size: int = 5
    shingle: Literal["word", "char"] = "word"
    seed: int = 1
    # Bounds one document's cost (pathological inputs: a 100 MB text). Only its first this-many words
    # (characters with shingle="char") are shingled; counted as minhash/documents_capped.
    max_tokens_per_document: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("num_bands", "rows_per_band", "ngram_size", "max_tokens_per_document"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MinHashConfig.{name} must be a positive int, got {value!r}.")
        if self.shingle not in ("word", "char"):
            raise ValueError(
                f"MinHashConfig.shingle must be 'word' or 'char', got {self.shingle!r}; "
                "use 'word' for word n-grams (default) or 'char' for character n-grams."
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"MinHashConfig.seed must be an int, got {self.seed!r}.")

    @property
    def num_perm(self) -> int:
        """Number of MinHash permutations: bands x rows."""
        return self.num_bands * self.rows_per_band

    @classmethod
    def for_threshold(
        cls,
        threshold: float,
        *,
        num_perm: int = 112,
        false_positive_weight: float = 0.5,
        false_negative_weight: float = 0.5,
        ngram_size: int = 5,
        shingle: Literal["word", "char"] = "word",
        seed: int = 1,
    ) -> MinHashConfig:
        """A config whose LSH S-curve best separates pairs above and below `threshold`."""
        bands, rows = optimal_bands(
            threshold,
            num_perm,
            false_positive_weight=false_positive_weight,
            false_negative_weight=false_negative_weight,
        )
        return cls(num_bands=bands, rows_per_band=rows, ngram_size=ngram_size, shingle=shingle, seed=seed)


def lsh_candidate_probability(jaccard_value: float, num_bands: int, rows_per_band: int) -> float:
    """Probability that a pair with this Jaccard similarity shares at least one LSH bucket."""
    return 1.0 - (1.0 - jaccard_value**rows_per_band) ** num_bands


def optimal_bands(
    threshold: float,
    num_perm: int,
    *,
    false_positive_weight: float = 0.5,
    false_negative_weight: float = 0.5,
) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perm minimizing the weighted FP and FN areas.

    The false-positive area is the candidate probability integrated over similarities below the
    threshold; the false-negative area is the miss probability integrated above it (the same
    criterion as datasketch's ``MinHashLSH``). Ties go to the smaller number of permutations.
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}; e.g. 0.8 for near-duplicates.")
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm!r}.")
    if false_positive_weight < 0 or false_negative_weight < 0:
        raise ValueError("false_positive_weight and false_negative_weight must be >= 0.")
    below = np.linspace(0.0, threshold, 513)
    above = np.linspace(threshold, 1.0, 513)
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = np.trapezoid(1.0 - (1.0 - below**rows) ** bands, below)
            fn = np.trapezoid((1.0 - above**rows) ** bands, above)
            error = false_positive_weight * fp + false_negative_weight * fn
            if best is None or error < best[0] - 1e-12:
                best = (error, bands, rows)
    assert best is not None
    return best[1], best[2]


# --------------------------------------------------------------------------- seeded constants


def _splitmix64(seed: int, count: int) -> list[int]:
    """`count` pseudo-random 64-bit ints from `seed`; pure Python so every platform agrees."""
    state = seed & _MASK64
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        out.append(z ^ (z >> 31))
    return out


_NGRAM_SALT = 0x5A45_5048_5952_0001  # fixed: shingle hashes do not depend on the MinHash seed
_BAND_SALT = 0x5A45_5048_5952_0002


@functools.lru_cache(maxsize=64)
def _odd_constants(salt: int, count: int) -> np.ndarray:
    """`count` odd 64-bit multipliers from `salt` (cached: built once per process)."""
    constants = np.array([v | 1 for v in _splitmix64(salt, count)], dtype=np.uint64)
    constants.flags.writeable = False
    return constants


@functools.lru_cache(maxsize=16)
def _permutation_constants(seed: int, num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    values = _splitmix64(seed, num_perm)
    a = np.array([(v >> 32) | 1 for v in values], dtype=np.uint32)
    b = np.array([v & 0xFFFF_FFFF for v in values], dtype=np.uint32)
    a.flags.writeable = b.flags.writeable = False
    return a, b


def _permutations(config: MinHashConfig) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of the permutations h -> a * h + b (mod 2^32), a odd."""
    return _permutation_constants(config.seed, config.num_perm)


# --------------------------------------------------------------------------- normalization


def _is_separator(char: str) -> bool:
    """The normalization rule: which characters become spaces.

    Every ASCII character that is not a letter or digit; in the Basic Multilingual Plane, the
    Unicode categories P* (punctuation), S* (symbols), Z* (separators), Cc and Cf (controls).
    Letters, digits and marks of every script stay, as does everything beyond U+FFFF (emoji).
    """
    code = ord(char)
    if code < 128:
        return not char.isalnum()
    if code > 0xFFFF or 0xD800 <= code <= 0xDFFF:
        return False
    category = unicodedata.category(char)
    return category[0] in "PSZ" or category in ("Cc", "Cf")


def _ascii_table() -> bytes:
    # ASCII separators become spaces, letters are lowercased; other bytes pass through.
    table = bytearray(range(256))
    for b in range(128):
        c = chr(b)
        table[b] = 0x20 if _is_separator(c) else ord(c.lower())
    return bytes(table)


def _utf8_separator_regex() -> re.Pattern[bytes]:
    """A bytes regex matching the UTF-8 encoding of every non-ASCII separator character.

    Built as a trie on UTF-8 bytes (lead byte, then continuation-byte classes), so the regex
    engine skips every position whose byte cannot start a separator: ASCII, and the lead bytes of
    Cyrillic, CJK or Hangul letters. About 2x faster than a str regex over every character.
    """
    two: dict[int, set[int]] = {}
    three: dict[int, dict[int, set[int]]] = {}
    for code in range(128, 0x10000):
        char = chr(code)
        if not _is_separator(char):
            continue
        encoded = char.encode("utf-8")
        if len(encoded) == 2:
            two.setdefault(encoded[0], set()).add(encoded[1])
        else:
            three.setdefault(encoded[0], {}).setdefault(encoded[1], set()).add(encoded[2])

    def byte_class(values: set[int]) -> bytes:
        ordered, parts, i = sorted(values), [], 0
        while i < len(ordered):
            j = i
            while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
                j += 1
            lo, hi = re.escape(bytes([ordered[i]])), re.escape(bytes([ordered[j]]))
            parts.append(lo if i == j else lo + b"-" + hi)
            i = j + 1
        return b"[" + b"".join(parts) + b"]"

    branches = [re.escape(bytes([lead])) + byte_class(rest) for lead, rest in sorted(two.items())]
    for lead, seconds in sorted(three.items()):
        inner = b"|".join(re.escape(bytes([second])) + byte_class(rest) for second, rest in sorted(seconds.items()))
        branches.append(re.escape(bytes([lead])) + b"(?:" + inner + b")")
    return re.compile(b"|".join(branches))


_ASCII = _ascii_table()
_UTF8_SEPARATORS = _utf8_separator_regex()


def _words(text: str) -> list[bytes]:
    """Normalized words as UTF-8 bytes: lowercase, separators to spaces, split.

    Works on bytes: a table translate for ASCII, the trie regex for non-ASCII separators, and a
    split on ASCII whitespace (every other whitespace is a separator already). Same words as
    :func:`_words_reference` (tested).
    """
    if text.isascii():
        return text.encode("ascii").translate(_ASCII).split()
    data = text.lower().encode("utf-8")
    if not data.isascii():
        data = _UTF8_SEPARATORS.sub(b" ", data)
    return data.translate(_ASCII).split()


def _words_reference(text: str) -> list[bytes]:
    """The normalization rule in its plainest form; tests compare :func:`_words` against it."""
    return "".join(" " if _is_separator(c) else c for c in text.lower()).encode("utf-8").split()


def normalize_text(text: str) -> str:
    """Lowercase, replace punctuation, symbols and separators by spaces, collapse whitespace.

    The exact rule is :func:`_is_separator`; underscores and ASCII symbols count as punctuation.

    Example:
        >>> normalize_text("Hello,   World!  It's\\n5 o'clock.")
        'hello world it s 5 o clock'
    """
    return b" ".join(_words(text)).decode("utf-8")


# --------------------------------------------------------------------------- shingles


def _normalized(text: str) -> bytes:
    """The text as normalized UTF-8 bytes: the words of :func:`_words` between runs of spaces.

    After the table translate no ASCII byte other than [a-z0-9] and space is left, so a batch
    can join texts with b"\\n" and still tell them apart.
    """
    if text.isascii():
        return text.encode("ascii").translate(_ASCII)
    data = text.lower().encode("utf-8")
    if not data.isascii():
        data = _UTF8_SEPARATORS.sub(b" ", data)
    return data.translate(_ASCII)


_WORD_LENGTH_MULTIPLIER = np.uint64(0xD6E8_FEB8_6659_FD93)
_CHUNK_SALT = 0x9E37_79B9_7F4A_7C15


def _mixed_chunk(chunk: np.ndarray, index: int) -> np.ndarray:
    return fmix64(chunk ^ np.uint64((_CHUNK_SALT * (index + 1)) & _MASK64))


_VECTOR_CHUNKS = 32  # words up to 256 bytes are hashed in numpy, 8 bytes per round


def _word_tokens(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(one uint64 per normalized word of all `texts`, in order; words per text), in numpy.

    A word's hash chains its 8-byte little-endian chunks (the last one zero-padded) through the
    murmur3 mixer, with its length mixed in: a bijection per chunk, so two different words
    collide only as two random 64-bit values do. Work is per word (a gather of 8 bytes per
    chunk), not per byte, and no Python call is made per word.
    """
    data = b"\n".join(map(_normalized, texts))  # "\n" never survives normalization: a text boundary
    size = len(data)
    padded = np.frombuffer(data + bytes(8), dtype=np.uint8)
    raw = padded[:size]
    edge = np.diff((raw > 32).view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    lengths = np.flatnonzero(edge == -1) - starts
    windows = np.lib.stride_tricks.as_strided(padded, shape=(size + 1, 8), strides=(1, 1), writeable=False)

    def chunk(positions: np.ndarray, remaining: np.ndarray) -> np.ndarray:
        values = windows[positions].view("<u8").ravel()  # a copy: fancy indexing
        short = np.flatnonzero(remaining < 8)
        if len(short):  # keep only the word's own bytes
            values[short] &= (np.uint64(1) << (remaining[short].astype(np.uint64) * np.uint64(8))) - np.uint64(1)
        return values

    hashes = _mixed_chunk(chunk(starts, lengths), 0) ^ (lengths.astype(np.uint64) * _WORD_LENGTH_MULTIPLIER)
    index = 1
    longer = np.flatnonzero(lengths > 8)
    while len(longer) and index < _VECTOR_CHUNKS:  # one numpy round per 8 bytes of the longest word...
        more = _mixed_chunk(chunk(starts[longer] + 8 * index, lengths[longer] - 8 * index), index)
        hashes[longer] = fmix64(hashes[longer] + more)
        index += 1
        longer = longer[lengths[longer] > 8 * index]
    if len(longer):  # ...so words longer than that (a text without spaces) are hashed whole by xxh3
        counters.increment("minhash/long_words", len(longer))
        tails = [
            xxhash.xxh3_64_intdigest(data[s : s + n])
            for s, n in zip(starts[longer].tolist(), lengths[longer].tolist(), strict=False)
        ]
        hashes[longer] = fmix64(hashes[longer] + np.array(tails, dtype=np.uint64))
    owner = np.searchsorted(np.flatnonzero(raw == 10), starts)
    return fmix64(hashes), np.bincount(owner, minlength=len(texts)).astype(np.int64)


def _char_tokens(text: str) -> np.ndarray:
    """One uint64 per character of the normalized text: its mixed code point."""
    words = _words(text)
    if not words:
        return np.empty(0, dtype=np.uint64)
    points = np.frombuffer(b" ".join(words).decode("utf-8").encode("utf-32-le"), dtype="<u4")
    return fmix64(points.astype(np.uint64))


def _tokens(texts: Sequence[str], config: MinHashConfig) -> tuple[np.ndarray, np.ndarray]:
    """(token hashes of all texts back to back, tokens per text): words or characters, at most
    `config.max_tokens_per_document` per text (its first ones)."""
    if config.shingle == "word":
        tokens, lengths = _word_tokens(texts)
    else:
        arrays = [_char_tokens(t) for t in texts]
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        tokens = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint64)
    return _capped(tokens, lengths, config.max_tokens_per_document)


def _capped(tokens: np.ndarray, lengths: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep each document's first `cap` tokens; count the documents and tokens cut."""
    over = lengths > cap
    if not over.any():
        return tokens, lengths
    counters.increment("minhash/documents_capped", int(over.sum()))
    counters.increment("minhash/tokens_not_shingled", int((lengths[over] - cap).sum()))
    starts = np.cumsum(lengths) - lengths
    position = np.arange(len(tokens), dtype=np.int64) - np.repeat(starts, lengths)
    return tokens[position < cap], np.minimum(lengths, cap)


def _shingles(tokens: np.ndarray, lengths: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of many documents at once: (hashes, per-document counts), in document order.

    `tokens` holds every document's tokens back to back, `lengths` how many each has. A document
    with fewer than `n` tokens (but at least one) gets one shingle of all its tokens; a document
    without tokens gets none.
    """
    coeffs = _odd_constants(_NGRAM_SALT, n)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.uint64), np.zeros(len(lengths), dtype=np.int64)
    windows = total - n + 1
    if windows > 0:
        # G[p] = sum_j T[p + j] * C_j over every window; keep windows inside one document.
        hashes = tokens[:windows] * coeffs[0]
        for j in range(1, n):
            hashes += tokens[j : j + windows] * coeffs[j]
        owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        keep = owner[:windows] == owner[n - 1 :]
        hashes = hashes[keep]
        counts = np.maximum(lengths - n + 1, 0)
    else:
        hashes = np.empty(0, dtype=np.uint64)
        counts = np.zeros(len(lengths), dtype=np.int64)
    short = np.flatnonzero((lengths > 0) & (lengths < n))
    if len(short):
        first_token = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        extra = np.array(
            [
                int((tokens[first_token[i] : first_token[i] + lengths[i]] * coeffs[: lengths[i]]).sum(dtype=np.uint64))
                for i in short
            ],
            dtype=np.uint64,
        )
        counts = counts.copy()
        counts[short] = 1
        # Splice each short document's single shingle in at its place in document order.
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        merged = np.empty(int(counts.sum()), dtype=np.uint64)
        is_short = np.zeros(len(merged), dtype=bool)
        is_short[starts[short]] = True
        merged[is_short] = extra
        merged[~is_short] = hashes
        hashes = merged
    return fmix64(hashes), counts


def shingle_set(text: str, config: MinHashConfig = MinHashConfig()) -> np.ndarray:
    """The document's shingle hashes as a sorted array without repeats (its set, for exact Jaccard)."""
    hashes, _ = _shingles(*_tokens([text], config), config.ngram_size)
    return np.unique(hashes)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted, repeat-free hash arrays (from :func:`shingle_set`).

    Two empty sets have similarity 0: documents without shingles are never near-duplicates here.
    """
    if len(a) == 0 or len(b) == 0:
        return 0.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


# --------------------------------------------------------------------------- MinHash + LSH


def minhash_signatures(texts: Sequence[str], config: MinHashConfig = MinHashConfig()) -> np.ndarray:
    """MinHash signatures, shape (len(texts), config.num_perm), dtype uint32.

    A document with no word (empty or only punctuation) gets a row of :data:`EMPTY_HASH`.
    Memory stays bounded by chunks of shingles, whatever the document sizes.
    """
    return _sketch(texts, config, False)[0]


_NO_PERMUTATIONS = np.zeros(0, dtype=np.uint32)


def _native_sketch(
    texts: Sequence[str], config: MinHashConfig, with_sets: bool, *, with_signatures: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None] | None:
    """(signatures, shingle counts, set values, set counts) from the C kernel; None without it or for
    character shingles (numpy only). Without `with_signatures` no permutation is computed (signatures
    have 0 columns)."""
    if config.shingle != "word" or minhash_native.kernel() is None:
        return None
    a, b = _permutations(config) if with_signatures else (_NO_PERMUTATIONS, _NO_PERMUTATIONS)
    return minhash_native.sketch(
        texts,
        minhash_native.tables(_is_separator),
        _odd_constants(_NGRAM_SALT, config.ngram_size),
        a,
        b,
        config.max_tokens_per_document,
        with_sets,
    )


def _signatures(texts: Sequence[str], config: MinHashConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(signatures, shingle counts per document, all shingle hashes in document order), in numpy: the
    reference for the C kernel, and its fallback."""
    a, b = _permutations(config)
    num_perm = config.num_perm
    shingles, counts = _shingles(*_tokens(texts, config), config.ngram_size)
    signatures = np.full((len(texts), num_perm), EMPTY_HASH, dtype=np.uint32)
    if len(shingles) == 0:
        return signatures, counts, shingles
    hashes = (shingles >> np.uint64(32)).astype(np.uint32)
    docs_with = np.flatnonzero(counts > 0)
    seg_starts = np.concatenate([[0], np.cumsum(counts[docs_with])[:-1]])  # rows where a doc begins
    # Permutation-major layout (perm, shingles): each permutation's minimum per document is a
    # contiguous SIMD reduction, several times faster than reducing across rows.
    buffer = np.empty((num_perm, min(_ROW_CHUNK, len(hashes))), dtype=np.uint32)
    b_column = b[:, None]
    for lo in range(0, len(hashes), _ROW_CHUNK):
        hi = min(lo + _ROW_CHUNK, len(hashes))
        rows = buffer[:, : hi - lo]
        np.multiply(a[:, None], hashes[None, lo:hi], out=rows)  # (perm, shingles), wraps mod 2^32
        rows += b_column
        # Segments of this chunk: from each document start inside it (and from `lo` itself).
        first = int(np.searchsorted(seg_starts, lo, side="right")) - 1
        last = int(np.searchsorted(seg_starts, hi, side="left"))
        local = seg_starts[first:last] - lo
        local[0] = 0
        minima = np.minimum.reduceat(rows, local, axis=1).T  # (documents, perm)
        docs = docs_with[first:last]
        np.minimum(signatures[docs], minima, out=minima)
        signatures[docs] = minima
    return signatures, counts, shingles


def sketch_documents(
    texts: Sequence[str], config: MinHashConfig = MinHashConfig(), *, with_sets: bool = False
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray] | None]:
    """Everything fuzzy dedup needs per document, in one pass over the text.

    Returns (band keys of shape (n, num_bands), shingle counts of shape (n,), and with `with_sets`
    each document's :func:`shingle_set`, else None). Documents with a count of 0 have no shingles:
    their band keys are meaningless and must not be bucketed.
    """
    signatures, counts, values, set_counts = _sketch(texts, config, with_sets)
    sets = np.split(values, np.cumsum(set_counts)[:-1]) if with_sets else None
    return band_hashes(signatures, config), counts, sets


def _sketch(
    texts: Sequence[str], config: MinHashConfig, with_sets: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(signatures, shingle counts, and with `with_sets` every document's sorted distinct shingle hashes
    back to back and their counts), from the C kernel when built, else numpy."""
    native = _native_sketch(texts, config, with_sets)
    no_sets = np.empty(0, dtype=np.uint64), np.zeros(len(texts), dtype=np.int64)
    if native is not None:
        signatures, counts, values, set_counts = native
        return (signatures, counts, values, set_counts) if values is not None else (signatures, counts, *no_sets)  # type: ignore[return-value]
    signatures, counts, shingles = _signatures(texts, config)
    if not with_sets:
        return signatures, counts, *no_sets
    values, set_counts = _sorted_sets(shingles, counts)
    return signatures, counts, values, set_counts


@dataclass(frozen=True)
class SketchBatch:
    """A batch's sketches as flat arrays (what fuzzy dedup stores; no per-document arrays).

    keys: (n, num_bands) uint64 LSH bucket keys; counts: (n,) shingles per document (0: no
    shingles, keys meaningless); set_values: every document's set of 64-bit shingle hashes (as
    :func:`shingle_set` gives them), sorted, back to back; set_offsets: (n + 1,) where each begins.
    """

    keys: np.ndarray
    counts: np.ndarray
    set_values: np.ndarray
    set_offsets: np.ndarray


def sketch_batch(
    texts: Sequence[str], config: MinHashConfig = MinHashConfig(), *, with_sets: bool = True
) -> SketchBatch:
    """Band keys and (with `with_sets`, else empty) 64-bit shingle sets of `texts`, in one pass, as flat arrays.

    Why 64 bits: verification decides on these sets, and a hash collision between two different
    shingles can only raise a Jaccard value (a shared element that is not shared text), so a pair
    below the threshold could be removed. With 32-bit values that happens with probability
    ~n^2 / 2^32 per pair of n-shingle documents (~1e-5 for 2 KB documents, ~1 for 100 KB ones);
    with 64 bits, ~n^2 / 2^64: never in practice, so the decision is the exact Jaccard of the word
    n-gram sets (tests/operators/test_fuzzy_dedup.py plants a 32-bit collision that flipped it).
    """
    signatures, counts, values, set_counts = _sketch(texts, config, with_sets)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(set_counts, out=offsets[1:])
    return SketchBatch(band_hashes(signatures, config), counts, values, offsets)


def shingle_sets(texts: Sequence[str], config: MinHashConfig = MinHashConfig()) -> tuple[np.ndarray, np.ndarray]:
    """Every text's sorted, distinct 64-bit shingle hashes back to back, and (n + 1,) offsets where each
    begins: :func:`shingle_set` of a batch, without the MinHash work."""
    native = _native_sketch(texts, config, True, with_signatures=False)
    if native is not None:
        values, set_counts = native[2], native[3]
    else:
        shingles, counts = _shingles(*_tokens(texts, config), config.ngram_size)
        values, set_counts = _sorted_sets(shingles, counts)
    assert values is not None and set_counts is not None
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(set_counts, out=offsets[1:])
    return values, offsets


def _sorted_sets(hashes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each document's hashes sorted without repeats, back to back; and how many each keeps.

    Sorts per document, then drops repeats for the whole batch in one vectorized pass (several
    times cheaper than np.unique per document).
    """
    if len(hashes) == 0:
        return hashes, np.zeros(len(counts), dtype=np.int64)
    parts = np.split(hashes, np.cumsum(counts)[:-1])
    ordered = np.concatenate([np.sort(part) for part in parts])
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    fresh = np.ones(len(ordered), dtype=bool)
    fresh[1:] = (ordered[1:] != ordered[:-1]) | (owner[1:] != owner[:-1])
    return ordered[fresh], np.bincount(owner[fresh], minlength=len(counts))


def band_hashes(signatures: np.ndarray, config: MinHashConfig = MinHashConfig()) -> np.ndarray:
    """One 64-bit LSH bucket key per (document, band): shape (n, num_bands), dtype uint64.

    Two documents share bucket key k in band i exactly when their signatures agree on all rows of
    band i (up to 64-bit hash collisions); keys of different bands never coincide by construction
    except by such a collision.
    """
    n = signatures.shape[0]
    if signatures.shape[1:] != (config.num_perm,):
        raise ValueError(
            f"signatures must have shape (n, {config.num_perm}) for {config.num_bands} bands x "
            f"{config.rows_per_band} rows, got {signatures.shape}; compute them with the same config."
        )
    rows = config.rows_per_band
    coeffs = _odd_constants(_BAND_SALT, rows + 1)
    salts = _odd_constants(_BAND_SALT ^ 0xB, config.num_bands)
    bands = signatures.reshape(n, config.num_bands, rows).astype(np.uint64)
    keys = np.broadcast_to(salts, (n, config.num_bands)) * coeffs[rows]
    for j in range(rows):
        keys = keys + bands[:, :, j] * coeffs[j]
    return fmix64(keys)


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Fraction of agreeing permutations: the MinHash estimate of Jaccard similarity."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures differ in shape: {sig_a.shape} vs {sig_b.shape}.")
    return float(np.mean(sig_a == sig_b))
