"""The training loop: a jitted step built by a factory, an immutable state, data parallelism over a mesh.

``train(config)`` is the whole program: open the mixture, build or resume the
state, then for each step take the batch that is a pure function of
``(seed, step)``, run the jitted step, log, evaluate and checkpoint. The state
is a pytree updated with ``dataclasses.replace`` inside the step; nothing else
carries across steps, which is why a resumed run is bit-identical to a
straight one.

Data parallelism: the batch is sharded along a 1-D ``("data",)`` mesh and the
parameters and optimizer state are replicated; XLA inserts the gradient
all-reduce. The same code runs on one device, on fake CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``) and on GPUs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from zephyr.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from zephyr.train.config import TrainConfig, config_to_dict
from zephyr.train.data import BatchPrefetcher, EvalSet, eos_id_of, eval_sets, host_rows, make_mixture
from zephyr.train.loss import linear_cross_entropy_loss
from zephyr.train.model import Transformer, segment_ids_from_eos
from zephyr.train.optim import learning_rate_schedule, make_optimizer
from zephyr.train.tracking import open_trackers

__all__ = [
    "TrainState",
    "TrainResult",
    "init_state",
    "make_train_step",
    "make_eval_step",
    "make_mesh",
    "jit_train_step",
    "cast_floating",
    "peak_flops_per_device",
    "read_metrics",
    "train",
]

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


class TrainState(eqx.Module):
    """What a training step updates: the step count, the parameters and the optimizer state (an immutable pytree)."""

    step: jax.Array  # int32 scalar
    params: Transformer
    opt_state: Any


@dataclass(frozen=True)
class TrainResult:
    """What a training run reports: steps, final loss, eval loss and bits-per-byte per set, throughput, MFU, where
    its metrics and newest checkpoint are."""

    steps: int  # the step count reached
    final_loss: float  # training loss of the last step
    eval: dict[str, dict[str, float | None]]  # eval set -> {"loss": nats/token, "bpb": bits/byte or None}
    tokens_per_second: float  # mean over the steps run in this call (first step's compile excluded)
    mfu: float | None
    metrics_path: str
    checkpoint: str | None  # newest checkpoint written, if any
    state: TrainState


def cast_floating(tree: Any, dtype: Any) -> Any:
    """Cast floating leaves to ``dtype``, except RMSNorm gains, which stay f32 (they live near 1.0)."""

    def cast(path: tuple, leaf: Any) -> Any:
        if not (isinstance(leaf, jax.Array | np.ndarray) and jnp.issubdtype(leaf.dtype, jnp.floating)):
            return leaf
        if any("norm" in str(getattr(p, "name", "")) for p in path):
            return leaf.astype(jnp.float32)
        return leaf.astype(dtype)

    return jax.tree_util.tree_map_with_path(cast, tree)


def init_state(cfg: TrainConfig, optimizer: optax.GradientTransformation, *, key: jax.Array) -> TrainState:
    """A fresh training state: parameters initialised from `key` in the configured dtype, the optimizer's state,
    step 0."""
    params = cast_floating(Transformer.init(cfg.model, key=key), _DTYPES[cfg.param_dtype])
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params))


def _loss_fn(cfg: TrainConfig, eos_id: int) -> Callable:
    compute_dtype = _DTYPES[cfg.compute_dtype]

    def loss_fn(params: Transformer, tokens: jax.Array, token_weights: jax.Array | None) -> tuple[jax.Array, dict]:
        inputs, targets = tokens[:, :-1], tokens[:, 1:]  # B S each
        model = cast_floating(params, compute_dtype)
        hidden = model(inputs, segment_ids_from_eos(inputs, eos_id))  # B S D
        return linear_cross_entropy_loss(
            hidden,
            model.output_weight(),
            targets,
            token_weights,
            z_loss=cfg.loss.z_loss,
            impl=cfg.loss.impl,
            vocab_block=cfg.loss.vocab_block,
            token_block=cfg.loss.token_block,
        )

    return loss_fn


def make_train_step(
    cfg: TrainConfig, optimizer: optax.GradientTransformation, *, eos_id: int
) -> Callable[[TrainState, jax.Array], tuple[TrainState, dict]]:
    """``step(state, tokens [B, S+1]) -> (state, metrics)``; pure, ready for ``jax.jit``."""
    loss_fn = _loss_fn(cfg, eos_id)
    schedule = learning_rate_schedule(cfg.optimizer, cfg.steps)

    def step(state: TrainState, tokens: jax.Array) -> tuple[TrainState, dict]:
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, tokens, None)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {
            "loss": loss,
            "z_loss": stats["z_loss"],
            "grad_norm": optax.global_norm(grads),
            "lr": schedule(state.step),
        }
        return dataclasses.replace(state, step=state.step + 1, params=params, opt_state=opt_state), metrics

    return step


def make_eval_step(cfg: TrainConfig, *, eos_id: int) -> Callable[[Transformer, jax.Array, jax.Array], dict]:
    """``eval(params, tokens [B, S+1], row_weights [B]) -> {"ce_sum", "weight_sum"}`` (nats, tokens)."""
    loss_fn = _loss_fn(cfg, eos_id)

    def evaluate(params: Transformer, tokens: jax.Array, row_weights: jax.Array) -> dict:
        weights = jnp.broadcast_to(row_weights[:, None], (tokens.shape[0], tokens.shape[1] - 1))
        _, stats = loss_fn(params, tokens, weights)
        return {"ce_sum": stats["ce_sum"], "weight_sum": stats["weight_sum"]}

    return evaluate


def make_mesh(data_parallel: int | None = None) -> Mesh:
    """A one-axis (`data`) device mesh over the first `data_parallel` devices (default: all); an error naming the
    fix when there are fewer."""
    devices = jax.devices()
    n = len(devices) if data_parallel is None else data_parallel
    if n > len(devices):
        raise ValueError(
            f"data_parallel={n} but only {len(devices)} device(s) are visible; lower data_parallel, or on CPU "
            f"fake devices with XLA_FLAGS=--xla_force_host_platform_device_count={n} (set before importing jax)."
        )
    return Mesh(np.array(devices[:n]), ("data",))


def jit_train_step(step: Callable, mesh: Mesh, *, donate: bool = True) -> Callable:
    """jit with the state replicated and the batch sharded along the mesh's data axis."""
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    return jax.jit(
        step,
        in_shardings=(replicated, batch),
        out_shardings=(replicated, replicated),
        donate_argnums=(0,) if donate else (),
    )


