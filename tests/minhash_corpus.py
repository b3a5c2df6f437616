"""Near-duplicate evaluation corpora built from real text, with exact ground truth.

Why: MinHash quality claims mean nothing without a corpus whose true near-duplicate pairs are
known. We take real article text, plant copies edited at known word-edit rates (substitutions,
deletions and insertions of real words), compute the exact Jaccard similarity of shingle sets for
every pair that shares a shingle, and score predicted clusters against it. The shingles here are
strings from a plain-Python copy of the documented normalization rule (`reference_shingles`), not the
pipeline's hashes, so the ground truth does not share the code it judges. The tests and
``benchmarks/minhash.py`` use the same builders so their figures describe the same corpus.

A test and benchmark helper, not part of the package (tests import it as `minhash_corpus`: pytest puts
tests/ on the path; the benchmark adds tests/ itself, as it does for `ray_local`).
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_EDIT_RATES",
    "PairScores",
    "load_article_bodies",
    "article_chunks",
    "recombined_documents",
    "plant_near_duplicates",
    "exact_similar_pairs",
    "reference_jaccard",
    "reference_shingles",
    "reference_words",
    "score_clusters",
]

DEFAULT_EDIT_RATES: tuple[float, ...] = (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.08, 0.15)
"""Word-edit rates of planted copies: from exact copies to copies far below Jaccard 0.8
(with 5-word shingles a rate p gives roughly J = (1-p)^5 / (2 - (1-p)^5): 0.02 -> 0.82)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def load_article_bodies(path: str | Path) -> list[str]:
    """Article bodies from an article-extraction-benchmark ``ground-truth.json`` ({id: {articleBody}})."""
    with open(path, encoding="utf-8") as handle:
        records = json.load(handle)
    return [record["articleBody"] for _, record in sorted(records.items()) if record.get("articleBody")]


def article_chunks(articles: Sequence[str], *, chunk_chars: int = 2000, min_chars: int = 400) -> list[str]:
    """Non-overlapping pieces of ~`chunk_chars` of real text, cut at sentence ends."""
    chunks = []
    for article in articles:
        current: list[str] = []
        size = 0
        for sentence in _SENTENCE_END.split(article):
            current.append(sentence)
            size += len(sentence) + 1
            if size >= chunk_chars:
                chunks.append(" ".join(current))
                current, size = [], 0
        if size >= min_chars:
            chunks.append(" ".join(current))
    return chunks


def recombined_documents(articles: Sequence[str], count: int, *, doc_chars: int = 2000, seed: int = 0) -> list[str]:
    """`count` distinct documents of ~`doc_chars`, each a random draw of real sentences.

    For corpora larger than the source text: two such documents share a sentence now and then,
    but never most of their text, so they stay far below near-duplicate similarity.
    """
    sentences = [s for article in articles for s in _SENTENCE_END.split(article) if len(s.split()) >= 4]
    if not sentences:
        raise ValueError("recombined_documents needs source text with sentences of 4+ words; got none.")
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        picked: list[str] = []
        size = 0
        while size < doc_chars:
            sentence = sentences[rng.randrange(len(sentences))]
            picked.append(sentence)
            size += len(sentence) + 1
        docs.append(" ".join(picked))
    return docs


def _edit(text: str, rate: float, vocabulary: Sequence[str], rng: random.Random) -> str:
    """Each word, with probability `rate`, is replaced, deleted, or followed by an inserted word."""
    out = []
    for word in text.split(" "):
        roll = rng.random()
        if roll >= rate:
            out.append(word)
        elif roll < rate / 3:
            out.append(vocabulary[rng.randrange(len(vocabulary))])
        elif roll < 2 * rate / 3:
            continue
        else:
            out.extend((word, vocabulary[rng.randrange(len(vocabulary))]))
    return " ".join(out)


def plant_near_duplicates(
    base_texts: Sequence[str],
    *,
    dup_fraction: float = 0.4,
    max_copies: int = 3,
    edit_rates: Sequence[float] = DEFAULT_EDIT_RATES,
    chain_fraction: float = 0.25,
    source: str = "planted",
    seed: int = 0,
) -> list[dict]:
    """Documents: every base text, plus 1..max_copies edited copies of a `dup_fraction` of them.

    Each copy's edit rate is drawn from `edit_rates`. In a `chain_fraction` of families each copy
    is edited from the previous copy rather than from the original, so similarity decays along the
    chain: the weak links that verification must not let merge distant documents.
    Ids are ``doc-NNNNNNN`` assigned in shuffled order (so keepers are not always originals);
    ``metadata`` records ``family`` (index of the original) and ``edit_rate``.
    """
    if not 0.0 <= dup_fraction <= 1.0:
        raise ValueError(f"dup_fraction must be in [0, 1], got {dup_fraction!r}.")
    rng = random.Random(seed)
    vocabulary = [w for text in base_texts for w in text.split()]
    entries: list[tuple[str, int, float]] = []
    for family, text in enumerate(base_texts):
        entries.append((text, family, 0.0))
        if rng.random() >= dup_fraction:
            continue
        chained = rng.random() < chain_fraction
        parent = text
        for _ in range(rng.randint(1, max_copies)):
            rate = edit_rates[rng.randrange(len(edit_rates))]
            copy = _edit(parent if chained else text, rate, vocabulary, rng)
            entries.append((copy, family, rate))
            parent = copy
    order = list(range(len(entries)))
    rng.shuffle(order)
    width = max(7, len(str(len(entries))))
    docs = []
    for new_index, old_index in enumerate(order):
        text, family, rate = entries[old_index]
        docs.append(
            {
                "id": f"doc-{new_index:0{width}d}",
                "text": text,
                "source": source,
                "metadata": {"family": family, "edit_rate": rate},
            }
        )
    docs.sort(key=lambda d: d["id"])
    return docs


