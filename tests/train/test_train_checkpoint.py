"""Checkpoints: atomic, newest-complete wins, keep policy; a resumed run equals a straight run bit for bit."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zephyr.train.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from zephyr.train.trainer import read_metrics, train


def _state(scale: float) -> dict:
    return {
        "step": jnp.asarray(3, jnp.int32),
        "w": jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * scale,
        "h": (jnp.linspace(-1, 1, 5) * scale).astype(jnp.bfloat16),
    }


def test_train_checkpoint_keep_latest_and_incomplete(tmp_path):
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, _state(step), keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]
    # A crash mid-write leaves a directory without metadata.json (or a .tmp one): never picked.
    (tmp_path / "step_00000009").mkdir()
    (tmp_path / "step_00000009" / "arrays.bin").write_bytes(b"partial")
    (tmp_path / ".step_00000010.tmp-123").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000004"
    restored, meta = load_checkpoint(latest_checkpoint(tmp_path), _state(0.0))
    assert meta["step"] == 4
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(_state(4)), strict=False):
        assert got.dtype == want.dtype  # bfloat16 survives
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(tmp_path / "step_00000009", _state(0.0))
    wrong = {**_state(0.0), "w": jnp.zeros((4, 4), jnp.float32)}
    with pytest.raises(
        CheckpointError, match=r"float32\[3, 4\] in the checkpoint but the state expects float32\[4, 4\]"
    ):
        load_checkpoint(latest_checkpoint(tmp_path), wrong)
    save_checkpoint(tmp_path, 5, _state(5), keep=2)  # stale temporaries are cleaned up by the next save
    assert not (tmp_path / ".step_00000010.tmp-123").exists()


def test_train_resume_is_bit_exact(tiny_run, tmp_path):
    """N straight steps == K steps + restart from the checkpoint + N-K steps, bit for bit (CPU)."""
    config, straight = tiny_run
    n, k = config.steps, config.checkpoint_every
    source = Path(config.output_dir)
    assert [s for s, _ in list_checkpoints(source / "checkpoints")] == [k, n]
    # Restart in a copy where only the step-K checkpoint survives, as if the process had died right after it.
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / f"step_{n:08d}")
    resumed = train(dataclasses.replace(config, output_dir=str(run_dir)))
    assert resumed.steps == n
    for a, b in zip(jax.tree.leaves(straight.state), jax.tree.leaves(resumed.state), strict=False):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert resumed.final_loss == straight.final_loss
    assert resumed.eval == straight.eval
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert any('"event": "resume"' in line and f'"step": {k}' in line for line in lines)

    # Run again: resumed at the final checkpoint, nothing left to train, the same result is reported.
    again = train(dataclasses.replace(config, output_dir=str(run_dir)))
    assert again.steps == n and again.final_loss == straight.final_loss
    assert again.eval == straight.eval  # evaluated from the restored state


def test_resumed_run_logs_every_step_once(tiny_run, tmp_path):
    """A run that died after its last checkpoint had logged later steps; resumed, it trains them again and
    must not log them twice (the log then matches the straight run's, step for step)."""
    config, straight = tiny_run
    n = config.steps
    run_dir = tmp_path / "run"
    shutil.copytree(Path(config.output_dir), run_dir)
    shutil.rmtree(run_dir / "checkpoints" / f"step_{n:08d}")  # died after logging step n, before its checkpoint
    with open(run_dir / "metrics.jsonl", "a") as log:
        log.write('{"step": 99, "loss"')  # and mid-write
    train(dataclasses.replace(config, output_dir=str(run_dir)))

    def by_kind(path):
        records = read_metrics(path)  # skips a line cut mid-write
        train_steps = [r["step"] for r in records if "loss" in r and "step" in r]
        eval_steps = [r["step"] for r in records if any(key.startswith("eval/") for key in r)]
        return records, train_steps, eval_steps

    records, train_steps, eval_steps = by_kind(run_dir / "metrics.jsonl")
    _, straight_train, straight_eval = by_kind(straight.metrics_path)
    assert train_steps == straight_train == list(range(1, n + 1))
    assert eval_steps == straight_eval
    losses = {r["step"]: r["loss"] for r in records if "loss" in r and "step" in r}
    straight_losses = {r["step"]: r["loss"] for r in read_metrics(straight.metrics_path) if "loss" in r and "step" in r}
    assert losses == straight_losses  # the resumed steps reproduce the straight run's
    assert [r.get("event") for r in records if r.get("event")] == ["start", "resume", "end"]
