"""A small example pipeline: word frequencies of the real pages in ../shared/data (or built-in text).

zephyr run recipes/word_count.py [--top 20]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

from zephyr import Dataset, counters

_SAMPLE = [
    "Zephyr turns raw web data into pretraining token mixtures.",
    "It runs the same recipe on a laptop over a sample and on a Ray cluster over terabytes.",
    "Every record keeps its decisions as fields, so a filter step drops by field.",
]


def _texts() -> list[str]:
    ground_truth = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "aeb-dev" / "ground-truth.json"
    if ground_truth.is_file():
        import json

        return [page["articleBody"] for page in json.loads(ground_truth.read_text()).values()]
    return _SAMPLE


def words(text: str) -> list[str]:
    found = re.findall(r"[a-z']+", text.lower())
    counters.increment("words", len(found))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    frequencies = (
        Dataset.from_list(_texts(), num_shards=4)
        .flat_map(words)
        .map(lambda word: (word, 1))
        .group_by(lambda pair: pair[0], _sum_counts, combiner=_sum_counts)
        .collect()
    )
    for word, count in Counter(dict(frequencies)).most_common(args.top):
        print(f"{count:6d}  {word}")


def _sum_counts(word: str, pairs) -> tuple[str, int]:
    # used as combiner (map side, per flushed buffer) and as reducer: (word, count) in, (word, count) out
    return word, sum(count for _, count in pairs)


if __name__ == "__main__":
    main()