def reference_words(text: str) -> list[str]:
    """The normalization rule of :func:`zephyr.operators.minhash.normalize_text`, written out again in
    plain Python from its documentation (not calling it), so that scores rest on an independent oracle:
    lowercase; every ASCII character that is not a letter or digit, and in the Basic Multilingual Plane
    every character of Unicode category P*, S*, Z*, Cc or Cf, becomes a space; split on whitespace."""

    def separator(char: str) -> bool:
        code = ord(char)
        if code < 128:
            return not char.isalnum()
        if code > 0xFFFF or 0xD800 <= code <= 0xDFFF:
            return False
        category = unicodedata.category(char)
        return category[0] in "PSZ" or category in ("Cc", "Cf")

    return "".join(" " if separator(c) else c for c in text.lower()).split()


def reference_shingles(text: str, ngram_size: int = 5) -> set[tuple[str, ...]]:
    """The document's word n-grams as tuples of strings (no hashing): what "Jaccard" means in fuzzy dedup.

    A text with fewer than `ngram_size` words (but at least one) has one shingle of all its words.
    """
    words = reference_words(text)
    if not words:
        return set()
    if len(words) < ngram_size:
        return {tuple(words)}
    return {tuple(words[i : i + ngram_size]) for i in range(len(words) - ngram_size + 1)}


def reference_jaccard(a: set, b: set) -> float:
    """Jaccard similarity of two shingle sets; 0 when either is empty (as in fuzzy dedup)."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def exact_similar_pairs(
    docs: Sequence[Mapping], *, ngram_size: int = 5, threshold: float = 0.8
) -> dict[tuple[str, str], float]:
    """Every pair (id_a < id_b) whose exact word n-gram Jaccard is >= `threshold`, on
    :func:`reference_shingles` (strings, not the pipeline's hashes).

    Exact, not sampled: candidate pairs are all pairs sharing at least one shingle (an inverted index),
    and each is checked by set intersection. Meant for evaluation corpora of thousands of documents.
    """
    ids = [str(d["id"]) for d in docs]
    sets = [reference_shingles(d["text"], ngram_size) for d in docs]
    holders: dict[tuple[str, ...], list[int]] = {}
    for index, shingles in enumerate(sets):
        for shingle in shingles:
            holders.setdefault(shingle, []).append(index)
    shared: Counter[tuple[int, int]] = Counter()
    for members in holders.values():
        if len(members) < 2:
            continue
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                shared[(a, b)] += 1
    result = {}
    for (a, b), inter in shared.items():
        similarity = inter / (len(sets[a]) + len(sets[b]) - inter)
        if similarity >= threshold:
            pair = (ids[a], ids[b]) if ids[a] < ids[b] else (ids[b], ids[a])
            result[pair] = similarity
    return result


@dataclass(frozen=True)
class PairScores:
    """Pair precision and recall of predicted clusters against exact ground truth.

    ``precision``/``recall`` are strict: a predicted pair is any two documents in one cluster, a
    true pair any two with Jaccard >= threshold. Connected components are transitive, so two
    copies that each match an original but not each other count against strict precision; the
    ``closure_*`` figures score against the connected components of the true-pair graph instead,
    which is what clustering by connected components can achieve at best.

    ``removal_precision`` is what a user of dedup cares about: of the documents removed (every
    document whose cluster id is not its own id), the fraction whose similarity with the document
    kept for it (the one whose id is the cluster id) is >= threshold. Removing sibling copies of
    one original is correct here even when the siblings are below threshold with each other,
    which the strict figure counts as errors.
    """

    precision: float
    recall: float
    closure_precision: float
    closure_recall: float
    predicted_pairs: int
    true_pairs: int
    removal_precision: float = 1.0
    removed: int = 0


def _pairs_in(sizes: Iterable[int]) -> int:
    return sum(n * (n - 1) // 2 for n in sizes)


def score_clusters(cluster_of: Mapping[str, str], true_pairs: Iterable[tuple[str, str]]) -> PairScores:
    """Score `cluster_of` (doc id -> cluster id, every document present) against `true_pairs`.

    The cluster id must be the id of the cluster's kept document (as ``dup_cluster`` is).
    """
    true_pairs = list(true_pairs)
    true_set = {(a, b) if a < b else (b, a) for a, b in true_pairs}
    removed = [(doc, keeper) for doc, keeper in cluster_of.items() if doc != keeper]
    verified_removals = sum(
        1 for doc, keeper in removed if ((doc, keeper) if doc < keeper else (keeper, doc)) in true_set
    )
    predicted = _pairs_in(Counter(cluster_of.values()).values())
    hits = sum(1 for a, b in true_pairs if cluster_of[a] == cluster_of[b])
    # Components of the true-pair graph (union-find: evaluation only, never on the pipeline path).
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    for a, b in true_pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    component = {doc: find(doc) for doc in cluster_of}
    closure_true = _pairs_in(Counter(component.values()).values())
    closure_hits = _pairs_in(Counter((cluster_of[d], component[d]) for d in cluster_of).values())
    return PairScores(
        precision=hits / predicted if predicted else 1.0,
        recall=hits / len(true_pairs) if true_pairs else 1.0,
        closure_precision=closure_hits / predicted if predicted else 1.0,
        closure_recall=closure_hits / closure_true if closure_true else 1.0,
        predicted_pairs=predicted,
        true_pairs=len(true_pairs),
        removal_precision=verified_removals / len(removed) if removed else 1.0,
        removed=len(removed),
    )
