"""Atomic checkpoints of a training-state pytree: write, keep the newest few, resume the newest complete one.

Layout: ``DIR/step_00000100/arrays.bin`` (every leaf's raw bytes, in tree
order) and ``metadata.json`` (step, leaf shapes/dtypes/offsets, config),
written last. Everything is written into a temporary sibling directory that is
renamed into place only when complete, so a crash leaves either the previous
checkpoint or a ``.tmp`` directory that is ignored and later removed. A
directory counts as a checkpoint only if it has ``metadata.json``.

Raw bytes (not ``.npy``) keep bfloat16 exact without pickling.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from zephyr.errors import ZephyrError

__all__ = ["save_checkpoint", "latest_checkpoint", "list_checkpoints", "load_checkpoint", "CheckpointError"]

_PREFIX = "step_"


class CheckpointError(ZephyrError, ValueError):
    """A checkpoint that does not match what is being restored; the message names the file."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints as (step, path), oldest first."""
    root = Path(directory)
    if not root.exists():
        return []
    found = []
    for p in root.iterdir():
        if (
            p.is_dir()
            and p.name.startswith(_PREFIX)
            and p.name[len(_PREFIX) :].isdigit()
            and (p / "metadata.json").exists()
        ):
            found.append((int(p.name[len(_PREFIX) :]), p))
    return sorted(found)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint under `directory`, or None."""
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def save_checkpoint(directory: str | Path, step: int, state: Any, *, keep: int = 2, extra: dict | None = None) -> Path:
    """Write ``state`` for ``step`` atomically, then delete all but the newest ``keep`` checkpoints."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:08d}"
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    leaves = [np.asarray(x) for x in jax.device_get(jax.tree_util.tree_leaves(state))]
    index, offset = [], 0
    with open(tmp / "arrays.bin", "wb") as f:
        for leaf in leaves:
            data = np.ascontiguousarray(leaf).tobytes()
            f.write(data)
            index.append({"shape": list(leaf.shape), "dtype": str(leaf.dtype), "offset": offset, "nbytes": len(data)})
            offset += len(data)
        f.flush()
        os.fsync(f.fileno())
    metadata = {
        "step": int(step),
        "time": time.time(),
        "treedef": str(jax.tree_util.tree_structure(state)),
        "leaves": index,
        **(extra or {}),
    }
    with open(tmp / "metadata.json", "w") as f:  # last: its presence marks the checkpoint complete
        json.dump(metadata, f)
        f.flush()
        os.fsync(f.fileno())
    if final.exists():  # re-saving the same step (e.g. after a resume): replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for _, old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(f".{_PREFIX}*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def load_checkpoint(path: str | Path, template: Any) -> tuple[Any, dict]:
    """Read a checkpoint into the structure of ``template`` (arrays or ShapeDtypeStructs); returns (state, metadata)."""
    path = Path(path)
    meta_path = path / "metadata.json"
    if not meta_path.exists():
        raise CheckpointError(
            f"{path}: no metadata.json, so the checkpoint is incomplete; resume from latest_checkpoint() instead."
        )
    metadata = json.loads(meta_path.read_text())
    template_leaves, treedef = jax.tree_util.tree_flatten(template)
    index = metadata["leaves"]
    if len(index) != len(template_leaves):
        raise CheckpointError(
            f"{path}: checkpoint has {len(index)} arrays but the model/optimizer state has {len(template_leaves)}; "
            f"it was written by a different model or optimizer config (see metadata.json 'config')."
        )
    blob = np.memmap(path / "arrays.bin", dtype=np.uint8, mode="r")
    leaves = []
    for i, (entry, want) in enumerate(zip(index, template_leaves, strict=True)):
        want_shape, want_dtype = tuple(np.shape(want)), jnp.dtype(want.dtype)
        if tuple(entry["shape"]) != want_shape or jnp.dtype(entry["dtype"]) != want_dtype:
            raise CheckpointError(
                f"{path}: array {i} is {entry['dtype']}{entry['shape']} in the checkpoint but the state expects "
                f"{want_dtype}{list(want_shape)}; the model config differs from the one that wrote the checkpoint."
            )
        raw = blob[entry["offset"] : entry["offset"] + entry["nbytes"]]
        leaves.append(np.frombuffer(raw.tobytes(), dtype=want_dtype).reshape(want_shape))
    return jax.tree_util.tree_unflatten(treedef, leaves), metadata
