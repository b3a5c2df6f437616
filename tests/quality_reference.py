"""The quality signals as zephyr computed them before the kernel/NumPy rewrite: the tests' oracle.

Why: `zephyr.operators.quality.quality_signals` now counts words and n-grams in a C kernel or, without
it, with NumPy (packed ids, sorts, coverage masks) and takes shortcuts (one lowering of the whole
text, map over C methods, cheaper regexes). Every signal must stay exactly what the plain-Python
version computed, ties and rounding included, so this file keeps that version unchanged (Counter
over n-gram tuples, per-word lists) for the tests and ``benchmarks/quality.py`` to compare against.
Only the constants and the unchanged regexes are imported, so a change to the computation on either
side shows up as a difference.

A test and benchmark helper, not part of the package (tests import it as `quality_reference`: pytest
puts tests/ on the path; the benchmark adds tests/ itself).
"""

from __future__ import annotations

import re
from collections import Counter

from zephyr.operators.quality import (
    _BULLETS,
    _C4_TERMINAL,
    _CITATION,
    _POLICY,
    _PUNCT_STRIP,
    _TERMINAL,
    STOP_WORDS,
)

__all__ = ["reference_quality_signals"]

# The two regexes as they were: the package's now match differently (same counts, less work).
_NO_LETTER_WORD = re.compile(r"(?<!\S)(?:[^\s\w]|[\d_])++(?!\S)")
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f]+(?=\s|$)")


def _duplicate_stats(items: list[str]) -> tuple[int, int]:
    """(count, characters) of items that repeat an earlier item: Gopher's duplicate line/paragraph measure."""
    seen: set[str] = set()
    dup_count = dup_chars = 0
    for item in items:
        if item in seen:
            dup_count += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup_count, dup_chars


def _top_ngram_char_fraction(ids: list[int], lengths: list[int], n: int, total_chars: int) -> float:
    """Characters covered by the most frequent n-gram (count x its length) over all word characters."""
    if len(ids) < n or total_chars == 0:
        return 0.0
    grams = Counter(zip(*(ids[k:] for k in range(n)), strict=False))
    gram, count = grams.most_common(1)[0]
    if count <= 1:
        return 0.0
    start = next(i for i in range(len(ids) - n + 1) if tuple(ids[i : i + n]) == gram)
    return min(1.0, sum(lengths[start : start + n]) * count / total_chars)


def _dup_ngram_char_fractions(ids: list[int], lengths: list[int], sizes: range, total_chars: int) -> dict[int, float]:
    """For each n: characters of words inside a REPEATED occurrence of an n-gram (the first occurrence
    is not counted, overlapping repeats count each character once), over all word characters.

    Every repeated n-gram (n >= 5) starts with a repeated 5-gram, so larger n only look at the
    positions where the smallest n-gram repeats: on ordinary prose that is almost nothing.
    """
    out = dict.fromkeys(sizes, 0.0)
    smallest = sizes[0]
    if len(ids) < smallest or total_chars == 0:
        return out
    grams = list(zip(*(ids[k:] for k in range(smallest)), strict=False))
    counts = Counter(grams)
    candidates = [i for i, g in enumerate(grams) if counts[g] > 1]
    if not candidates:
        return out
    for n in sizes:
        seen: set[tuple[int, ...]] = set()
        covered = bytearray(len(ids))
        for i in candidates:
            if i + n > len(ids):
                continue
            gram = tuple(ids[i : i + n])
            if gram in seen:
                covered[i : i + n] = b"\x01" * n
            else:
                seen.add(gram)
        out[n] = sum(length for length, c in zip(lengths, covered, strict=False) if c) / total_chars
    return out


