"""A trained checkpoint as a Hugging Face `transformers` Llama directory (`zephyr export hf`)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["export_checkpoint_hf", "resolve_checkpoint"]


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from a run's output_dir, its checkpoints/ folder, or a step_* folder itself."""
    from zephyr.train.checkpoint import latest_checkpoint

    path = Path(path)
    if (path / "metadata.json").is_file():
        return path
    for folder in (path / "checkpoints", path):
        if folder.is_dir():
            found = latest_checkpoint(folder)
            if found is not None:
                return found
    raise FileNotFoundError(
        f"no complete checkpoint under {path}: pass a training output_dir, its checkpoints/ folder or a "
        "step_* folder with metadata.json (set checkpoint_every in the training config to write checkpoints)"
    )


def export_checkpoint_hf(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the model weights of `checkpoint` as `config.json` + `model.safetensors` under `out`.

    The checkpoint's own metadata holds its training config, so nothing else is needed; the result loads
    with `transformers.LlamaForCausalLM.from_pretrained(out)`. The tokenizer is the token stores' (their
    manifest names it); copy its files beside the weights to publish the model.
    """
    import jax

    from zephyr.train.checkpoint import load_checkpoint
    from zephyr.train.config import config_from_dict
    from zephyr.train.hf import export_hf
    from zephyr.train.optim import make_optimizer
    from zephyr.train.trainer import init_state

    path = resolve_checkpoint(checkpoint)
    metadata = json.loads((path / "metadata.json").read_text())
    if "config" not in metadata:
        raise ValueError(f"{path}/metadata.json has no training config; it was not written by zephyr train")
    cfg = config_from_dict(metadata["config"])
    optimizer = make_optimizer(cfg.optimizer, cfg.steps)
    template = jax.eval_shape(lambda: init_state(cfg, optimizer, key=jax.random.PRNGKey(0)))
    state, _ = load_checkpoint(path, template)
    return export_hf(state.params, out)
