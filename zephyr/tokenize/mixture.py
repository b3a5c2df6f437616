"""Weighted mixtures of token stores with block-deterministic sampling.

A mixture is ``{name: (store, weight)}``. Training sequence ``i`` (a window of
``seq_len + 1`` tokens) is a pure function of ``(seed, i)``, so a run can
resume at any step, on any number of hosts, without saved sampler state:

1. Sequences are grouped in blocks of ``block_size``. Every block holds each
   component exactly ``counts[name]`` times: ``block_size * weight`` rounded
   by the largest-remainder method (ties go to the component listed first).
   So proportions are exact per block, not just on average.
2. The order of components inside block ``b`` is a permutation drawn from a
   generator seeded by ``(seed, b)``.
3. The ``r``-th occurrence of component ``k`` in block ``b`` is that
   component's sequence number ``n = b * counts[k] + r``. Its window is
   ``perm_e(n mod W)`` where ``W`` is the component's window count,
   ``e = n // W`` the epoch, and ``perm_e`` a keyed Feistel permutation of
   ``[0, W)`` (keyed by seed, component and epoch). Each epoch visits every
   window once, in a fresh order, using O(1) memory even for billions of
   windows.

Windows are the store's non-overlapping ``seq_len`` strides
(:meth:`TokenStore.window`): documents are packed back to back, separated by
the EOS the tokenizer step added.

Validation-only stores are read in order, without shuffling or weights.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .store import TokenStore

__all__ = ["Mixture", "MixtureComponent", "largest_remainder_counts", "feistel_permute"]


def largest_remainder_counts(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """Integer seats per name summing to ``total``, proportional to ``weights`` (Hamilton's method)."""
    names = list(weights)
    w = np.asarray([float(weights[n]) for n in names], dtype=np.float64)
    if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"mixture weights must be finite, >= 0 and not all zero; got {dict(weights)}.")
    quotas = total * w / w.sum()
    seats = np.floor(quotas).astype(np.int64)
    left = total - int(seats.sum())
    # Largest fractional remainder first; stable sort keeps the listed order for ties.
    order = np.argsort(-(quotas - seats), kind="stable")
    seats[order[:left]] += 1
    return {n: int(s) for n, s in zip(names, seats, strict=False)}


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def feistel_permute(index: np.ndarray | int, n: int, key: int) -> np.ndarray:
    """A keyed bijection of ``[0, n)``: where each ``index`` goes. Vectorised; pure.

    A 4-round balanced Feistel network over the smallest even power of two
    >= n, with cycle walking to stay inside ``[0, n)``.
    """
    idx = np.atleast_1d(np.asarray(index, dtype=np.uint64))
    if n < 1:
        raise ValueError(f"cannot permute an empty range (n={n}).")
    if n == 1:
        return np.zeros_like(idx)
    if (idx >= np.uint64(n)).any():
        raise IndexError(f"index out of range [0, {n}).")
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    with np.errstate(over="ignore"):
        keys = _mix64(np.asarray([(key * 4 + r + 1) & 0xFFFFFFFFFFFFFFFF for r in range(4)], dtype=np.uint64))
        out = idx.copy()
        todo = np.ones(len(out), dtype=bool)
        while todo.any():
            x = out[todo]
            left, right = x >> np.uint64(half), x & mask
            for k in keys:
                left, right = right, left ^ (_mix64(right ^ k) & mask)
            x = (left << np.uint64(half)) | right
            out[todo] = x
            todo[todo] = x >= np.uint64(n)
    return out


def _key(*parts: int) -> int:
    with np.errstate(over="ignore"):
        h = np.uint64(0x9E3779B97F4A7C15)
        for p in parts:
            h = _mix64(np.atleast_1d(h ^ np.uint64(p & 0xFFFFFFFFFFFFFFFF)))[0]
    return int(h)


@dataclass(frozen=True)
class MixtureComponent:
    """One store of a mixture: its weight, the sequences it contributes to every block, and how many windows of the
    sequence length it holds."""

    name: str
    store: TokenStore
    weight: float
    per_block: int  # sequences of this component in every block
    windows: int  # windows of seq_len in its store


def _open(store: str | os.PathLike[str] | TokenStore) -> TokenStore:
    return store if isinstance(store, TokenStore) else TokenStore(store)


