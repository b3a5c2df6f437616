"""TensorBoard and Weights & Biases logging: the same scalars as metrics.jsonl, one curve across a resume."""

from __future__ import annotations

import json

import pytest

from zephyr.train.trainer import train


def _jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_train_tensorboard_events_match_metrics_jsonl(tiny_config, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train(tiny_config(out, steps=10, log_every=2, checkpoint_every=6, tensorboard=True))
    train(
        tiny_config(out, steps=14, log_every=2, checkpoint_every=6, tensorboard=True)
    )  # resumes from the step-10 checkpoint
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"tensors": 0, "scalars": 0}).Reload()
    logged = {
        tag: {e.step: float(e.tensor_proto.float_val[0]) for e in events.Tensors(tag)}
        for tag in events.Tags()["tensors"]
    }
    records = [r for r in _jsonl(str(out / "metrics.jsonl")) if "loss" in r and "event" not in r]
    assert sorted(logged["train/loss"]) == [2, 4, 6, 8, 10, 12, 14]  # both calls, one curve
    for r in records:
        assert logged["train/loss"][r["step"]] == pytest.approx(r["loss"], rel=1e-6)
        assert logged["train/lr"][r["step"]] == pytest.approx(r["lr"], rel=1e-6)
    evals = [r for r in _jsonl(str(out / "metrics.jsonl")) if "eval/heldout/loss" in r]
    assert {r["step"] for r in evals} == set(logged["eval/heldout/loss"]) == {10, 14}


def _wandb_records(path):
    """Records of an offline W&B run file (LevelDB log format behind a 7-byte ':W&B' header)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file: {data[:7]!r}"
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST fragment
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def test_train_wandb_offline_run_logs_metrics_and_resumes_same_run(tiny_config, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    train(tiny_config(out, steps=6, log_every=2, checkpoint_every=6, wandb_project="zephyr-tests"))
    train(tiny_config(out, steps=10, log_every=2, checkpoint_every=6, wandb_project="zephyr-tests"))
    run_id = (out / "wandb_run_id").read_text()
    files = sorted(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2 and all(f.name == f"run-{run_id}.wandb" for f in files)  # one W&B run, resumed
    history, projects = {}, set()
    for f in files:
        for record in _wandb_records(f):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                projects.add(record.run.project)
            elif kind == "history":
                items = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
                }
                history.setdefault(record.history.step.num, {}).update(items)
    assert projects == {"zephyr-tests"}
    records = {r["step"]: r for r in _jsonl(str(out / "metrics.jsonl")) if "loss" in r and "event" not in r}
    assert sorted(s for s, h in history.items() if "train/loss" in h) == sorted(records) == [2, 4, 6, 8, 10]
    for step, r in records.items():
        assert history[step]["train/loss"] == pytest.approx(r["loss"], rel=1e-6)
        assert history[step]["train/grad_norm"] == pytest.approx(r["grad_norm"], rel=1e-6)
    assert "eval/heldout/bpb" in history[10]


def test_train_tracking_missing_package_names_the_install(tiny_config, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match=r"pip install 'wandb'"):
        train(tiny_config(tmp_path / "run", steps=2, wandb_project="p"))
    assert not (tmp_path / "run" / "checkpoints").exists()  # failed before any step
