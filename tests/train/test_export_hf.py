"""`zephyr export hf`: a trained checkpoint becomes a transformers Llama with the same logits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]


def test_export_hf_of_a_trained_run_matches_our_logits(tiny_run, hf_export):
    config, _result = tiny_run
    out, _stdout = hf_export
    from zephyr.train.checkpoint import load_checkpoint
    from zephyr.train.export import resolve_checkpoint
    from zephyr.train.optim import make_optimizer
    from zephyr.train.trainer import init_state

    newest = resolve_checkpoint(config.output_dir)
    assert newest.name == f"step_{config.steps:08d}"
    template = jax.eval_shape(
        lambda: init_state(config, make_optimizer(config.optimizer, config.steps), key=jax.random.PRNGKey(0))
    )
    state, _ = load_checkpoint(newest, template)
    tokens = np.random.default_rng(0).integers(0, config.model.vocab_size, (2, 32))
    ours = np.asarray(jax.jit(lambda m, t: m.logits(t))(state.params, jnp.asarray(tokens)))
    hf = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(theirs, ours, atol=2e-4)


def test_export_hf_without_checkpoint_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "export", "hf", str(tmp_path), str(tmp_path / "o")],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "no complete checkpoint" in line