def reference_quality_signals(text: str, lang: str | None = "en") -> dict[str, float | int | str | None]:
    """All signals the Gopher, C4 and FineWeb rules read, computed in one go.

    `lang` picks the stop-word list (`STOP_WORDS`); for a language without one, `stop_words` is None
    and the stop-word rule does not apply.
    """
    stop_list = STOP_WORDS.get(lang or "en")
    words = text.split()
    n_words = len(words)
    raw_lines = text.split("\n")
    lines = [ln.strip() for ln in raw_lines if ln.strip()]
    n_lines = len(lines)
    paragraphs = [p.strip() for p in re.split(r"\n{2,}", text) if p.strip()]
    lowered_words = [w.lower().strip(_PUNCT_STRIP) for w in words]
    stripped_lengths = [len(w) for w in lowered_words if w]

    dup_lines, dup_line_chars = _duplicate_stats(lines)
    dup_paras, dup_para_chars = _duplicate_stats(paragraphs)
    text_chars = max(1, len(text))
    signals: dict[str, float | int] = {
        "chars": len(text),
        "words": n_words,
        "lines": n_lines,
        "paragraphs": len(paragraphs),
        "mean_word_length": (sum(stripped_lengths) / len(stripped_lengths)) if stripped_lengths else 0.0,
        "hash_word_ratio": text.count("#") / n_words if n_words else 0.0,
        "ellipsis_word_ratio": (text.count("...") + text.count("\u2026")) / n_words if n_words else 0.0,
        "bullet_lines_ratio": sum(1 for ln in lines if ln.startswith(_BULLETS)) / n_lines if n_lines else 0.0,
        "ellipsis_lines_ratio": (
            sum(1 for ln in lines if ln.endswith(("...", "\u2026"))) / n_lines if n_lines else 0.0
        ),
        "alpha_words_ratio": (n_words - len(_NO_LETTER_WORD.findall(text))) / n_words if n_words else 0.0,
        "stop_words": sum(1 for w in lowered_words if w in stop_list) if stop_list is not None else None,
        "stop_words_lang": (lang or "en") if stop_list is not None else None,
        "dup_line_frac": dup_lines / n_lines if n_lines else 0.0,
        "dup_line_char_frac": dup_line_chars / text_chars,
        "dup_para_frac": dup_paras / len(paragraphs) if paragraphs else 0.0,
        "dup_para_char_frac": dup_para_chars / text_chars,
        # FineWeb
        "terminal_punct_lines_ratio": sum(1 for ln in lines if ln.endswith(_TERMINAL)) / n_lines if n_lines else 0.0,
        "short_lines_ratio": sum(1 for ln in lines if len(ln) <= 30) / n_lines if n_lines else 0.0,
        "newline_word_ratio": text.count("\n") / n_words if n_words else 0.0,
    }
    vocabulary: dict[str, int] = {}
    ids = [vocabulary.setdefault(w, len(vocabulary)) for w in lowered_words]  # ints hash and compare fast
    lengths = [len(w) for w in lowered_words]
    gram_chars = sum(lengths)
    for n in (2, 3, 4):
        signals[f"top_{n}gram_char_frac"] = _top_ngram_char_fraction(ids, lengths, n, gram_chars)
    for n, frac in _dup_ngram_char_fractions(ids, lengths, range(5, 11), gram_chars).items():
        signals[f"dup_{n}gram_char_frac"] = frac
    signals.update(_c4_signals(raw_lines))
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in signals.items()}


def _c4_signals(raw_lines: list[str]) -> dict[str, float | int]:
    """C4's line filter, recorded as signals: what it keeps, how many sentences that has, and the
    document-level triggers (lorem ipsum, curly bracket) found on kept-candidate lines."""
    kept = sentences = 0
    lorem = curly = 0
    for raw in raw_lines:
        line = raw.strip()
        if not line:
            continue
        words = line.split()
        if len(line) > 1000 and any(len(w) > 1000 for w in words):
            continue
        line = _CITATION.sub("", line)
        if not line.endswith(_C4_TERMINAL) or line.endswith("..."):
            continue
        if len(words) < 3:
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            lorem = 1
        if "javascript" in lower:
            continue
        if "{" in line:
            curly = 1
        if any(p in lower for p in _POLICY):
            continue
        kept += 1
        sentences += max(1, len(_SENTENCE_END.findall(line)))
    return {"c4_kept_lines": kept, "c4_sentences": sentences, "c4_lorem_ipsum": lorem, "c4_curly_bracket": curly}
