"""Training speed of zephyr.train beside transformers' LlamaForCausalLM (PyTorch), and fused-loss memory.

    .venv/bin/python benchmarks/train.py [--quick]

1. Training tokens/s on this machine's CPU: the same Llama config (default ~15.7M parameters:
   hidden 256, 4 layers, 4 heads / 2 kv heads, SwiGLU 768, vocab 49,152 tied, RMSNorm, RoPE),
   the same initial weights (ours exported into transformers), the same batch (8 x 256 tokens),
   f32, AdamW + global-norm clipping, one full optimizer step per iteration.
   - ours: the jitted step from zephyr.train.trainer (fused cross-entropy, no remat).
   - peer: transformers LlamaForCausalLM (sdpa attention), logits -> F.cross_entropy, backward,
     clip_grad_norm_, torch.optim.AdamW (foreach); torch uses all cores (torch.get_num_threads()).
   The two alternate in rounds and the best round of each is kept: the machine is shared, so the
   best round is the one least disturbed by other work. First-step losses are compared as a
   check that both compute the same thing.
2. Peak memory of the loss + gradient at vocab 49,152: fused (zephyr.train.loss) vs naive
   (full logits, log-softmax), both in JAX: XLA's compiled memory analysis (temp buffers) at
   8,192 tokens x hidden 576 (SmolLM2-135M's head), and measured peak RSS growth of a process
   running each once at 2,048 tokens (a process per variant; RSS sampled every 0.5 ms during the
   call, minus RSS just before it, so inputs and the compiler's own peak are not counted).

The `uptime` load average is printed beside the figures. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB = 49152


def _model_config(quick: bool):
    from zephyr.train.config import ModelConfig

    return ModelConfig(
        vocab_size=VOCAB,
        hidden_dim=256 if not quick else 128,
        intermediate_dim=768 if not quick else 384,
        num_layers=4 if not quick else 2,
        num_heads=4,
        num_kv_heads=2,
        max_seq_len=256,
        remat="none",
    )


def bench_speed(quick: bool) -> dict:
    import jax
    import numpy as np
    import torch
    import transformers

    from zephyr.train.config import DataConfig, LossConfig, OptimizerConfig, TrainConfig
    from zephyr.train.hf import hf_config_dict, to_hf_state_dict
    from zephyr.train.optim import make_optimizer
    from zephyr.train.trainer import init_state, jit_train_step, make_mesh, make_train_step

    model_cfg = _model_config(quick)
    batch, seq = (8, 256) if not quick else (4, 128)
    steps_per_round, rounds = (3, 2) if not quick else (2, 2)
    opt_cfg = OptimizerConfig(
        learning_rate=1e-3, warmup_steps=0, schedule="constant", weight_decay=0.1, max_grad_norm=1.0
    )
    cfg = TrainConfig(
        model=model_cfg,
        loss=LossConfig(impl="fused"),
        optimizer=opt_cfg,
        data=DataConfig(seq_len=seq, batch_size=batch),
        steps=1000,
    )
    tokens = (
        np.random.default_rng(0).integers(1, VOCAB, (batch, seq + 1)).astype(np.int32)
    )  # no EOS: one document per row

    # ours
    optimizer = make_optimizer(opt_cfg, cfg.steps)
    mesh = make_mesh(1)
    state = jax.jit(lambda k: init_state(cfg, optimizer, key=k))(jax.random.PRNGKey(0))
    hf_weights = to_hf_state_dict(state.params)
    step = jit_train_step(make_train_step(cfg, optimizer, eos_id=0), mesh)
    t0 = time.perf_counter()
    state, metrics = step(state, tokens)
    ours_first_loss = float(metrics["loss"])
    ours_compile_s = time.perf_counter() - t0

    # peer: the same weights in transformers
    torch.manual_seed(0)
    hf_cfg = transformers.LlamaConfig(
        **{k: v for k, v in hf_config_dict(model_cfg).items() if k not in ("architectures", "torch_dtype")}
    )
    peer = transformers.LlamaForCausalLM(hf_cfg).float()
    peer.config._attn_implementation = "sdpa"
    result = peer.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in hf_weights.items()}, strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}, result  # tied head only
    peer.tie_weights()
    assert peer.lm_head.weight.data_ptr() == peer.model.embed_tokens.weight.data_ptr()
    peer.train()
    peer_opt = torch.optim.AdamW(
        peer.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True
    )
    x = torch.from_numpy(tokens[:, :-1].astype(np.int64))
    y = torch.from_numpy(tokens[:, 1:].astype(np.int64))

    def peer_step() -> float:
        logits = peer(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(peer.parameters(), 1.0)
        peer_opt.step()
        peer_opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    peer_first_loss = peer_step()

    def timed(fn) -> tuple[float, float]:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - wall0, time.process_time() - cpu0

    def ours_round() -> None:
        nonlocal state
        for _ in range(steps_per_round):
            state, m = step(state, tokens)
        jax.block_until_ready(m["loss"])

    def peer_round() -> None:
        for _ in range(steps_per_round):
            peer_step()

    ours_rounds, peer_rounds = [], []
    for _ in range(rounds):
        ours_rounds.append(timed(ours_round))
        peer_rounds.append(timed(peer_round))
    tokens_per_round = steps_per_round * batch * seq
    ours_best = min(w for w, _ in ours_rounds)
    peer_best = min(w for w, _ in peer_rounds)
    return {
        "params": model_cfg.num_params(),
        "batch": batch,
        "seq_len": seq,
        "torch_threads": torch.get_num_threads(),
        "ours_tok_s": tokens_per_round / ours_best,
        "peer_tok_s": tokens_per_round / peer_best,
        "ours_tok_per_cpu_s": tokens_per_round / min(c for _, c in ours_rounds),
        "peer_tok_per_cpu_s": tokens_per_round / min(c for _, c in peer_rounds),
        "ours_compile_s": ours_compile_s,
        "ours_first_loss": ours_first_loss,
        "peer_first_loss": peer_first_loss,
        "mfu_ours_flops_per_token": model_cfg.flops_per_token(seq),
    }


_MEMORY_CHILD = """
import json, os, sys, threading, time
import jax, jax.numpy as jnp, numpy as np
from zephyr.train.loss import linear_cross_entropy_loss
impl, n, d, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
h = jnp.asarray(rng.standard_normal((n, d)), jnp.float32)
w = jnp.asarray(rng.standard_normal((d, v)) * 0.02, jnp.float32)
y = jnp.asarray(rng.integers(0, v, n), jnp.int32)
f = jax.jit(jax.value_and_grad(lambda h, w: linear_cross_entropy_loss(h, w, y, impl=impl)[0], argnums=(0, 1)))
compiled = f.lower(h, w).compile()
jax.block_until_ready((h, w, y))
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
peak, running = [rss()], [True]
def sample():  # ru_maxrss would also count the compiler's own peak; sample RSS during the run instead
    while running[0]:
        peak.append(rss())
        time.sleep(0.0005)