_PEAK_BF16_FLOPS = {
    "H100": 989e12,
    "H200": 989e12,
    "GH200": 989e12,
    "A100": 312e12,
    "L4": 121e12,
    "A10": 125e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5": 459e12,
    "TPU v6": 918e12,
}


def peak_flops_per_device(override: float | None = None) -> tuple[float, str]:
    """(peak FLOP/s, where the figure came from): override, a table of accelerators, or measured on CPU.

    On CPU there is no meaningful datasheet figure, so MFU is relative to the
    best f32 matmul throughput measured here (an optimistic peak, so MFU reads low, not high).
    """
    if override:
        return float(override), "config"
    kind = jax.devices()[0].device_kind
    for name, flops in _PEAK_BF16_FLOPS.items():
        if name.lower() in kind.lower():
            return flops, f"table:{name}"
    n = 1024
    a = jnp.ones((n, n), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    matmul(a).block_until_ready()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        matmul(a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best, "measured-matmul"


def _write_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _forget_logged_after(path: Path, step: int) -> None:
    """Drop the records a previous run logged after `step`, the step this run starts from.

    A run that dies after its last checkpoint has logged steps past it; resumed from that checkpoint it
    trains and logs them again, so without this every such step would appear twice in the log (and
    with the earlier, discarded run's timings). A run starting from step 0 starts a fresh log. The
    file is rewritten whole (temporary name, then rename), so a crash here loses nothing.
    """
    if not path.is_file():
        return
    kept = []
    if step > 0:
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the crash
            if record.get("event") == "end" or int(record.get("step", 0)) > step:
                continue
            kept.append(line + "\n")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (none if it is missing); a line cut by a crash mid-write is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _live_row(cfg: TrainConfig, start: int) -> Any:
    """A "train" row in the run's live view when one is drawn (`zephyr run` on a terminal), else None."""
    if not cfg.progress:
        return None
    from zephyr.progress import TaskProgress, live_view

    if not live_view().drawing:
        return None
    row = TaskProgress("train", cfg.steps, "steps", log_every_s=60.0)
    row.set(start)
    return row


def _progress(line: str, *, final: bool = False) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r" + line.ljust(100) + ("\n" if final else ""))
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _evaluate(
    evaluate: Callable, params: Any, sets: list[EvalSet], mesh: Mesh, batch_size: int
) -> dict[str, dict[str, float | None]]:
    sharding = NamedSharding(mesh, P("data"))
    results = {}
    for es in sets:
        ce_sum, weight_sum = 0.0, 0.0
        for tokens in es.batches:
            rows = tokens.shape[0]
            weights = np.zeros(batch_size, np.float32)
            weights[:rows] = 1.0
            if rows < batch_size:  # pad to a full batch (zero weight) so the eval step compiles once
                tokens = np.concatenate([tokens, np.zeros((batch_size - rows, tokens.shape[1]), tokens.dtype)])
            out = evaluate(params, jax.device_put(tokens, sharding), jax.device_put(weights, sharding))
            ce_sum += float(out["ce_sum"])
            weight_sum += float(out["weight_sum"])
        results[es.name] = {
            "loss": ce_sum / max(weight_sum, 1.0),
            "bpb": ce_sum / math.log(2) / es.target_bytes if es.target_bytes else None,
        }
    return results


def train(config: TrainConfig) -> TrainResult:
    """Run (or resume) the training described by ``config``; see ``zephyr train --help``."""
    cfg = config
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_dir = out / "checkpoints"
    metrics_path = out / "metrics.jsonl"
    d = cfg.data
    mixture = make_mixture(d)
    eos_id = eos_id_of(mixture, d.eos_id)
    if mixture.vocab_size > cfg.model.vocab_size:
        raise ValueError(
            f"the token stores have vocab_size {mixture.vocab_size} > model.vocab_size {cfg.model.vocab_size}; set "
            f"model.vocab_size={mixture.vocab_size} (or larger)."
        )
    eval_batch = cfg.eval_batch_size or d.batch_size
    evals = eval_sets(mixture, batch_size=eval_batch, max_batches=cfg.eval_batches, required=set(d.eval))

    mesh = make_mesh(cfg.data_parallel)
    for name, size in (("data.batch_size", d.batch_size), ("eval_batch_size", eval_batch)):
        if size % mesh.size:
            raise ValueError(
                f"{name} ({size}) is not divisible by the {mesh.size} devices of the data mesh; use a multiple of "
                f"{mesh.size} or set data_parallel."
            )
    optimizer = make_optimizer(cfg.optimizer, cfg.steps)
    replicated, batch_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    state = jax.jit(lambda key: init_state(cfg, optimizer, key=key), out_shardings=replicated)(
        jax.random.PRNGKey(cfg.seed)
    )
    resumed_from = latest_checkpoint(ckpt_dir) if cfg.resume else None
    if resumed_from is not None:
        loaded, _ = load_checkpoint(resumed_from, state)
        state = jax.device_put(loaded, replicated)
    start = int(state.step)
    step_fn = jit_train_step(make_train_step(cfg, optimizer, eos_id=eos_id), mesh)
    evaluate = jax.jit(make_eval_step(cfg, eos_id=eos_id))

    peak, peak_source = peak_flops_per_device(cfg.peak_flops_per_device)
    flops_per_token = cfg.model.flops_per_token(d.seq_len)
    tokens_per_step = d.batch_size * d.seq_len
    _forget_logged_after(metrics_path, start)
    if start == 0:
        _write_jsonl(
            metrics_path,
            {
                "event": "start",
                "config": config_to_dict(cfg),
                "params": cfg.model.num_params(),
                "devices": mesh.size,
                "peak_flops": peak,
                "peak_flops_source": peak_source,
            },
        )
    else:
        _write_jsonl(metrics_path, {"event": "resume", "step": start, "checkpoint": str(resumed_from)})

    last_ckpt: str | None = str(resumed_from) if resumed_from else None
    eval_results: dict[str, dict[str, float | None]] = {}
    metrics: dict = {}
    timed_tokens, timed_seconds = 0, 0.0
    window_start, window_steps, paused = time.perf_counter(), 0, 0.0  # paused: eval/checkpoint time in the window
    first_step_done = False
    live_row = _live_row(cfg, start)
    rows = host_rows(batch_sharding, d.batch_size, d.seq_len)  # this host reads only its devices' rows
    with (
        open_trackers(
            output_dir=out, tensorboard=cfg.tensorboard, wandb_project=cfg.wandb_project, config=config_to_dict(cfg)
        ) as trackers,
        BatchPrefetcher(mixture, d.batch_size, rows, start=start, stop=cfg.steps, ahead=d.prefetch) as batches,
    ):
        for step in range(start, cfg.steps):
            local = batches.get(step)  # read in the background while the previous steps computed
            tokens = jax.make_array_from_process_local_data(batch_sharding, local, (d.batch_size, d.seq_len + 1))
            state, metrics = step_fn(state, tokens)
            window_steps += 1
            done = step + 1
            if done % cfg.log_every == 0 or done == cfg.steps:
                metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
                elapsed = time.perf_counter() - window_start - paused
                if first_step_done:  # the first window includes compilation; keep it out of the speed figures
                    timed_tokens += window_steps * tokens_per_step
                    timed_seconds += elapsed
                tok_s = window_steps * tokens_per_step / max(elapsed, 1e-9)
                mfu = tok_s * flops_per_token / (peak * mesh.size)
                record = {
                    "step": done,
                    **metrics,
                    "tokens_per_s": tok_s,
                    "mfu": mfu,
                    "tokens": done * tokens_per_step,
                    "time": time.time(),
                }
                _write_jsonl(metrics_path, record)
                trackers.log(
                    done,
                    {f"train/{k}": record[k] for k in ("loss", "z_loss", "grad_norm", "lr", "tokens_per_s", "mfu")},
                )
                if live_row is not None:  # a row in the run's live view (zephyr run on a terminal)
                    live_row.set(done, note=f"loss {metrics['loss']:.4f} | {tok_s:,.0f} tok/s")
                elif cfg.progress:
                    eta = (cfg.steps - done) * elapsed / window_steps
                    _progress(
                        f"step {done}/{cfg.steps} loss {metrics['loss']:.4f} lr {metrics['lr']:.2e} gnorm "
                        f"{metrics['grad_norm']:.2f} "
                        f"| {tok_s:,.0f} tok/s | MFU {100 * mfu:.1f}% | eta {eta:.0f}s",
                        final=done == cfg.steps,
                    )
                window_start, window_steps, paused, first_step_done = time.perf_counter(), 0, 0.0, True
            want_eval = bool(evals) and (
                (cfg.eval_every is not None and done % cfg.eval_every == 0) or done == cfg.steps
            )
            want_checkpoint = cfg.checkpoint_every is not None and (
                done % cfg.checkpoint_every == 0 or done == cfg.steps
            )
            if want_eval or want_checkpoint:
                jax.block_until_ready(state)  # pending steps finish first: their time is training time
                pause_start = time.perf_counter()  # eval and checkpoint time is not
                if want_eval:
                    eval_results = _evaluate(evaluate, state.params, evals, mesh, eval_batch)
                    scalars = {f"eval/{n}/{k}": v for n, r in eval_results.items() for k, v in r.items()}
                    _write_jsonl(metrics_path, {"step": done, **scalars})
                    trackers.log(done, scalars)
                if want_checkpoint:
                    last_ckpt = str(
                        save_checkpoint(
                            ckpt_dir, done, state, keep=cfg.keep_checkpoints, extra={"config": config_to_dict(cfg)}
                        )
                    )
                paused += time.perf_counter() - pause_start

    if metrics:
        final_loss = float(metrics["loss"])
    else:  # resumed at the last step: nothing trained in this call, so report what the log and the state say
        final_loss = next(
            (float(r["loss"]) for r in reversed(read_metrics(metrics_path)) if r.get("step") == start and "loss" in r),
            float("nan"),
        )
        if evals:
            eval_results = _evaluate(evaluate, state.params, evals, mesh, eval_batch)
    if live_row is not None:
        live_row.finish()
    tok_s = timed_tokens / timed_seconds if timed_seconds else 0.0
    result = TrainResult(
        steps=int(state.step),
        final_loss=final_loss,
        eval=eval_results,
        tokens_per_second=tok_s,
        mfu=(tok_s * flops_per_token / (peak * mesh.size)) if tok_s else None,
        metrics_path=str(metrics_path),
        checkpoint=last_ckpt,
        state=state,
    )
    _write_jsonl(
        metrics_path,
        {
            "event": "end",
            "step": result.steps,
            "final_loss": final_loss,
            "tokens_per_s": tok_s,
            "mfu": result.mfu,
            "eval": eval_results,
        },
    )
    return result
