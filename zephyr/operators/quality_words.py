"""The word statistics of `quality_signals` with dicts and NumPy: the C kernel's fallback and its test.

`quality_kernel.c` computes, from the lowered whitespace tokens of a text, the counts the Gopher rules
read (words, characters, words without a letter, stop words, the top 2/3/4-gram, the characters in
repeated 5..10-grams); without the kernel, `word_statistics` here gives the same 17 integers. Both are
tested against the plain-Python reference (tests/quality_reference.py) on every real page.

Why NumPy and not Counters: counting 2-, 3-, 4- and 5-gram tuples in `collections.Counter`s (and
finding the top gram's first occurrence with a Python scan) was ~520 of the ~1,000 us the reference
spends on an average extracted web page (170 real pages of shared/data, 5.4 KB of text, ~850 words);
the sorts here take ~100 us (4 sorts of ~850 int64 and ~60 small NumPy calls); all of this module
~255 us, the kernel ~45.

How, exactly: a (k+1)-gram's key is `key_k * vocab_size + next_word_id`: packed word ids while the
next key and a position fit in 63 bits (all of the 2- to 5-grams of a page with up to ~1,500
distinct words in 1,000), else with key_k re-numbered densely (0..distinct-1) first, which keeps every
key below words x vocabulary, so keys never collide. Equal keys are grouped by a sort that keeps
them in position order, which gives what the Counter version computed, ties included:
`Counter.most_common(1)` returns the first-inserted of the equally most frequent grams, i.e. the one
whose first occurrence is earliest, and that occurrence is where its characters are counted. For the
duplicated n-grams (n = 5..10) an occurrence counts when an earlier one is equal; a 6..10-gram is
fixed by the 5-grams at its start and at its end (they overlap), so its key is a pair of 5-gram ids,
and only positions whose 5-gram repeats can repeat at all (on ordinary prose: few or none). Every
step is a sort, O(words log words), so a 1 MB repeated line stays cheap.
"""

from __future__ import annotations

import itertools
import re

import numpy as np

__all__ = ["word_statistics", "TOP_NGRAM_SIZES", "DUP_NGRAM_SIZES"]

TOP_NGRAM_SIZES = (2, 3, 4)
DUP_NGRAM_SIZES = range(5, 11)
_INT64_END = 2**63
# A word with no letter at all (digits, underscores, punctuation, symbols), searched in " " + the
# vocabulary joined by spaces. Possessive, so it runs in linear time even on huge digit runs; starting
# with a character class rather than a lookbehind lets the regex engine skip to candidate starts.
_NO_LETTER_WORD = re.compile(r"\s((?:[^\s\w]|[\d_])++)(?!\S)")


