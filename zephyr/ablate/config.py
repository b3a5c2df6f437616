"""What a mixture ablation compares: a baseline, candidates, seeds, a model, a token budget, eval sets.

An ablation is declared in YAML (``zephyr ablate CONFIG.yaml``) or built in
Python; either way it becomes one frozen :class:`AblationConfig`, checked when
built, so a typo fails before any store is read or any model compiled::

    output_dir: ablations/code_vs_prose
    seeds: [0, 1, 2]
    confidence: 0.95                  # two-sided, for the paired-difference intervals
    metric: bpb                       # bpb (falls back to loss when bytes are unknown) or loss
    primary_eval: [prose]             # eval sets that decide the verdict (default: all, averaged)
    baseline:
      mixture: {code: [stores/code, 0.75], prose: [stores/prose, 0.25]}
    candidates:
      - name: prose_heavy             # explicit
        mixture: {code: [stores/code, 0.25], prose: [stores/prose, 0.75]}
      - add: {dataset: wiki, store: stores/wiki, fraction: 0.2}     # baseline + 20% of wiki
      - sweep: {dataset: prose, fractions: [0.5, 0.75]}               # prose share set to 50%, 75%
      - negative_control: {dataset: prose}                            # baseline, prose token-shuffled
    matched_exposure:                 # cap unique tokens so epochs match production
      wiki: {production_tokens: 1.0e12}
    model: {preset: tiny}             # or any zephyr.train ModelConfig field
    train: {tokens: 200000, seq_len: 64, batch_size: 8, eval_every: 25}
    eval: {prose: stores/prose/validation, code: stores/code/validation}

A scaling ladder replaces ``model`` and the token budget: every mixture trains the ladder's
widths with one `zephyr.train.scaling.ScalingRecipe`, and a fitted law predicts its loss at the
target (see :class:`LadderSpec` and :mod:`zephyr.ablate.ladder`)::

    ladder:
      widths: [32, 48, 64, 80]        # the recipe's one size parameter (hidden width)
      target_width: 160               # or target_flops: 1.0e13
      isoflop: {budgets: [1.0e11, 3.0e11, 1.0e12], widths: [32, 48, 64, 80, 96]}   # optional
      recipe: {seq_len: 128, head_dim: 16, tokens_per_param: 20}
      verify: true                    # also train the target and measure the prediction error

Mixture semantics. Weights are normalised to sum to 1. ``fraction: f`` for
dataset ``D`` gives a mixture in which ``D`` makes up exactly ``f`` and the
baseline's other datasets share ``1 - f`` in their baseline proportions; when
``D`` is not in the baseline this is "baseline plus f of D", when it is, it
re-weights ``D``. A sweep is several such candidates. A negative control is a
mixture (the baseline unless ``of:`` names another) with one dataset's store
replaced by a token-shuffled copy (see :func:`zephyr.ablate.stores.write_shuffled_store`);
it should always come out worse, so it checks that the ablation can tell.

Relative paths are taken from the current directory, as ``zephyr train`` does.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zephyr.config import ConfigError, apply_overrides, from_dict, load_yaml, require

from .ladder_spec import LadderSpec

__all__ = [
    "Component",
    "MixtureSpec",
    "ExposureSpec",
    "TrainSettings",
    "AblationConfig",
    "MODEL_PRESETS",
    "mixture_with_fraction",
    "ablation_config_from_dict",
    "load_ablation_config",
]

Metric = Literal["bpb", "loss"]
Backend = Literal["local", "ray"]

# Small Llama-style shapes for ablations. "tiny" trains on a laptop CPU in seconds; the others follow the
# usual small-model ladder (parameter counts exclude embeddings).
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(hidden_dim=64, intermediate_dim=192, num_layers=2, num_heads=2, num_kv_heads=2, remat="none"),
    "mini": dict(hidden_dim=256, intermediate_dim=768, num_layers=4, num_heads=4, num_kv_heads=4),
    "20m": dict(hidden_dim=384, intermediate_dim=1024, num_layers=6, num_heads=6, num_kv_heads=6),
    "60m": dict(hidden_dim=512, intermediate_dim=1536, num_layers=10, num_heads=8, num_kv_heads=8),
    "150m": dict(hidden_dim=768, intermediate_dim=2048, num_layers=12, num_heads=12, num_kv_heads=4),
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+\-]*$")


def _check_name(name: str, what: str) -> None:
    require(
        isinstance(name, str) and bool(_NAME_RE.match(name)),
        f"{what} name {name!r} must start with a letter or digit and hold only letters, digits and _ . + - "
        "(it becomes a directory name).",
    )


@dataclass(frozen=True)
class Component:
    """One dataset in a mixture: its token store, its weight, and whether to token-shuffle it."""

    store: str
    weight: float
    shuffled: bool = False  # replaced by a token-shuffled copy (negative control)


@dataclass(frozen=True)
class MixtureSpec:
    """A named mixture ``{dataset: Component}``, weights summing to 1, and how it was derived."""

    name: str
    components: Mapping[str, Component]
    derivation: str = "explicit"  # human-readable: "explicit", "baseline + 20% wiki", ...

    def __post_init__(self) -> None:
        _check_name(self.name, "mixture")
        require(bool(self.components), f"mixture {self.name!r} has no datasets; give {{dataset: [store, weight]}}.")
        for dataset, comp in self.components.items():
            _check_name(dataset, f"dataset in mixture {self.name!r}:")
            require(
                math.isfinite(comp.weight) and comp.weight >= 0,
                f"mixture {self.name!r}: weight of {dataset!r} must be a finite number >= 0, got {comp.weight}.",
            )
        total = sum(c.weight for c in self.components.values())
        require(total > 0, f"mixture {self.name!r}: weights sum to 0; give at least one dataset a positive weight.")
        if abs(total - 1.0) > 1e-9:  # normalise so reports show shares
            normalised = {d: dataclasses.replace(c, weight=c.weight / total) for d, c in self.components.items()}
            object.__setattr__(self, "components", normalised)
        object.__setattr__(self, "components", dict(self.components))

    def weights(self) -> dict[str, float]:
        return {d: c.weight for d, c in self.components.items()}

    def describe(self) -> str:
        parts = [f"{d}{'(shuffled)' if c.shuffled else ''} {100 * c.weight:.1f}%" for d, c in self.components.items()]
        return ", ".join(parts)


@dataclass(frozen=True)
class ExposureSpec:
    """Matched exposure for one dataset: cap its unique tokens so ablation epochs equal production epochs.

    Give either ``production_epochs`` (how many times production will see the
    dataset) or ``production_tokens`` (the production run's total tokens; with
    ``production_weight`` if production gives the dataset another share than
    the ablation mixture does). ``seed`` picks which documents are kept.
    """

    production_tokens: float | None = None
    production_epochs: float | None = None
    production_weight: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            (self.production_tokens is None) != (self.production_epochs is None),
            "matched_exposure needs exactly one of production_tokens (total tokens of the production run) or "
            f"production_epochs (passes over the dataset in production); got {self}.",
        )
        for name in ("production_tokens", "production_epochs"):
            value = getattr(self, name)
            require(value is None or value > 0, f"matched_exposure.{name} must be > 0, got {value}.")
        require(
            self.production_weight is None or 0 < self.production_weight <= 1,
            f"matched_exposure.production_weight must be in (0, 1], got {self.production_weight}.",
        )


@dataclass(frozen=True)
class TrainSettings:
    """The budget and loop settings shared by every run: give ``tokens`` or ``steps``.

    In a scaling ladder the recipe sets tokens, steps, batch size and sequence length per run, so
    only the loop settings apply (eval, checkpoints, mixture block, dtypes).
    """

    tokens: int | None = None  # training tokens per run; steps = ceil(tokens / (batch_size * seq_len))
    steps: int | None = None
    seq_len: int = 256
    batch_size: int = 8
    eval_every: int | None = None  # None: about 8 points per eval curve (a ladder run: its last step only)
    eval_batches: int = 4
    eval_batch_size: int | None = None  # None: batch_size (a ladder: recipe.base_batch_size, for every run)
    checkpoint_every: int | None = None  # None: about 4 checkpoints per run
    mixture_block: int = 256
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    param_dtype: Literal["float32", "bfloat16"] = "float32"

    def __post_init__(self) -> None:
        require(
            self.tokens is None or self.steps is None,
            f"train needs exactly one of tokens (the budget per run) or steps; got tokens={self.tokens}, "
            f"steps={self.steps}.",
        )
        require(
            self.seq_len > 0 and self.batch_size > 0,
            f"train.seq_len and train.batch_size must be > 0, got {self.seq_len}, {self.batch_size}.",
        )
        require(
            self.tokens is None or self.tokens >= self.seq_len * self.batch_size,
            f"train.tokens ({self.tokens}) is less than one batch ({self.batch_size} x {self.seq_len} tokens).",
        )
        require(self.steps is None or self.steps > 0, f"train.steps must be > 0, got {self.steps}.")
        for name in ("eval_every", "checkpoint_every"):
            value = getattr(self, name)
            require(value is None or value > 0, f"train.{name} must be > 0 or null (automatic), got {value}.")
        require(self.eval_batches > 0, f"train.eval_batches must be > 0, got {self.eval_batches}.")
        require(
            self.eval_batch_size is None or self.eval_batch_size > 0,
            f"train.eval_batch_size must be > 0 or null (the batch size), got {self.eval_batch_size}.",
        )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch_size

    @property
    def num_steps(self) -> int:
        if self.steps is not None:
            return self.steps
        if self.tokens is None:
            raise ConfigError("train needs exactly one of tokens (the budget per run) or steps; got neither.")
        return -(-int(self.tokens) // self.tokens_per_step)

    @property
    def num_tokens(self) -> int:
        return self.num_steps * self.tokens_per_step

    @property
    def resolved_eval_every(self) -> int:
        return self.eval_every or max(1, self.num_steps // 8)

    @property
    def resolved_checkpoint_every(self) -> int:
        return self.checkpoint_every or max(1, self.num_steps // 4)


@dataclass(frozen=True)
class AblationConfig:
    """Everything an ablation needs; built by :func:`load_ablation_config` or directly."""

    output_dir: str
    baseline: MixtureSpec
    candidates: tuple[MixtureSpec, ...]
    eval: Mapping[str, str]
    train: TrainSettings
    seeds: tuple[int, ...] = (0, 1)
    model: Mapping[str, Any] = field(default_factory=lambda: dict(MODEL_PRESETS["tiny"]))  # ModelConfig fields
    optimizer: Mapping[str, Any] = field(default_factory=dict)  # OptimizerConfig fields
    loss: Mapping[str, Any] = field(default_factory=dict)  # LossConfig fields
    matched_exposure: Mapping[str, ExposureSpec] = field(default_factory=dict)
    confidence: float = 0.95
    metric: Metric = "bpb"
    primary_eval: tuple[str, ...] | None = None  # None: all eval sets, averaged per seed
    backend: Backend = "local"
    ray_address: str | None = None
    gpus_per_run: float = 0.0
    cpus_per_run: float = 1.0
    compilation_cache: str | None = "auto"  # JAX persistent cache dir; "auto": $ZEPHYR_CACHE_DIR/jax; None: off
    progress: bool = False  # the trainer's own per-step progress line
    ladder: LadderSpec | None = None  # a scaling ladder instead of one model size

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "eval", dict(self.eval))
        require(bool(self.candidates), "an ablation needs at least one candidate mixture besides the baseline.")
        require(bool(self.seeds), "seeds is empty; give at least one seed (two or more for confidence intervals).")
        require(
            len(set(self.seeds)) == len(self.seeds), f"seeds repeat: {list(self.seeds)}; each seed must be distinct."
        )
        names = [self.baseline.name] + [c.name for c in self.candidates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        require(not dupes, f"mixture names repeat: {dupes}; give each candidate a distinct name.")
        require(bool(self.eval), "eval is empty; name at least one eval store: eval: {name: path/to/store}.")
        for name in self.eval:
            _check_name(name, "eval set")
        require(0 < self.confidence < 1, f"confidence must be in (0, 1), e.g. 0.95; got {self.confidence}.")
        require(self.metric in ("bpb", "loss"), f"metric must be 'bpb' or 'loss', got {self.metric!r}.")
        if self.primary_eval is not None:
            object.__setattr__(self, "primary_eval", tuple(self.primary_eval))
            unknown = sorted(set(self.primary_eval) - set(self.eval))
            require(
                not unknown and bool(self.primary_eval),
                f"primary_eval {list(self.primary_eval)} must name eval sets among {sorted(self.eval)}.",
            )
        require(self.backend in ("local", "ray"), f"backend must be 'local' or 'ray', got {self.backend!r}.")
        require(
            self.gpus_per_run >= 0 and self.cpus_per_run > 0,
            f"gpus_per_run must be >= 0 and cpus_per_run > 0, got {self.gpus_per_run}, {self.cpus_per_run}.",
        )
        if self.ladder is None:
            require(
                (self.train.tokens is None) != (self.train.steps is None),
                f"train needs exactly one of tokens (the budget per run) or steps; got tokens={self.train.tokens}, "
                f"steps={self.train.steps}.",
            )
        else:
            require(
                self.train.tokens is None and self.train.steps is None,
                "with a ladder the recipe sets each run's tokens (ladder.recipe.tokens_per_param, isoflop budgets); "
                f"drop train.tokens / train.steps (got {self.train.tokens}, {self.train.steps}).",
            )
            require(
                not self.matched_exposure,
                "matched_exposure caps a dataset for one token budget, and ladder runs each have their own; run "
                "the ladder without it (or write capped stores first and use them as the mixtures' stores).",
            )
        datasets = {d for m in self.mixtures for d in m.components}
        unknown = sorted(set(self.matched_exposure) - datasets)
        require(
            not unknown,
            f"matched_exposure names dataset(s) {unknown} that no mixture uses; datasets are {sorted(datasets)}.",
        )

    @property
    def mixtures(self) -> tuple[MixtureSpec, ...]:
        """Baseline first, then candidates in the order given."""
        return (self.baseline, *self.candidates)

    @property
    def decision_sets(self) -> tuple[str, ...]:
        return self.primary_eval or tuple(self.eval)


# ----------------------------------------------------------------------------- building mixtures


def mixture_with_fraction(
    base: MixtureSpec, dataset: str, fraction: float, *, store: str | None = None, name: str | None = None
) -> MixtureSpec:
    """``base`` re-weighted so ``dataset`` is exactly ``fraction`` of it (added when absent).

    The other datasets keep their proportions among themselves and share ``1 - fraction``.
    """
    require(0 < fraction <= 1, f"fraction for {dataset!r} must be in (0, 1], got {fraction}.")
    existing = base.components.get(dataset)
    if store is None:
        require(
            existing is not None,
            f"dataset {dataset!r} is not in mixture {base.name!r} ({sorted(base.components)}); give its store: "
            f"add: {{dataset: {dataset}, store: path/to/store, fraction: {fraction}}}.",
        )
        store = existing.store
    others = {d: c for d, c in base.components.items() if d != dataset}
    rest = sum(c.weight for c in others.values())
    require(
        fraction == 1 or rest > 0,
        f"mixture {base.name!r} holds only {dataset!r}; a fraction below 1 needs other datasets to fill the rest.",
    )
    comps = {d: dataclasses.replace(c, weight=(1 - fraction) * c.weight / rest) for d, c in others.items() if rest > 0}
    comps[dataset] = Component(
        store, fraction, existing.shuffled if existing is not None and existing.store == store else False
    )
    verb = "with" if existing is not None else "+"
    return MixtureSpec(
        name or f"{base.name}+{dataset}{_pct(fraction)}", comps, f"{base.name} {verb} {dataset} at {100 * fraction:g}%"
    )


def _pct(fraction: float) -> str:
    return f"{100 * fraction:g}".replace(".", "p")


def _shuffled_copy(base: MixtureSpec, dataset: str, name: str | None) -> MixtureSpec:
    require(
        dataset in base.components,
        f"negative_control: dataset {dataset!r} is not in mixture {base.name!r} ({sorted(base.components)}).",
    )
    comps = dict(base.components)
    comps[dataset] = dataclasses.replace(comps[dataset], shuffled=True)
    return MixtureSpec(
        name or f"{base.name}-shuffled-{dataset}",
        comps,
        f"{base.name} with {dataset} token-shuffled (negative control)",
    )


def _components(raw: Any, where: str) -> dict[str, Component]:
    require(
        isinstance(raw, Mapping) and bool(raw),
        f"{where} must be a mapping {{dataset: [store path, weight]}}, got {raw!r}.",
    )
    out = {}
    for dataset, entry in raw.items():
        if isinstance(entry, Mapping):
            unknown = sorted(set(entry) - {"store", "weight"})
            require(
                not unknown and "store" in entry and "weight" in entry,
                f"{where}.{dataset} must be [store, weight] or {{store: ..., weight: ...}}, got {entry!r}.",
            )
            store, weight = entry["store"], entry["weight"]
        else:
            require(
                isinstance(entry, (list, tuple)) and len(entry) == 2,
                f"{where}.{dataset} must be [store path, weight], got {entry!r}.",
            )
            store, weight = entry
        require(
            isinstance(store, str) and isinstance(weight, (int, float)) and not isinstance(weight, bool),
            f"{where}.{dataset}: expected [store path (string), weight (number)], got {entry!r}.",
        )
        out[str(dataset)] = Component(str(store), float(weight))
    return out


def _keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(raw) - allowed)
    require(not unknown, f"{where}: unknown key(s) {unknown}; expected some of {sorted(allowed)}.")


def _candidates(raw: Any, baseline: MixtureSpec) -> list[MixtureSpec]:
    require(isinstance(raw, list) and bool(raw), f"candidates must be a non-empty list, got {raw!r}.")
    built: list[MixtureSpec] = []
    for i, entry in enumerate(raw):
        where = f"candidates[{i}]"
        require(isinstance(entry, Mapping), f"{where} must be a mapping, got {entry!r}.")
        kinds = [k for k in ("mixture", "add", "sweep", "negative_control") if k in entry]
        require(
            len(kinds) == 1,
            f"{where} must have exactly one of mixture / add / sweep / negative_control, got keys {sorted(entry)}.",
        )
        kind, name = kinds[0], entry.get("name")
        if kind == "mixture":
            _keys(entry, {"name", "mixture"}, where)
            require(name is not None, f"{where}: an explicit mixture needs a name.")
            built.append(MixtureSpec(name, _components(entry["mixture"], f"{where}.mixture")))
        elif kind == "add":
            _keys(entry, {"name", "add"}, where)
            spec = entry["add"]
            require(isinstance(spec, Mapping), f"{where}.add must be {{dataset, fraction, store?}}, got {spec!r}.")
            _keys(spec, {"dataset", "fraction", "store"}, f"{where}.add")
            require(
                "dataset" in spec and "fraction" in spec, f"{where}.add needs dataset and fraction, got {dict(spec)}."
            )
            built.append(
                mixture_with_fraction(
                    baseline, str(spec["dataset"]), float(spec["fraction"]), store=spec.get("store"), name=name
                )
            )
        elif kind == "sweep":
            _keys(entry, {"sweep"}, where)
            spec = entry["sweep"]
            require(isinstance(spec, Mapping), f"{where}.sweep must be {{dataset, fractions, store?}}, got {spec!r}.")
            _keys(spec, {"dataset", "fractions", "store", "prefix"}, f"{where}.sweep")
            fractions = spec.get("fractions")
            require(
                isinstance(fractions, list) and bool(fractions) and "dataset" in spec,
                f"{where}.sweep needs dataset and a non-empty list of fractions, got {dict(spec)}.",
            )
            prefix = spec.get("prefix", baseline.name)
            for f in fractions:
                built.append(
                    mixture_with_fraction(
                        baseline,
                        str(spec["dataset"]),
                        float(f),
                        store=spec.get("store"),
                        name=f"{prefix}+{spec['dataset']}{_pct(float(f))}",
                    )
                )
        else:
            _keys(entry, {"name", "negative_control"}, where)
            spec = entry["negative_control"]
            require(
                isinstance(spec, Mapping) and "dataset" in spec,
                f"{where}.negative_control must be {{dataset, of?}}, got {spec!r}.",
            )
            _keys(spec, {"dataset", "of"}, f"{where}.negative_control")
            of = spec.get("of", baseline.name)
            pool = {m.name: m for m in [baseline, *built]}
            require(
                of in pool,
                f"{where}.negative_control.of={of!r} must name the baseline or an earlier candidate ({sorted(pool)}).",
            )
            built.append(_shuffled_copy(pool[of], str(spec["dataset"]), name))
    return built


def ablation_config_from_dict(data: Mapping[str, Any]) -> AblationConfig:
    """Build an :class:`AblationConfig` from plain data (parsed YAML); unknown keys are errors."""
    top = {
        "output_dir",
        "seeds",
        "confidence",
        "metric",
        "primary_eval",
        "baseline",
        "candidates",
        "matched_exposure",
        "model",
        "optimizer",
        "loss",
        "train",
        "eval",
        "backend",
        "ray",
        "compilation_cache",
        "progress",
        "ladder",
    }
    _keys(data, top, "ablation config")
    ladder_raw = data.get("ladder")
    for key in ("output_dir", "baseline", "candidates", "eval") + (("train",) if ladder_raw is None else ()):
        require(key in data, f"ablation config lacks {key!r}; see `zephyr ablate --help` for an example.")
    ladder = None
    if ladder_raw is not None:
        require(isinstance(ladder_raw, Mapping), f"ladder must be a mapping, got {ladder_raw!r}.")
        for key, what in (("model", "model shapes"), ("optimizer", "the learning rate and schedule")):
            require(
                key not in data,
                f"with a ladder the recipe sets {what} for every size; move {key}: settings into ladder.recipe "
                "(zephyr.train.scaling.ScalingRecipe fields) and drop the top-level key.",
            )
        set_by_recipe = sorted({"tokens", "steps", "seq_len", "batch_size"} & set(data.get("train") or {}))
        require(
            not set_by_recipe,
            f"with a ladder the recipe sets train.{set_by_recipe} per run; put seq_len and base_batch_size in "
            "ladder.recipe, tokens_per_param there too, and drop them from train.",
        )
        ladder = from_dict(LadderSpec, ladder_raw, "", at="ladder")
    base_raw = data["baseline"]
    require(
        isinstance(base_raw, Mapping) and "mixture" in base_raw,
        f"baseline must be {{name?: ..., mixture: {{dataset: [store, weight]}}}}, got {base_raw!r}.",
    )
    _keys(base_raw, {"name", "mixture"}, "baseline")
    baseline = MixtureSpec(base_raw.get("name", "baseline"), _components(base_raw["mixture"], "baseline.mixture"))
    candidates = _candidates(data["candidates"], baseline)

    model = dict(data.get("model") or {})
    preset = model.pop("preset", None if model or ladder else "tiny")
    if preset is not None:
        require(preset in MODEL_PRESETS, f"model.preset {preset!r} is not one of {sorted(MODEL_PRESETS)}.")
        model = {**MODEL_PRESETS[preset], **model}
    train_raw = data.get("train") or {}
    require(isinstance(train_raw, Mapping), f"train must be a mapping, got {train_raw!r}.")
    exposure_raw = data.get("matched_exposure") or {}
    require(isinstance(exposure_raw, Mapping), f"matched_exposure must map dataset -> settings, got {exposure_raw!r}.")
    exposure = {}
    for dataset, spec in exposure_raw.items():
        require(isinstance(spec, Mapping), f"matched_exposure.{dataset} must be a mapping, got {spec!r}.")
        exposure[str(dataset)] = from_dict(ExposureSpec, spec, "", at=f"matched_exposure.{dataset}")
    ray = dict(data.get("ray") or {})
    _keys(ray, {"address", "gpus_per_run", "cpus_per_run"}, "ray")
    eval_sets = data["eval"]
    require(isinstance(eval_sets, Mapping), f"eval must map name -> store path, got {eval_sets!r}.")
    primary = data.get("primary_eval")
    return AblationConfig(
        output_dir=str(data["output_dir"]),
        baseline=baseline,
        candidates=tuple(candidates),
        eval={str(k): str(v) for k, v in eval_sets.items()},
        train=from_dict(TrainSettings, train_raw, "", at="train"),
        seeds=tuple(data.get("seeds", (0, 1))),
        model=model,
        optimizer=dict(data.get("optimizer") or {}),
        loss=dict(data.get("loss") or {}),
        matched_exposure=exposure,
        confidence=float(data.get("confidence", 0.95)),
        metric=data.get("metric", "bpb"),
        primary_eval=(tuple([primary]) if isinstance(primary, str) else tuple(primary)) if primary else None,
        backend=data.get("backend", "local"),
        ray_address=ray.get("address"),
        gpus_per_run=float(ray.get("gpus_per_run", 0.0)),
        cpus_per_run=float(ray.get("cpus_per_run", 1.0)),
        compilation_cache=data.get("compilation_cache", "auto"),
        progress=bool(data.get("progress", False)),
        ladder=ladder,
    )


def load_ablation_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> AblationConfig:
    """Read a YAML ablation config; ``overrides`` are ``a.b=value`` strings (value parsed as YAML)."""
    data = load_yaml(path, "ablation config")
    try:
        return ablation_config_from_dict(apply_overrides(data, list(overrides)))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
