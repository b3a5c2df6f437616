"""Training and eval sequences from zephyr token stores.

Sampling is ``zephyr.tokenize.mixture.Mixture``'s: sequence ``i`` of a run is a pure
function of ``(seed, i)`` (block-deterministic weights, keyed Feistel
permutation per epoch), so ``batch(step)`` needs no loader state and a resumed
run reads exactly the batches a straight run would. This module only adapts it
to the trainer: the EOS id that drives document masking, and eval sets with
the UTF-8 byte counts that bits-per-byte needs.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from zephyr.tokenize.mixture import Mixture
from zephyr.tokenize.store import TokenStore, load_store_tokenizer
from zephyr.train.config import DataConfig

__all__ = ["EvalSet", "make_mixture", "eos_id_of", "eval_sets", "count_target_bytes"]


@dataclass(frozen=True)
class EvalSet:
    """Fixed eval batches (int32 [<=B, S+1]) and the UTF-8 bytes their targets decode to (None if unknown)."""

    name: str
    batches: tuple[np.ndarray, ...]
    target_bytes: int | None


def make_mixture(cfg: DataConfig) -> Mixture:
    """The weighted training mixture plus eval stores (``cfg.eval`` and each store's ``validation/``)."""
    if not cfg.train:
        raise ValueError("data.train is empty; give at least one source, e.g. data: {train: {web: [stores/web, 1.0]}}.")
    return Mixture(
        dict(cfg.train), seq_len=cfg.seq_len, seed=cfg.seed, block_size=cfg.mixture_block, validation=dict(cfg.eval)
    )


def eos_id_of(mixture: Mixture, override: int | None = None) -> int:
    """The document separator the stores were written with (segment ids for document masking come from it)."""
    if override is not None:
        return override
    ids = {c.store.tokenizer.get("eos_id") for c in mixture.components}
    found = next(iter(ids)) if len(ids) == 1 else None
    if found is None:
        raise ValueError(
            f"cannot tell the EOS id from the stores' manifests (found {sorted(map(str, ids))}); "
            "set data.eos_id in the config."
        )
    return int(found)


def count_target_bytes(store: TokenStore, batches: list[np.ndarray]) -> int | None:
    """UTF-8 bytes of the target tokens, decoded with the store's own tokenizer (None if it cannot be loaded).

    EOS targets are scored but count no bytes: they are document boundaries, not text.
    """
    source = store.tokenizer.get("source")
    try:
        tokenizer = load_store_tokenizer(store)
    except Exception as e:  # an unavailable tokenizer must not stop training; bpb is then reported as None
        warnings.warn(
            f"bits-per-byte unavailable for {store.path}: tokenizer {source!r} could not be loaded ({e}).", stacklevel=2
        )
        return None
    eos = store.tokenizer.get("eos_id")
    return sum(len(tokenizer.decode(row[1:][row[1:] != eos]).encode("utf-8")) for batch in batches for row in batch)


def eval_sets(mixture: Mixture, *, batch_size: int, max_batches: int, required: Collection[str] = ()) -> list[EvalSet]:
    """Every validation store of the mixture as a fixed list of batches (same batches every eval).

    An eval set named in `required` (the config's explicit `data.eval`) must hold at least one sequence;
    a training store's own `validation/` split that is too small (a tiny source) is skipped with a warning.
    """
    out = []
    for name, store in mixture.validation.items():
        batches = list(mixture.validation_batches(name, batch_size, max_batches=max_batches))
        if not batches and name not in required:
            warnings.warn(
                f"skipping eval set {name!r} ({store.path}): {store.num_tokens} tokens, fewer than one "
                f"sequence of {mixture.seq_len + 1}.",
                stacklevel=2,
            )
            continue
        if not batches:
            raise ValueError(
                f"eval set {name!r} ({store.path}) has {store.num_tokens} tokens, fewer than one sequence of "
                f"{mixture.seq_len + 1}."
            )
        out.append(EvalSet(name, tuple(batches), count_target_bytes(store, batches)))
    return out
