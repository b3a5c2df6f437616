"""Heuristic quality rules: Gopher quality + repetition, C4, FineWeb, with their published thresholds.

Every signal any rule needs is computed once per document by `quality_signals(text)` (one split into
words, lines and paragraphs; the word and n-gram counts in the C kernel `quality_kernel.c`, or NumPy
in `quality_words` without it) and stored on the document as `quality_signals`, so thresholds can be
re-tuned later from the stored signals without recomputing anything. Rules are frozen dataclasses
whose fields are the thresholds (defaults = the paper's numbers) and whose `check` returns the stable
reason string of the first threshold violated, or None:

- Gopher (Rae et al. 2021, "Scaling Language Models: Methods, Analysis & Insights from Training
  Gopher", https://arxiv.org/abs/2112.11446, appendix A, Table A1): `gopher_rep_*`, `gopher_*`.
- C4 (Raffel et al. 2020, https://jmlr.org/papers/volume21/20-074/20-074.pdf, section 2.2, and the
  TFDS c4_utils reference): `c4_*`. The bad-words list is not applied (it needs a download).
- FineWeb (Penedo et al. 2024, https://arxiv.org/abs/2406.17557, section 3.4): `fineweb_*`.

`QualityFilter` runs a tuple of rules, records the first failing rule's reason in `filter_reason`
(never overwriting an earlier stage's reason) and counts `quality/dropped/<reason>`; a later
`filter` step drops by that field.

Words are whitespace tokens, as in the papers; languages written without spaces (zh, ja, th) get
meaningless word statistics, so run these rules after language id on space-delimited languages only.
The stop-word rule follows the document's `lang` (English when absent); the other thresholds are the
papers' English ones.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from zephyr import counters
from zephyr.native import optional_kernel
from zephyr.operators.quality_words import DUP_NGRAM_SIZES, TOP_NGRAM_SIZES, word_statistics

__all__ = [
    "quality_signals",
    "GopherRepetition",
    "GopherQuality",
    "C4Quality",
    "FineWebQuality",
    "QualityFilter",
    "QualityRule",
    "STOP_WORDS",
]

_TERMINAL = (".", "!", "?", '"', "'", "\u201d", "\u2019", "\u3002", "\uff01", "\uff1f", "\u2026")
_C4_TERMINAL = (".", "?", "!", '"', "'")
_BULLETS = ("\u2022", "\u2023", "\u25cf", "\u25cb", "\u25aa", "\u25e6", "-", "*", "\u2013", "\u2014", "\u00b7")
# Gopher's English list, and for other languages eight of their most frequent function words in the
# same spirit (a page of real prose in that language contains several of them; FineWeb-2 likewise
# uses per-language stop words). Languages without a list skip the stop-word rule.
STOP_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset({"the", "be", "to", "of", "and", "that", "have", "with"}),
    "de": frozenset({"der", "die", "und", "in", "den", "von", "zu", "das"}),
    "fr": frozenset({"de", "la", "le", "et", "les", "des", "en", "un"}),
    "es": frozenset({"de", "la", "que", "el", "en", "y", "los", "del"}),
    "it": frozenset({"di", "e", "il", "la", "che", "in", "per", "un"}),
    "pt": frozenset({"de", "a", "o", "que", "e", "do", "da", "em"}),
    "nl": frozenset({"de", "en", "van", "het", "een", "in", "is", "dat"}),
}
_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
# The last mark of each run of sentence-ending marks followed by whitespace or the end: one match
# per sentence end, like matching the whole run, but without a quantifier to backtrack (half the time).
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f](?=\s|$)")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
# Each policy phrase contains "use" or "policy": two substring tests rule out most lines before six.
_POLICY_HINTS = ("use", "policy")
_PUNCT_STRIP = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u201c\u201d\u2018\u2019\u00ab\u00bb"
# C-level callables for `map`: a per-word/per-line Python lambda or generator costs more than the test.
_starts_with_bullet = operator.methodcaller("startswith", _BULLETS)
_ends_with_ellipsis = operator.methodcaller("endswith", ("...", "\u2026"))
_ends_with_terminal = operator.methodcaller("endswith", _TERMINAL)


def _duplicate_stats(items: list[str]) -> tuple[int, int]:
    """(count, characters) of items that repeat an earlier item: Gopher's duplicate line/paragraph measure.

    Every distinct item's first occurrence is the only one not counted, so both are totals minus the
    distinct items' (a set and two sums in C instead of a Python loop per item)."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


