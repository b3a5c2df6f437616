"""Training metrics beyond ``metrics.jsonl``: TensorBoard event files and Weights & Biases.

Both are optional and off by default (``tensorboard: true`` and ``wandb_project: NAME``
in the training config). The JSONL log stays the record of truth; these are views
of the same scalars for people who already watch runs in those tools. A resumed
run appends to the same TensorBoard directory and continues the same W&B run
(its id is kept in ``output_dir/wandb_run_id``), so one run is one curve.
W&B honours its own environment (``WANDB_MODE=offline``, ``WANDB_API_KEY``, ...).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Trackers", "open_trackers"]


@dataclass(frozen=True)
class Trackers:
    """The metric sinks a run opened; ``log`` sends scalars to each, ``close`` flushes them."""

    tensorboard: Any = None  # tensorboard.summary.Writer
    wandb_run: Any = None  # wandb.sdk.wandb_run.Run

    def log(self, step: int, scalars: Mapping[str, float | None]) -> None:
        values = {k: float(v) for k, v in scalars.items() if v is not None and math.isfinite(float(v))}
        if self.tensorboard is not None:
            for name, value in values.items():
                self.tensorboard.add_scalar(name, value, step=step)
            self.tensorboard.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(values, step=step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _missing(package: str, setting: str) -> ImportError:
    return ImportError(
        f"{setting} needs the '{package}' package: pip install '{package}' (or pip install 'zephyr[track]')."
    )


def open_trackers(
    *, output_dir: Path, tensorboard: bool, wandb_project: str | None, config: Mapping[str, Any]
) -> Trackers:
    """Open the sinks the config asks for; a missing package fails here, before any step runs."""
    writer = run = None
    if tensorboard:
        try:
            from tensorboard.summary import Writer
        except ImportError as exc:
            raise _missing("tensorboard", "tensorboard: true") from exc
        writer = Writer(str(output_dir / "tensorboard"))
    if wandb_project:
        try:
            import wandb
        except ImportError as exc:
            raise _missing("wandb", f"wandb_project: {wandb_project}") from exc
        id_file = output_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id)
        run = wandb.init(
            project=wandb_project,
            id=run_id,
            resume="allow",
            name=output_dir.name,
            dir=str(output_dir),
            config=dict(config),
        )
    return Trackers(writer, run)