def _stable_sort(keys: np.ndarray, key_bound: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, sorted keys) of non-negative `keys` < `key_bound`, equal keys in position order.

    Position goes into the low bits of one int64 per key and a plain `np.sort` (SIMD) does the rest:
    4 sorts of a 573-word page's grams took 70 us with `argsort(kind="stable")` (timsort), 10 us so.
    Keys too large to share 63 bits with their position take the stable argsort."""
    count = len(keys)
    shift = count.bit_length()
    if key_bound << shift <= _INT64_END:
        composite = np.sort((keys << shift) | np.arange(count))
        return composite & ((1 << shift) - 1), composite >> shift
    order = np.argsort(keys, kind="stable")
    return order, keys[order]


def _run_bounds(sorted_keys: np.ndarray) -> np.ndarray:
    """Where each run of equal sorted keys starts, then len(sorted_keys)."""
    changes = np.empty(len(sorted_keys) + 1, dtype=bool)
    changes[0] = changes[-1] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=changes[1:-1])
    return np.flatnonzero(changes)


def _covered_chars(starts: np.ndarray, n: int, lengths: np.ndarray) -> int:
    """Characters of the words inside the union of the spans [start, start + n)."""
    reach = np.zeros(len(lengths), dtype=np.int64)
    reach[starts] = starts + n
    covered = np.maximum.accumulate(reach) > np.arange(len(lengths))
    return int(lengths[covered].sum())


def _ngram_counts(ids: np.ndarray, lengths: np.ndarray, vocab_size: int) -> list[int]:
    """(characters, count) of the most frequent 2-, 3- and 4-gram (first-inserted among equals, its
    characters those of its first occurrence), then for n = 5..10 the characters of words inside a
    repeated occurrence of an n-gram (the first occurrence not counted, overlaps counted once)."""
    out = [0] * (2 * len(TOP_NGRAM_SIZES) + len(DUP_NGRAM_SIZES))
    n_words = len(ids)
    shift = n_words.bit_length()
    # The (n-1)-grams' keys and their bound: packed word ids while they fit, else dense gram ids.
    prev, prev_bound = ids, vocab_size
    smallest = DUP_NGRAM_SIZES[0]
    for n in (*TOP_NGRAM_SIZES, smallest):
        if n_words < n:
            return out
        keys = prev[:-1] * vocab_size + ids[n - 1 :]
        key_bound = prev_bound * vocab_size
        order, sorted_keys = _stable_sort(keys, key_bound)
        run_bounds = _run_bounds(sorted_keys)
        counts = run_bounds[1:] - run_bounds[:-1]
        if n == smallest:
            break
        top_count = int(counts.max())
        first = int(order[run_bounds[:-1][counts == top_count]].min())
        out[2 * (n - 2)] = int(lengths[first : first + n].sum())
        out[2 * (n - 2) + 1] = top_count
        if (key_bound * vocab_size) << shift <= _INT64_END:
            prev, prev_bound = keys, key_bound
        else:
            prev = np.empty(len(keys), dtype=np.int64)
            prev[order] = np.repeat(np.arange(len(counts)), counts)
            prev_bound = len(counts)
    # The 5-grams: `keys`, `order`, `run_bounds`, `counts`.
    distinct = len(counts)
    if distinct == len(keys):
        return out
    dup_at = 2 * len(TOP_NGRAM_SIZES)
    later = np.ones(len(keys), dtype=bool)
    later[run_bounds[:-1]] = False  # every slot but the first of its run is a repeat
    out[dup_at] = _covered_chars(order[later], smallest, lengths)
    five_gram_ids = np.empty(len(keys), dtype=np.int64)
    five_gram_ids[order] = np.repeat(np.arange(distinct), counts)
    candidates = np.sort(order[np.repeat(counts > 1, counts)])  # positions whose 5-gram repeats
    for n in DUP_NGRAM_SIZES[1:]:
        at = candidates[candidates <= n_words - n]
        if len(at) < 2:
            break
        keys = five_gram_ids[at] * distinct + five_gram_ids[at + (n - smallest)]
        order, sorted_keys = _stable_sort(keys, distinct * distinct)
        repeats = at[order[1:][sorted_keys[1:] == sorted_keys[:-1]]]
        if len(repeats) == 0:
            break  # no repeated n-gram, so no longer one either
        out[dup_at + n - smallest] = _covered_chars(repeats, n, lengths)
    return out


def word_statistics(text: str, strip_chars: str, stop_words: tuple[str, ...] | None) -> tuple[int, ...]:
    """What `quality_kernel.word_statistics` computes, with dicts and NumPy (its fallback), as 17 ints:
    whitespace tokens of `text`, those that strip to something, their characters, words without a
    letter, tokens whose word is a stop word (-1 when `stop_words` is None), (characters, count) of the
    top 2-, 3- and 4-gram, and the characters inside repeated 5..10-grams. Each token is stripped of
    `strip_chars` (str.strip).

    Word ids go through dicts and NumPy indexing, with no Python loop per token but the strip. Words
    without a letter are searched in the vocabulary joined by spaces, not per word."""
    stripped = [token.strip(strip_chars) for token in text.split()]
    vocabulary = dict(zip(dict.fromkeys(stripped), itertools.count()))
    ids = np.fromiter(map(vocabulary.__getitem__, stripped), dtype=np.int64, count=len(stripped))
    lengths = np.fromiter(map(len, vocabulary), dtype=np.int64, count=len(vocabulary))[ids]
    word_counts = np.bincount(ids, minlength=len(vocabulary))
    no_letter = _NO_LETTER_WORD.findall(" " + " ".join(vocabulary))
    if "" in vocabulary:
        no_letter.append("")
    stop = -1 if stop_words is None else sum(int(word_counts[vocabulary[w]]) for w in stop_words if w in vocabulary)
    return (
        len(stripped),
        int(np.count_nonzero(lengths)),
        int(lengths.sum()),
        int(word_counts[list(map(vocabulary.__getitem__, no_letter))].sum()) if no_letter else 0,
        stop,
        *_ngram_counts(ids, lengths, len(vocabulary)),
    )