class Mixture:
    """Deterministic weighted sampling of training windows from several token stores.

    Example::

        mix = Mixture({"web": ("stores/web", 0.7), "code": ("stores/code", 0.3)},
                      seq_len=1024, seed=0, block_size=100)
        x = mix.batch(step, batch_size=8)   # int32 [8, 1025]; x[:, :-1] inputs, x[:, 1:] targets

    ``validation`` adds named validation-only stores; each component store's
    ``validation/`` sub-store (from ``--validation-fraction``) is added under the
    component's name unless that name is given explicitly.
    """

    def __init__(
        self,
        components: Mapping[str, tuple[str | os.PathLike[str] | TokenStore, float]],
        *,
        seq_len: int,
        seed: int = 0,
        block_size: int = 256,
        validation: Mapping[str, str | os.PathLike[str] | TokenStore] | None = None,
        include_store_validation: bool = True,
    ) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}.")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}.")
        if not components:
            raise ValueError("a mixture needs at least one component: {name: (store_path, weight)}.")
        self.seq_len, self.seed, self.block_size = seq_len, int(seed), block_size
        stores = {name: _open(spec[0]) for name, spec in components.items()}
        weights = {name: float(spec[1]) for name, spec in components.items()}
        counts = largest_remainder_counts(weights, block_size)
        comps = []
        vocab = {s.vocab_size for s in stores.values()}
        hashes = {s.tokenizer.get("content_hash") for s in stores.values()}
        if len(hashes) > 1:
            raise ValueError(
                f"mixture components were tokenized with different tokenizers (hashes {sorted(map(str, hashes))}); "
                "retokenize them with one tokenizer."
            )
        for name, store in stores.items():
            if weights[name] > 0 and counts[name] == 0:
                raise ValueError(
                    f"component {name!r} has weight {weights[name]} but gets 0 of {block_size} sequences per block; "
                    f"raise block_size (>= {int(np.ceil(sum(weights.values()) / weights[name]))}) or its weight."
                )
            windows = store.num_windows(seq_len)
            if counts[name] and windows == 0:
                raise ValueError(
                    f"component {name!r}: store {store.location} has {store.num_tokens} tokens, "
                    f"fewer than one window of seq_len {seq_len} + 1."
                )
            comps.append(MixtureComponent(name, store, weights[name], counts[name], windows))
        self.components: tuple[MixtureComponent, ...] = tuple(comps)
        self.vocab_size = max(vocab)
        self._layout_cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._base = np.repeat(np.arange(len(comps)), [c.per_block for c in comps])
        self.validation: dict[str, TokenStore] = {n: _open(s) for n, s in (validation or {}).items()}
        if include_store_validation:
            for c in comps:
                sub = c.store.validation
                if sub is not None and c.name not in self.validation:
                    self.validation[c.name] = sub

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Mixture:
        """Build from a JSON/YAML-style mapping (what :meth:`describe` writes also loads back)::

        {"seq_len": 1024, "seed": 0, "block_size": 256,
         "components": {"web": {"store": "stores/web", "weight": 0.7}, "code": ["stores/code", 0.3]},
         "validation": {"held": "stores/held"}}
        """
        unknown = set(config) - {
            "seq_len",
            "seed",
            "block_size",
            "components",
            "validation",
            "include_store_validation",
        }
        if unknown:
            raise ValueError(
                f"unknown mixture config keys {sorted(unknown)}; expected seq_len, seed, block_size, "
                "components, validation, include_store_validation."
            )
        if "seq_len" not in config or "components" not in config:
            raise ValueError("a mixture config needs 'seq_len' and 'components' ({name: {store, weight}}).")
        components: dict[str, tuple[str, float]] = {}
        for name, spec in config["components"].items():
            if isinstance(spec, Mapping):
                components[name] = (spec["store"], float(spec["weight"]))
            else:
                store, weight = spec
                components[name] = (store, float(weight))
        return cls(
            components,
            seq_len=int(config["seq_len"]),
            seed=int(config.get("seed", 0)),
            block_size=int(config.get("block_size", 256)),
            validation=config.get("validation"),
            include_store_validation=bool(config.get("include_store_validation", True)),
        )

    # -- sampling ----------------------------------------------------------------------------

    @property
    def counts_per_block(self) -> dict[str, int]:
        return {c.name: c.per_block for c in self.components}

    def _layout(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(component index, occurrence rank) at each position of ``block``."""
        hit = self._layout_cache.get(block)
        if hit is not None:
            self._layout_cache.move_to_end(block)
            return hit
        rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence([self.seed & 0xFFFFFFFF, self.seed >> 32, block]))
        )
        comp = self._base[rng.permutation(self.block_size)]
        rank = np.zeros(self.block_size, dtype=np.int64)
        for k in range(len(self.components)):
            where = comp == k
            rank[where] = np.arange(int(where.sum()))
        self._layout_cache[block] = (comp, rank)
        if len(self._layout_cache) > 8:
            self._layout_cache.popitem(last=False)
        return comp, rank

    def locate_many(self, indices: np.ndarray | list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`locate`: (component index, window index) arrays for sequence ``indices``."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and idx.min() < 0:
            raise IndexError(f"sequence indices must be >= 0, got {int(idx.min())}.")
        blocks, pos = np.divmod(idx, self.block_size)
        comp = np.empty(len(idx), dtype=np.int64)
        rank = np.empty(len(idx), dtype=np.int64)
        for block in np.unique(blocks).tolist():
            where = blocks == block
            layout_comp, layout_rank = self._layout(block)
            comp[where] = layout_comp[pos[where]]
            rank[where] = layout_rank[pos[where]]
        per_block = np.asarray([c.per_block for c in self.components], dtype=np.int64)
        windows = np.asarray([max(c.windows, 1) for c in self.components], dtype=np.int64)
        n = blocks * per_block[comp] + rank  # the component's own sequence number
        epoch, offset = np.divmod(n, windows[comp])
        out = np.empty(len(idx), dtype=np.int64)
        for k, e in set(zip(comp.tolist(), epoch.tolist(), strict=False)):
            where = (comp == k) & (epoch == e)
            key = _key(self.seed, k, e)
            out[where] = feistel_permute(offset[where], int(windows[k]), key).astype(np.int64)
        return comp, out

    def locate(self, i: int) -> tuple[str, int]:
        """(component name, window index in its store) of training sequence ``i``."""
        comp, window = self.locate_many([i])
        return self.components[int(comp[0])].name, int(window[0])

    def sequence(self, i: int) -> np.ndarray:
        """Training sequence ``i``: int32 ``[seq_len + 1]`` (inputs ``[:-1]``, targets ``[1:]``)."""
        return self.batch_of([i])[0]

    def batch(self, step: int, batch_size: int) -> np.ndarray:
        """Sequences ``[step * batch_size, (step + 1) * batch_size)`` as int32 ``[batch_size, seq_len + 1]``."""
        start = int(step) * batch_size
        return self.batch_of(range(start, start + batch_size))

    def batch_of(self, indices: Any) -> np.ndarray:
        """Any sequences, by index, as int32 ``[len(indices), seq_len + 1]`` (e.g. one host's rows of a batch)."""
        comp, window = self.locate_many(list(indices))
        out = np.empty((len(comp), self.seq_len + 1), dtype=np.int32)
        for k in np.unique(comp).tolist():  # one read per store: a bucket store fetches its rows in one batch
            rows = np.nonzero(comp == k)[0]
            out[rows] = self.components[k].store.windows(window[rows], self.seq_len)
        return out

    # -- validation ----------------------------------------------------------------------------

    def validation_windows(self, name: str) -> int:
        return self._validation_store(name).num_windows(self.seq_len)

    def validation_batches(self, name: str, batch_size: int, *, max_batches: int | None = None) -> Iterator[np.ndarray]:
        """Consecutive windows of validation store ``name`` in order, int32 ``[<=batch_size, seq_len + 1]``.

        The last batch may be shorter; the same store always yields the same batches.
        """
        store = self._validation_store(name)
        total = store.num_windows(self.seq_len)
        for emitted, start in enumerate(range(0, total, batch_size)):
            if max_batches is not None and emitted >= max_batches:
                return
            yield store.windows(np.arange(start, min(total, start + batch_size)), self.seq_len).astype(np.int32)

    def _validation_store(self, name: str) -> TokenStore:
        if name not in self.validation:
            raise KeyError(f"no validation store {name!r}; this mixture has {sorted(self.validation)}.")
        return self.validation[name]

    def describe(self) -> dict[str, Any]:
        """A JSON-able description (for checkpoints and run logs); ``Mixture.from_config`` loads it back."""
        return {
            "seq_len": self.seq_len,
            "seed": self.seed,
            "block_size": self.block_size,
            "components": {c.name: {"store": c.store.location, "weight": c.weight} for c in self.components},
            "validation": {n: s.location for n, s in self.validation.items()},
            "include_store_validation": False,  # the sub-stores are already listed under "validation"
        }
