"""The bundled JAX trainer: Llama-style model, fused cross-entropy, mixture data, checkpoints.

Python API::

    from zephyr.train import TrainConfig, load_config, train
    result = train(load_config("configs/tiny.yaml", ["steps=100"]))
    result.final_loss, result.eval["web"]["bpb"]

Modules, each readable on its own: ``config`` (frozen dataclasses), ``model``
(the decoder), ``loss`` (fused linear cross-entropy) and ``pallas_loss`` (its
GPU kernel), ``optim``, ``data``, ``checkpoint``, ``trainer`` (the loop), ``scaling``
(one recipe of shapes, learning rate, batch, schedule and tokens from a width),
``hf`` (Hugging Face import/export), ``cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
    from zephyr.train.config import (
        ConfigError,
        DataConfig,
        LossConfig,
        ModelConfig,
        OptimizerConfig,
        TrainConfig,
        load_config,
    )
    from zephyr.train.scaling import RecipeRun, ScalingRecipe
    from zephyr.train.trainer import TrainResult, TrainState, train

__all__ = [
    "ConfigError",
    "DataConfig",
    "LossConfig",
    "ModelConfig",
    "OptimizerConfig",
    "TrainConfig",
    "load_config",
    "ScalingRecipe",
    "RecipeRun",
    "TrainResult",
    "TrainState",
    "train",
]

# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): one submodule never imports the others.
__getattr__, __dir__ = lazy_exports(__name__)
