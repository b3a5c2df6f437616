"""Fixtures for the trainer tests: real token stores built from real article text, and a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zephyr.train.config import DataConfig, LossConfig, ModelConfig, OptimizerConfig, TrainConfig


@pytest.fixture(scope="session")
def article_stores(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Token stores (SmolLM2 tokenizer, EOS after each document) of the aeb-dev article bodies.

    ``train``: the first 50 articles; ``eval``: the last 10 (held out).
    """
    from zephyr import execution
    from zephyr.tokenize import tokenize_dataset

    truth = json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text())
    items = sorted(truth.items())
    root = tmp_path_factory.mktemp("article_stores")
    stores = {}
    for name, part in (("train", items[:50]), ("eval", items[50:])):
        src = root / f"{name}.jsonl"
        src.write_text("".join(json.dumps({"id": k, "text": v["articleBody"]}) + "\n" for k, v in part))
        with execution(backend="local"):
            tokenize_dataset(str(src), str(root / name), tokenizer="smollm2")
        stores[name] = str(root / name)
    return stores


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Share compiled XLA executables between tests that build the same step (saves seconds per test)."""
    import jax

    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


@pytest.fixture(scope="session")
def tiny_run(article_stores: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """One real training run shared by several tests: (config, TrainResult).

    24 steps of 4 x 64 tokens of real article text, a checkpoint every 16 steps, eval at the end.
    """
    from zephyr.train.trainer import train

    config = _tiny_config(
        article_stores,
        tmp_path_factory.mktemp("tiny_run") / "run",
        steps=24,
        checkpoint_every=16,
        keep_checkpoints=5,
        log_every=1,
    )
    return config, train(config)


@pytest.fixture(scope="session")
def hf_export(tiny_run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`zephyr export hf` of `tiny_run`, run once as a user runs it (a subprocess): (export folder, its stdout)."""
    config, _result = tiny_run
    out = tmp_path_factory.mktemp("hf_export") / "hf"
    done = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "export", "hf", config.output_dir, str(out)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out, done.stdout


@pytest.fixture
def tiny_config(article_stores: dict[str, str], tmp_path: Path):
    """Factory of TrainConfigs for a ~1.6M-parameter model (almost all of it the 49,152 x 32 embedding)."""

    def make(output_dir: Path | None = None, **overrides) -> TrainConfig:
        return _tiny_config(article_stores, output_dir or tmp_path / "run", **overrides)

    return make


def _tiny_config(stores: dict[str, str], output_dir: Path, **overrides) -> TrainConfig:
    model = ModelConfig(
        vocab_size=49152, hidden_dim=32, intermediate_dim=64, num_layers=2, num_heads=2, num_kv_heads=1, max_seq_len=64
    )
    defaults = dict(
        model=model,
        loss=LossConfig(vocab_block=8192, token_block=256),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=3, decay_fraction=0.2),
        data=DataConfig(
            train={"articles": (stores["train"], 1.0)}, eval={"heldout": stores["eval"]}, seq_len=64, batch_size=4
        ),
        steps=30,
        output_dir=str(output_dir),
        log_every=5,
        eval_batches=2,
        progress=False,
    )
    defaults.update(overrides)
    return TrainConfig(**defaults)


@pytest.fixture
def numpy_init():
    """Build a model's parameters from numpy random values (no RNG kernel to compile: tests stay fast)."""
    import jax
    import numpy as np

    from zephyr.train.model import Transformer

    def make(cfg: ModelConfig, seed: int = 0):
        rng = np.random.default_rng(seed)
        shapes = jax.eval_shape(lambda: Transformer.init(cfg, key=jax.random.PRNGKey(0)))
        return jax.tree.map(lambda s: (0.2 * rng.standard_normal(s.shape)).astype(s.dtype), shapes)

    return make
