"""Gopher's word n-gram repetition signals, counted with NumPy sorts instead of Counters of tuples.

Why: counting 2-, 3-, 4- and 5-gram tuples in `collections.Counter`s (and finding the top gram's
first occurrence with a Python scan) was ~520 of the ~1,000 us `quality_signals` spent on an average
extracted web page (170 real pages of shared/data, 5.4 KB of text, ~850 words); this module does the
same in ~100 us (4 sorts of ~850 int64 and ~60 small NumPy calls).

How, exactly: a (k+1)-gram's key is `key_k * vocab_size + next_word_id`: packed word ids while the
next key and a position fit in 63 bits (all of the 2- to 5-grams of a page with up to ~1,500
distinct words in 1,000), else with key_k re-numbered densely (0..distinct-1) first, which keeps every key below words x vocabulary,
so keys never collide and nothing falls back to Python. Equal keys are grouped by a sort that keeps
them in position order, which gives what the Counter version computed, ties included:
`Counter.most_common(1)` returns the first-inserted of the equally most frequent grams, i.e. the one
whose first occurrence is earliest, and that occurrence is where its characters are counted. For the
duplicated n-grams (n = 5..10) an occurrence counts when an earlier one is equal; a 6..10-gram is
fixed by the 5-grams at its start and at its end (they overlap), so its key is a pair of 5-gram ids,
and only positions whose 5-gram repeats can repeat at all (on ordinary prose: few or none). Every
step is a sort, O(words log words), so a 1 MB repeated line stays cheap (~0.08 s; 4 MB ~0.3 s).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ngram_repetition_signals", "TOP_NGRAM_SIZES", "DUP_NGRAM_SIZES"]

TOP_NGRAM_SIZES = (2, 3, 4)
DUP_NGRAM_SIZES = range(5, 11)
_INT64_END = 2**63


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


def ngram_repetition_signals(
    ids: np.ndarray, lengths: np.ndarray, vocab_size: int, total_chars: int
) -> dict[str, float]:
    """Gopher's repetition signals over word ids (int64, 0..vocab_size-1) and word lengths (int64):

    - `top_{n}gram_char_frac` (n = 2, 3, 4): characters of the most frequent n-gram (its count x the
      characters of its first occurrence) over all word characters, capped at 1; 0 when no gram repeats.
    - `dup_{n}gram_char_frac` (n = 5..10): characters of words inside a REPEATED occurrence of an
      n-gram (the first occurrence is not counted, overlapping repeats count each character once),
      over all word characters.
    """
    out = {f"top_{n}gram_char_frac": 0.0 for n in TOP_NGRAM_SIZES}
    out.update({f"dup_{n}gram_char_frac": 0.0 for n in DUP_NGRAM_SIZES})
    n_words = len(ids)
    if total_chars == 0 or n_words < 2:
        return out
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
        if top_count > 1:
            first = int(order[run_bounds[:-1][counts == top_count]].min())
            chars = int(lengths[first : first + n].sum())
            out[f"top_{n}gram_char_frac"] = min(1.0, chars * top_count / total_chars)
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
    later = np.ones(len(keys), dtype=bool)
    later[run_bounds[:-1]] = False  # every slot but the first of its run is a repeat
    out[f"dup_{smallest}gram_char_frac"] = _covered_chars(order[later], smallest, lengths) / total_chars
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
        out[f"dup_{n}gram_char_frac"] = _covered_chars(repeats, n, lengths) / total_chars
    return out