before = rss()
sampler = threading.Thread(target=sample)
sampler.start()
out = compiled(h, w)
jax.block_until_ready(out)
running[0] = False
sampler.join()
print(json.dumps({"peak_growth_bytes": max(peak) - before, "loss": float(out[0])}))
"""


def bench_memory(quick: bool) -> dict:
    import jax
    import jax.numpy as jnp

    from zephyr.train.loss import linear_cross_entropy_loss

    n, d = (8192, 576) if not quick else (2048, 576)
    out: dict = {"analysis_tokens": n, "hidden": d, "vocab": VOCAB}
    for impl in ("fused", "reference"):
        h = jax.ShapeDtypeStruct((n, d), jnp.float32)
        w = jax.ShapeDtypeStruct((d, VOCAB), jnp.float32)
        y = jax.ShapeDtypeStruct((n,), jnp.int32)

        def loss(h, w, y, impl: str = impl):
            return linear_cross_entropy_loss(h, w, y, impl=impl)[0]

        fn = jax.value_and_grad(loss, argnums=(0, 1))
        mem = jax.jit(fn).lower(h, w, y).compile().memory_analysis()
        out[f"{impl}_temp_bytes"] = mem.temp_size_in_bytes
        out[f"{impl}_peak_bytes"] = mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
    measured_n = 2048 if not quick else 1024
    out["measured_tokens"] = measured_n
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for impl in ("fused", "reference"):
        proc = subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, impl, str(measured_n), str(d), str(VOCAB)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"memory child ({impl}) failed:\n{proc.stderr[-2000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        out[f"{impl}_measured_growth_bytes"] = res["peak_growth_bytes"]
        # The gradients themselves (d weight [D, V], d hidden [N, D]) are outputs any implementation must hold.
        out[f"{impl}_measured_working_bytes"] = max(res["peak_growth_bytes"] - 4 * (d * VOCAB + measured_n * d), 0)
        out[f"{impl}_measured_loss"] = res["loss"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller model and fewer steps")
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.perf_counter()
    speed = bench_speed(args.quick)
    memory = bench_memory(args.quick)
    load_after = os.getloadavg()

    mb = 1024 * 1024
    print(
        f"\nzephyr.train vs transformers LlamaForCausalLM (PyTorch {__import__('torch').__version__}), "
        f"CPU x{os.cpu_count()}"
    )
    print(
        f"model: {speed['params'] / 1e6:.1f}M params, batch {speed['batch']} x {speed['seq_len']} tokens, "
        f"f32, AdamW + clip, torch threads {speed['torch_threads']}"
    )
    print(f"{'':28}{'ours':>14}{'transformers':>14}{'ratio':>8}")
    print(
        f"{'train tokens/s (wall)':28}{speed['ours_tok_s']:>14,.0f}{speed['peer_tok_s']:>14,.0f}"
        f"{speed['ours_tok_s'] / speed['peer_tok_s']:>8.2f}"
    )
    print(
        f"{'train tokens / CPU-second':28}{speed['ours_tok_per_cpu_s']:>14,.0f}{speed['peer_tok_per_cpu_s']:>14,.0f}"
        f"{speed['ours_tok_per_cpu_s'] / speed['peer_tok_per_cpu_s']:>8.2f}"
    )
    print(f"{'first-step loss (same init)':28}{speed['ours_first_loss']:>14.5f}{speed['peer_first_loss']:>14.5f}")
    print(f"ours compile + first step: {speed['ours_compile_s']:.1f} s")
    print(f"\nloss + grad memory at vocab {VOCAB:,}, hidden {memory['hidden']}:")
    print(f"{'':44}{'fused':>12}{'naive':>12}{'fused/naive':>13}")
    for key, label, n in (
        ("temp", "XLA temp buffers", memory["analysis_tokens"]),
        ("peak", "XLA temp + args + outputs", memory["analysis_tokens"]),
        ("measured_growth", "measured peak RSS growth", memory["measured_tokens"]),
        ("measured_working", "  same, less the gradient outputs", memory["measured_tokens"]),
    ):
        f, r = memory[f"fused_{key}_bytes"], memory[f"reference_{key}_bytes"]
        print(f"{label + f' ({n:,} tokens)':44}{f / mb:>10.1f}MB{r / mb:>10.1f}MB{f / max(r, 1):>13.3f}")
    print(
        f"\nload average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
        f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    figures = {
        "bench": "train",
        "quick": args.quick,
        "params": speed["params"],
        "ours_tok_s": round(speed["ours_tok_s"], 1),
        "peer_tok_s": round(speed["peer_tok_s"], 1),
        "ratio": round(speed["ours_tok_s"] / speed["peer_tok_s"], 3),
        "ours_tok_per_cpu_s": round(speed["ours_tok_per_cpu_s"], 1),
        "peer_tok_per_cpu_s": round(speed["peer_tok_per_cpu_s"], 1),
        "first_loss_ours": round(speed["ours_first_loss"], 5),
        "first_loss_peer": round(speed["peer_first_loss"], 5),
        "fused_temp_mb": round(memory["fused_temp_bytes"] / mb, 1),
        "naive_temp_mb": round(memory["reference_temp_bytes"] / mb, 1),
        "fused_over_naive_temp": round(memory["fused_temp_bytes"] / memory["reference_temp_bytes"], 4),
        "fused_over_naive_peak": round(memory["fused_peak_bytes"] / memory["reference_peak_bytes"], 4),
        "fused_over_naive_measured": round(
            memory["fused_measured_growth_bytes"] / max(memory["reference_measured_growth_bytes"], 1), 4
        ),
        "fused_over_naive_measured_working": round(
            memory["fused_measured_working_bytes"] / max(memory["reference_measured_working_bytes"], 1), 4
        ),
        "load_before": round(load_before[0], 2),
        "load_after": round(load_after[0], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
