"""Mixtures: exact per-block proportions, determinism, epoch coverage, validation stores."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from zephyr.tokenize import Mixture, feistel_permute, largest_remainder_counts, open_store
from zephyr.tokenize.store_write import ShardWriter, write_manifest

TOKENIZER = {
    "name": "t",
    "source": "none",
    "content_hash": "1" * 32,
    "vocab_size": 1000,
    "bos_token": None,
    "bos_id": None,
    "eos_token": None,
    "eos_id": None,
    "parse_special": False,
}


def _store(root: Path, tokens: int, marker: int, split: str = "train") -> Path:
    """A store whose stream is marker*... distinguishable: token = marker + position % 100."""
    stream = (marker + np.arange(tokens) % 100).astype(np.uint32)
    with ShardWriter(root, "shards/00000", dtype=np.uint16, vocab_size=1000, source="x", config_hash="h") as w:
        w.add(np.array_split(stream, 5))
        rec = w.close()
    write_manifest(
        root, shards=[rec], dtype=np.uint16, tokenizer=TOKENIZER, sources=[], split=split, config={}, config_hash="h"
    )
    return root


@pytest.fixture
def stores(tmp_path):
    web = _store(tmp_path / "web", 5000, 0)
    _store(tmp_path / "web" / "validation", 700, 800, split="validation")
    code = _store(tmp_path / "code", 3000, 200)
    books = _store(tmp_path / "books", 1000, 400)
    held = _store(tmp_path / "held", 500, 600)
    return {"web": web, "code": code, "books": books, "held": held}


def test_largest_remainder_counts():
    assert largest_remainder_counts({"a": 0.5, "b": 0.3, "c": 0.2}, 10) == {"a": 5, "b": 3, "c": 2}
    assert largest_remainder_counts({"a": 1, "b": 1, "c": 1}, 10) == {"a": 4, "b": 3, "c": 3}  # tie: first listed
    assert largest_remainder_counts({"a": 0.65, "b": 0.35}, 7) == {"a": 5, "b": 2}  # 4.55 / 2.45
    assert sum(largest_remainder_counts({"a": 0.123, "b": 0.456, "c": 0.421}, 97).values()) == 97
    with pytest.raises(ValueError, match="weights"):
        largest_remainder_counts({"a": 0.0}, 4)


def test_feistel_is_a_bijection():
    for n in (1, 2, 3, 10, 257, 1000, 4096, 12345):
        perm = feistel_permute(np.arange(n), n, key=7)
        assert sorted(perm.tolist()) == list(range(n))
    assert feistel_permute(np.arange(1000), 1000, 1).tolist() != feistel_permute(np.arange(1000), 1000, 2).tolist()


def _component_of(seq: np.ndarray) -> str:
    base = int(seq[0]) // 200 * 200
    return {0: "web", 200: "code", 400: "books"}[base]


def test_every_block_holds_exact_proportions(stores):
    weights = {"web": 0.5, "code": 0.3, "books": 0.2}
    mix = Mixture({k: (stores[k], w) for k, w in weights.items()}, seq_len=16, seed=3, block_size=20)
    assert mix.counts_per_block == {"web": 10, "code": 6, "books": 4}
    for block in range(12):
        names = Counter(mix.locate(block * 20 + p)[0] for p in range(20))
        assert names == Counter({"web": 10, "code": 6, "books": 4})
        # and the data really comes from that store
        seqs = [mix.sequence(block * 20 + p) for p in range(20)]
        assert Counter(_component_of(s) for s in seqs) == names
    orders = {tuple(mix.locate(b * 20 + p)[0] for p in range(20)) for b in range(12)}
    assert len(orders) > 1  # positions are shuffled per block


def test_sampling_is_a_pure_function_of_seed_and_index(stores):
    spec = {"web": (stores["web"], 0.7), "code": (stores["code"], 0.3)}
    a = Mixture(spec, seq_len=32, seed=11, block_size=10)
    b = Mixture(spec, seq_len=32, seed=11, block_size=10)
    late = b.batch(37, 4)  # b starts far into the run ("resume"), a from the start
    early = [a.batch(step, 4) for step in range(38)]
    assert np.array_equal(early[37], late)
    assert np.array_equal(a.batch(3, 4), b.batch(3, 4))
    assert a.batch(0, 4).shape == (4, 33) and a.batch(0, 4).dtype == np.int32
    c = Mixture(spec, seq_len=32, seed=12, block_size=10)
    assert not all(np.array_equal(a.batch(s, 4), c.batch(s, 4)) for s in range(5))
    assert np.array_equal(a.sequence(5), a.batch(1, 4)[1])


def test_each_epoch_visits_every_window_once(stores):
    mix = Mixture({"web": (stores["web"], 0.5), "books": (stores["books"], 0.5)}, seq_len=16, seed=0, block_size=4)
    books = open_store(stores["books"])
    windows = books.num_windows(16)
    seen = [w for i in range(4 * windows) if (loc := mix.locate(i))[0] == "books" for w in [loc[1]]]
    assert len(seen) == 2 * windows
    first, second = seen[:windows], seen[windows:]
    assert sorted(first) == list(range(windows)) and sorted(second) == list(range(windows))
    assert first != second  # a fresh order each epoch
    s = mix.sequence(0)
    name, w = mix.locate(0)
    assert s.tolist() == open_store(stores[name]).window(w, 16).astype(np.int32).tolist()


def test_validation_stores(stores):
    mix = Mixture({"web": (stores["web"], 1.0)}, seq_len=50, validation={"held": stores["held"]})
    assert sorted(mix.validation) == ["held", "web"]  # web's validation/ sub-store joins automatically
    batches = list(mix.validation_batches("held", 4))
    held = open_store(stores["held"])
    rows = np.concatenate(batches)
    assert len(rows) == held.num_windows(50)
    assert rows.tolist() == [held.window(i, 50).tolist() for i in range(len(rows))]
    assert [b.tolist() for b in mix.validation_batches("held", 4)] == [b.tolist() for b in batches]
    assert int(next(mix.validation_batches("web", 2))[0, 0]) == 800
    with pytest.raises(KeyError, match="no validation store"):
        next(mix.validation_batches("nope", 2))


def test_configuration_errors_say_how_to_fix(stores):
    with pytest.raises(ValueError, match="raise block_size"):
        Mixture({"web": (stores["web"], 0.99), "books": (stores["books"], 0.01)}, seq_len=8, block_size=10)
    with pytest.raises(ValueError, match="fewer than one window"):
        Mixture({"held": (stores["held"], 1.0)}, seq_len=10_000)


def test_config_round_trip(stores):
    mix = Mixture.from_config(
        {
            "seq_len": 16,
            "seed": 5,
            "block_size": 10,
            "components": {"web": {"store": str(stores["web"]), "weight": 0.6}, "code": [str(stores["code"]), 0.4]},
            "validation": {"held": str(stores["held"])},
        }
    )
    again = Mixture.from_config(mix.describe())
    assert again.describe() == mix.describe()
    assert np.array_equal(mix.batch(7, 5), again.batch(7, 5))
    with pytest.raises(ValueError, match="unknown mixture config keys"):
        Mixture.from_config({"seq_len": 4, "components": {}, "weights": {}})