def _kernel() -> Any:
    """The C kernel (zephyr/operators/quality_kernel.c), or None when it was not built."""
    return optional_kernel("zephyr.operators.quality_kernel")


def quality_signals(text: str, lang: str | None = "en") -> dict[str, float | int | str | None]:
    """All signals the Gopher, C4 and FineWeb rules read, computed in one go.

    `lang` picks the stop-word list (`STOP_WORDS`); for a language without one, `stop_words` is None
    and the stop-word rule does not apply.

    Words are lowered once for the whole text (lowering commutes with splitting on whitespace: no
    whitespace character changes case and none appears in a lowercase form; the final-sigma rule only
    looks across case-ignorable characters, which whitespace is not); their statistics (stripping,
    ids, n-grams) come from the C kernel `quality_kernel.c`, or without it from NumPy sorts
    (`quality_words`). Same values as the per-word Counter version (tests/quality_reference.py):
    ~170 us (kernel) or ~430 us (NumPy) instead of ~1,000 on an average extracted web page
    (`benchmarks/quality.py`).
    """
    stop_list = STOP_WORDS.get(lang or "en")
    lines = list(filter(None, map(str.strip, text.split("\n"))))
    n_lines = len(lines)
    # Runs of 2+ newlines split paragraphs; split("\n\n") cuts such a run into pieces that are empty or
    # a lone newline, which the strip and the filter remove (same paragraphs as re.split(r"\n{2,}")).
    paragraphs = list(filter(None, map(str.strip, text.split("\n\n"))))

    kernel = _kernel()
    count_words = kernel.word_statistics if kernel is not None else word_statistics
    n_words, nonempty_words, gram_chars, no_letter_words, stop_words, *ngram_counts = count_words(
        text.lower(), _PUNCT_STRIP, None if stop_list is None else tuple(stop_list)
    )

    dup_lines, dup_line_chars = _duplicate_stats(lines)
    dup_paras, dup_para_chars = _duplicate_stats(paragraphs)
    text_chars = max(1, len(text))
    signals: dict[str, float | int | str | None] = {
        "chars": len(text),
        "words": n_words,
        "lines": n_lines,
        "paragraphs": len(paragraphs),
        "mean_word_length": gram_chars / nonempty_words if nonempty_words else 0.0,
        "hash_word_ratio": text.count("#") / n_words if n_words else 0.0,
        "ellipsis_word_ratio": (text.count("...") + text.count("\u2026")) / n_words if n_words else 0.0,
        "bullet_lines_ratio": sum(map(_starts_with_bullet, lines)) / n_lines if n_lines else 0.0,
        "ellipsis_lines_ratio": sum(map(_ends_with_ellipsis, lines)) / n_lines if n_lines else 0.0,
        "alpha_words_ratio": (n_words - no_letter_words) / n_words if n_words else 0.0,
        "stop_words": stop_words if stop_list is not None else None,
        "stop_words_lang": (lang or "en") if stop_list is not None else None,
        "dup_line_frac": dup_lines / n_lines if n_lines else 0.0,
        "dup_line_char_frac": dup_line_chars / text_chars,
        "dup_para_frac": dup_paras / len(paragraphs) if paragraphs else 0.0,
        "dup_para_char_frac": dup_para_chars / text_chars,
        # FineWeb
        "terminal_punct_lines_ratio": sum(map(_ends_with_terminal, lines)) / n_lines if n_lines else 0.0,
        "short_lines_ratio": sum(1 for ln in lines if len(ln) <= 30) / n_lines if n_lines else 0.0,
        "newline_word_ratio": text.count("\n") / n_words if n_words else 0.0,
    }
    signals.update(_ngram_fractions(ngram_counts, gram_chars))
    signals.update(_c4_signals(lines))
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in signals.items()}


def _ngram_fractions(counts: list[int], gram_chars: int) -> dict[str, float]:
    """Gopher's repetition signals from the word statistics' n-gram counts, over all word characters:
    `top_{n}gram_char_frac` (n = 2, 3, 4): the most frequent n-gram's count x its characters, capped at
    1, and 0 when no gram repeats; `dup_{n}gram_char_frac` (n = 5..10): characters of words inside a
    repeated occurrence of an n-gram (the first occurrence is not counted, overlaps count once)."""
    out: dict[str, float] = {}
    for k, n in enumerate(TOP_NGRAM_SIZES):
        chars, count = counts[2 * k], counts[2 * k + 1]
        out[f"top_{n}gram_char_frac"] = min(1.0, chars * count / gram_chars) if count > 1 and gram_chars else 0.0
    dup = counts[2 * len(TOP_NGRAM_SIZES) :]
    for k, n in enumerate(DUP_NGRAM_SIZES):
        out[f"dup_{n}gram_char_frac"] = dup[k] / gram_chars if gram_chars else 0.0
    return out


