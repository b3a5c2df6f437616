"""The training loop on real tokenized text: it learns, logs, evaluates, shards over devices, and runs from the CLI."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from zephyr.train.cli import add_cli
from zephyr.train.config import config_to_dict


def test_train_tiny_run_learns_real_text(tiny_run):
    config, result = tiny_run
    records = [json.loads(line) for line in Path(result.metrics_path).read_text().splitlines()]
    steps = [r for r in records if "loss" in r and "step" in r]
    assert [r["step"] for r in steps] == list(range(1, config.steps + 1))
    first, last = steps[0]["loss"], result.final_loss
    assert abs(first - math.log(config.model.vocab_size)) < 0.5  # starts near uniform over 49,152 tokens
    assert last < first - 2.0, (first, last)  # and learns the article text
    held_out = result.eval["heldout"]
    assert held_out["loss"] < first - 1.0, held_out  # generalises to articles it never saw
    assert 0.5 < held_out["bpb"] < 5 * held_out["loss"], held_out
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1 and r["lr"] > 0 for r in steps)
    assert records[0]["event"] == "start" and records[0]["params"] == config.model.num_params()
    assert records[-1]["event"] == "end" and records[-1]["final_loss"] == last
    assert result.steps == config.steps and result.tokens_per_second > 0
    assert Path(result.checkpoint).name == f"step_{config.steps:08d}"


_DATA_PARALLEL = textwrap.dedent(
    """
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from zephyr.train.config import config_from_dict
    from zephyr.train.data import make_mixture
    from zephyr.train.optim import make_optimizer
    from zephyr.train.trainer import init_state, jit_train_step, make_mesh, make_train_step

    cfg = config_from_dict(json.loads(sys.argv[1]))
    tokens = make_mixture(cfg.data).batch(0, cfg.data.batch_size)  # real text, 8 sequences
    assert len(jax.devices()) == 4
    optimizer = make_optimizer(cfg.optimizer, cfg.steps)
    initial = jax.device_get(jax.jit(lambda k: init_state(cfg, optimizer, key=k))(jax.random.PRNGKey(0)))
    out = {}
    for dp in (1, 4):
        mesh = make_mesh(dp)
        state = jax.device_put(initial, NamedSharding(mesh, P()))  # replicated on every device of the mesh
        step = jit_train_step(make_train_step(cfg, optimizer, eos_id=0), mesh)
        batch = jax.device_put(tokens, NamedSharding(mesh, P("data")))
        hlo = step.lower(state, batch).compile().as_text()
        losses = []
        for _ in range(3):
            state, metrics = step(state, batch)
            losses.append(float(metrics["loss"]))
        out[dp] = {
            "losses": losses,
            "batch_devices": len(batch.sharding.device_set),
            "per_device_rows": sorted({s.data.shape[0] for s in batch.addressable_shards}),
            "state_devices": len(jax.tree.leaves(state.params)[0].sharding.device_set),
            "all_reduce": "all-reduce" in hlo,
            "embed": np.asarray(state.params.embed[:50]).tolist(),
        }
    print(json.dumps(out))
    """
)


def test_train_data_parallel_on_four_fake_cpu_devices(tiny_config, tmp_path):
    """A 4-way data-parallel step equals the 1-device step; the batch is split, gradients all-reduced."""
    config = tiny_config(tmp_path / "run", data=dataclasses_replace_batch(tiny_config, 8))
    import jax

    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": jax.config.jax_compilation_cache_dir or "",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    proc = subprocess.run(
        [sys.executable, "-c", _DATA_PARALLEL, json.dumps(config_to_dict(config))],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    one, four = out["1"], out["4"]
    assert (one["batch_devices"], four["batch_devices"]) == (1, 4)
    assert (one["per_device_rows"], four["per_device_rows"]) == ([8], [2])
    assert four["state_devices"] == 4 and four["all_reduce"] and not one["all_reduce"]
    assert one["losses"][-1] < one["losses"][0]
    for a, b in zip(one["losses"], four["losses"], strict=False):
        assert abs(a - b) < 1e-5 * abs(a), (one["losses"], four["losses"])  # same math, another summation order
    import numpy as np

    np.testing.assert_allclose(four["embed"], one["embed"], atol=1e-6)


def dataclasses_replace_batch(tiny_config, batch_size: int):
    import dataclasses

    return dataclasses.replace(tiny_config().data, batch_size=batch_size)


def _cli() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zephyr")
    add_cli(parser.add_subparsers(dest="command", required=True))
    return parser


def test_train_cli_runs_yaml_with_overrides(tiny_config, tmp_path, capsys):
    config = config_to_dict(tiny_config(tmp_path / "from_yaml"))
    config["data"]["eval"] = {}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))

    args = _cli().parse_args(
        [
            "train",
            str(path),
            "steps=3",
            "optimizer.learning_rate=3e-3",
            f"output_dir={tmp_path / 'cli_run'}",
            "--print-config",
        ]
    )
    assert args.func(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["steps"], printed["optimizer"]["learning_rate"]) == (3, 3e-3)

    args = _cli().parse_args(["train", str(path), "steps=3", f"output_dir={tmp_path / 'cli_run'}"])
    assert args.func(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 3 and math.isfinite(summary["final_loss"])
    assert (tmp_path / "cli_run" / "metrics.jsonl").exists()

    args = _cli().parse_args(["train", str(path), "model.num_kv_heads=3"])
    assert args.func(args) == 2
    assert "num_kv_heads to one of [1, 2]" in capsys.readouterr().err


def test_eval_batch_size_gives_runs_of_any_batch_one_eval_set(tiny_config, tmp_path):
    """A ladder's runs differ in batch size; with eval_batch_size fixed they score the same held-out sequences.

    One step at a learning rate of 1e-9 leaves the (seed-0) initial model, so the eval loss measures the eval
    set alone: the same at batch 4 and batch 8 with eval_batch_size=4, different without it (8 vs 16 sequences).
    """
    from zephyr.train.config import DataConfig, OptimizerConfig
    from zephyr.train.trainer import train

    def eval_loss(batch: int, eval_batch_size: int | None) -> float:
        base = tiny_config()
        cfg = tiny_config(
            tmp_path / f"b{batch}-e{eval_batch_size}",
            steps=1,
            optimizer=OptimizerConfig(learning_rate=1e-9, warmup_steps=0),
            data=DataConfig(train=base.data.train, eval=base.data.eval, seq_len=64, batch_size=batch),
            eval_batch_size=eval_batch_size,
        )
        return train(cfg).eval["heldout"]["loss"]

    assert eval_loss(8, 4) == pytest.approx(eval_loss(4, 4), abs=1e-5)
    assert abs(eval_loss(8, None) - eval_loss(4, None)) > 1e-3
