"""Training and eval sequences from zephyr token stores.

Sampling is ``zephyr.tokenize.mixture.Mixture``'s: sequence ``i`` of a run is a pure
function of ``(seed, i)`` (block-deterministic weights, keyed Feistel
permutation per epoch), so ``batch(step)`` needs no loader state and a resumed
run reads exactly the batches a straight run would. This module adapts it
to the trainer: the EOS id that drives document masking, eval sets with
the UTF-8 byte counts that bits-per-byte needs, and the read-ahead.

Because the batch of a step is known before the step, :class:`BatchPrefetcher` reads the next
``data.prefetch`` steps' batches in a background thread while the current step computes (a bucket
store's ranged requests then overlap compute, as do page faults of a local one). Each process reads
only the rows of the global batch its own devices hold (:func:`host_rows`), so the hosts of a
multi-host job fetch disjoint byte ranges and together exactly the batch.
"""

from __future__ import annotations

import queue
import threading
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from zephyr.tokenize.mixture import Mixture
from zephyr.tokenize.store import TokenStore, load_store_tokenizer
from zephyr.train.config import DataConfig

__all__ = ["BatchPrefetcher", "EvalSet", "make_mixture", "eos_id_of", "eval_sets", "count_target_bytes", "host_rows"]


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
    copy = cfg.bucket_reads == "copy"  # bucket stores: read by byte ranges (default) or from a whole local copy
    return Mixture(
        {name: (TokenStore(path, copy=copy), weight) for name, (path, weight) in cfg.train.items()},
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        block_size=cfg.mixture_block,
        validation={name: TokenStore(path, copy=copy) for name, path in cfg.eval.items()},
    )


def host_rows(sharding: Any, batch_size: int, seq_len: int) -> range:
    """The rows of the global ``[batch_size, seq_len + 1]`` batch that this process's devices hold.

    One process (any number of local devices): every row. On a multi-host mesh, each process gets the
    contiguous block its devices cover, which is what ``jax.make_array_from_process_local_data`` takes.
    """
    spans = {
        (rows.start or 0, batch_size if rows.stop is None else rows.stop)
        for rows, *_ in sharding.addressable_devices_indices_map((batch_size, seq_len + 1)).values()
    }
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    if sum(b - a for a, b in spans) != hi - lo:
        raise ValueError(
            f"this process's devices hold rows {sorted(spans)} of the batch, not one contiguous block; order the data "
            "mesh's devices by process (jax.devices() order does)."
        )
    return range(lo, hi)


class BatchPrefetcher:
    """The batches of steps ``[start, stop)`` (rows ``rows`` of each), read ``ahead`` steps in advance.

    A background thread calls ``mixture.batch_of`` for step after step and holds at most ``ahead``
    finished batches; :meth:`get` hands them out in step order and re-raises a read error in the caller.
    ``ahead=0`` reads in the caller, step by step. Use as a context manager (or call :meth:`close`).
    """

    def __init__(self, mixture: Mixture, batch_size: int, rows: range, *, start: int, stop: int, ahead: int) -> None:
        self.mixture, self.batch_size, self.rows = mixture, batch_size, rows
        self.next_step, self.stop, self.ahead = start, stop, ahead
        self._stopping = threading.Event()
        self._ready: queue.Queue[tuple[int, np.ndarray | BaseException]] = queue.Queue(maxsize=max(ahead, 1))
        self._thread: threading.Thread | None = None
        if ahead > 0 and start < stop:
            self._thread = threading.Thread(target=self._fill, args=(start,), name="zephyr-prefetch", daemon=True)
            self._thread.start()

    def read(self, step: int) -> np.ndarray:
        """This process's rows of the batch of ``step`` (int32 ``[len(rows), seq_len + 1]``), read now."""
        first = step * self.batch_size
        return self.mixture.batch_of(range(first + self.rows.start, first + self.rows.stop))

    def _fill(self, step: int) -> None:
        while step < self.stop and not self._stopping.is_set():
            try:
                item: np.ndarray | BaseException = self.read(step)
            except BaseException as exc:  # handed to the trainer's thread, raised there
                item = exc
            while not self._stopping.is_set():
                try:
                    self._ready.put((step, item), timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return
            step += 1

    def get(self, step: int) -> np.ndarray:
        """The batch of ``step``; steps must be asked for in order, from ``start``."""
        if step != self.next_step:
            raise ValueError(f"BatchPrefetcher: asked for step {step}, the next one is {self.next_step}.")
        self.next_step += 1
        if self._thread is None:
            return self.read(step)
        got, item = self._ready.get()
        if isinstance(item, BaseException):
            raise item
        assert got == step, (got, step)
        return item

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def __enter__(self) -> BatchPrefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
            f"bits-per-byte unavailable for {store.location}: tokenizer {source!r} could not be loaded ({e}).",
            stacklevel=2,
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
                f"skipping eval set {name!r} ({store.location}): {store.num_tokens} tokens, fewer than one "
                f"sequence of {mixture.seq_len + 1}.",
                stacklevel=2,
            )
            continue
        if not batches:
            raise ValueError(
                f"eval set {name!r} ({store.location}) has {store.num_tokens} tokens, fewer than one sequence of "
                f"{mixture.seq_len + 1}."
            )
        out.append(EvalSet(name, tuple(batches), count_target_bytes(store, batches)))
    return out