def _c4_signals(lines: list[str]) -> dict[str, float | int]:
    """C4's line filter over the stripped non-empty lines, recorded as signals: what it keeps, how many
    sentences that has, and the document-level triggers (lorem ipsum, curly bracket) found on
    kept-candidate lines.

    The side-effect-free skips run cheapest first (the terminal-punctuation test drops most lines of a
    web page before they are split into words or lowered), and the citation markers are only removed
    from lines that contain a "[" (the only lines they can change)."""
    kept = sentences = 0
    lorem = curly = 0
    for line in lines:
        line_kept = _CITATION.sub("", line) if "[" in line else line
        if not line_kept.endswith(_C4_TERMINAL) or line_kept.endswith("..."):
            continue
        if len(line.split(None, 2)) < 3:  # fewer than 3 words
            continue
        if len(line) > 1000 and max(map(len, line.split())) > 1000:
            continue
        line = line_kept
        lower = line.lower()
        if "lorem ipsum" in lower:
            lorem = 1
        if "javascript" in lower:
            continue
        if "{" in line:
            curly = 1
        if (_POLICY_HINTS[0] in lower or _POLICY_HINTS[1] in lower) and any(p in lower for p in _POLICY):
            continue
        kept += 1
        sentences += max(1, len(_SENTENCE_END.findall(line)))
    return {"c4_kept_lines": kept, "c4_sentences": sentences, "c4_lorem_ipsum": lorem, "c4_curly_bracket": curly}


class QualityRule(Protocol):
    """A quality rule: `check(signals)` returns the stable reason a document fails it, or None when it passes."""

    def check(self, signals: dict[str, float | int]) -> str | None: ...


@dataclass(frozen=True)
class GopherRepetition:
    """Gopher repetition removal (Rae et al. 2021, Table A1, https://arxiv.org/abs/2112.11446)."""

    dup_line_frac: float = 0.30
    dup_para_frac: float = 0.30
    dup_line_char_frac: float = 0.20
    dup_para_char_frac: float = 0.20
    top_ngram_char_frac: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    dup_ngram_char_frac: tuple[tuple[int, float], ...] = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )

    def __post_init__(self) -> None:
        for n, _ in self.top_ngram_char_frac:
            if n not in (2, 3, 4):
                raise ValueError(
                    f"GopherRepetition.top_ngram_char_frac supports n in 2..4 (signals computed), got n={n}"
                )
        for n, _ in self.dup_ngram_char_frac:
            if not 5 <= n <= 10:
                raise ValueError(
                    f"GopherRepetition.dup_ngram_char_frac supports n in 5..10 (signals computed), got n={n}"
                )

    def check(self, s: dict[str, float | int]) -> str | None:
        if s["dup_line_frac"] > self.dup_line_frac:
            return "gopher_rep_dup_line_frac"
        if s["dup_para_frac"] > self.dup_para_frac:
            return "gopher_rep_dup_para_frac"
        if s["dup_line_char_frac"] > self.dup_line_char_frac:
            return "gopher_rep_dup_line_char_frac"
        if s["dup_para_char_frac"] > self.dup_para_char_frac:
            return "gopher_rep_dup_para_char_frac"
        for n, limit in self.top_ngram_char_frac:
            if s[f"top_{n}gram_char_frac"] > limit:
                return f"gopher_rep_top_{n}gram"
        for n, limit in self.dup_ngram_char_frac:
            if s[f"dup_{n}gram_char_frac"] > limit:
                return f"gopher_rep_dup_{n}gram"
        return None


@dataclass(frozen=True)
class GopherQuality:
    """Gopher quality filter (Rae et al. 2021, appendix A.1.1, https://arxiv.org/abs/2112.11446).

    `min_alpha_words_ratio`: at least 80% of words must contain an alphabetic character.
    `min_stop_words`: at least 2 of the English stop words {the, be, to, of, and, that, have, with}
    (or of the document language's list in `STOP_WORDS`, by the `lang` field language id adds;
    skipped for languages without a list; None disables the rule).
    """

    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alpha_words_ratio: float = 0.8
    min_stop_words: int | None = 2

    def check(self, s: dict[str, float | int]) -> str | None:
        if s["words"] < self.min_words:
            return "gopher_too_few_words"
        if s["words"] > self.max_words:
            return "gopher_too_many_words"
        if s["mean_word_length"] < self.min_mean_word_length:
            return "gopher_short_mean_word_length"
        if s["mean_word_length"] > self.max_mean_word_length:
            return "gopher_long_mean_word_length"
        if s["hash_word_ratio"] > self.max_symbol_word_ratio:
            return "gopher_hash_ratio"
        if s["ellipsis_word_ratio"] > self.max_symbol_word_ratio:
            return "gopher_ellipsis_ratio"
        if s["bullet_lines_ratio"] > self.max_bullet_lines_ratio:
            return "gopher_bullet_lines"
        if s["ellipsis_lines_ratio"] > self.max_ellipsis_lines_ratio:
            return "gopher_ellipsis_lines"
        if s["alpha_words_ratio"] < self.min_alpha_words_ratio:
            return "gopher_alpha_words"
        if self.min_stop_words is not None and s["stop_words"] is not None and s["stop_words"] < self.min_stop_words:
            return "gopher_stop_words"
        return None


@dataclass(frozen=True)
class C4Quality:
    """C4 document rules (Raffel et al. 2020, section 2.2): after C4's line filter (terminal
    punctuation, >= 3 words, no "javascript", no policy boilerplate), at least `min_sentences`
    sentences must remain; pages with "lorem ipsum" or a curly bracket are dropped."""

    min_sentences: int = 5
    drop_lorem_ipsum: bool = True
    drop_curly_bracket: bool = True

    def check(self, s: dict[str, float | int]) -> str | None:
        if self.drop_lorem_ipsum and s["c4_lorem_ipsum"]:
            return "c4_lorem_ipsum"
        if self.drop_curly_bracket and s["c4_curly_bracket"]:
            return "c4_curly_bracket"
        if s["c4_sentences"] < self.min_sentences:
            return "c4_too_few_sentences"
        return None


@dataclass(frozen=True)
class FineWebQuality:
    """FineWeb's own rules (Penedo et al. 2024, section 3.4, https://arxiv.org/abs/2406.17557):
    lines ending in punctuation >= 12%, lines of <= 30 chars <= 67%, characters in duplicated lines
    <= 1%, newlines per word <= 0.3."""

    min_terminal_punct_lines_ratio: float = 0.12
    max_short_lines_ratio: float = 0.67
    max_dup_line_char_frac: float = 0.01
    max_newline_word_ratio: float = 0.3

    def check(self, s: dict[str, float | int]) -> str | None:
        if s["lines"] == 0:
            return "fineweb_empty"
        if s["terminal_punct_lines_ratio"] < self.min_terminal_punct_lines_ratio:
            return "fineweb_line_punct_ratio"
        if s["short_lines_ratio"] > self.max_short_lines_ratio:
            return "fineweb_short_line_ratio"
        if s["dup_line_char_frac"] > self.max_dup_line_char_frac:
            return "fineweb_char_dup_ratio"
        if s["newline_word_ratio"] > self.max_newline_word_ratio:
            return "fineweb_list_ratio"
        return None


def _default_rules() -> tuple:
    return (GopherRepetition(), GopherQuality(), C4Quality(), FineWebQuality())


@dataclass(frozen=True)
class QualityFilter:
    """Document operator: adds `quality_signals` and, when a rule fails, `filter_reason`.

    Rules run in order and the first failure is recorded (the FineWeb pipeline order: Gopher
    repetition, Gopher quality, C4, FineWeb). Signals already on the document are reused, so
    re-running with other thresholds costs nothing. `all_reasons=True` also stores every failing
    rule in `quality_reasons` (for threshold studies).
    """

    rules: Sequence[QualityRule] = field(default_factory=_default_rules)
    text_field: str = "text"
    all_reasons: bool = False

    def __call__(self, doc: dict) -> dict:
        out = dict(doc)
        signals = out.get("quality_signals")
        if not signals:
            signals = quality_signals(out.get(self.text_field) or "", lang=out.get("lang") or "en")
            out["quality_signals"] = signals
        reasons = []
        for rule in self.rules:
            reason = rule.check(signals)
            if reason:
                reasons.append(reason)
                if not self.all_reasons:
                    break
        if self.all_reasons:
            out["quality_reasons"] = reasons
        if reasons:
            counters.increment(f"quality/failed/{reasons[0]}")
            if not out.get("filter_reason"):
                out["filter_reason"] = reasons[0]
                counters.increment(f"quality/dropped/{reasons[0]}")
        else:
            counters.increment("quality/passed")
        return out
