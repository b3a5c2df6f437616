"""Plan and run every (mixture, seed) training run of an ablation, or every (mixture, ladder point, seed) run
of a scaling ladder: skip finished runs, resume cut ones.

Planning (:func:`plan_ablation`) turns the config into concrete runs: derived
stores are written (token-shuffled copies, matched-exposure subsets), every
store is checked to come from one tokenizer, and each run gets a
``zephyr.train`` config and a fingerprint of what the ablation decides
(stores and their contents, weights, model, optimizer, budget, seed, eval sets).

A run lives in ``OUTPUT/runs/<mixture>/seed<k>-<fingerprint>/`` (a ladder run in
``OUTPUT/runs/<mixture>/<point>-seed<k>-<fingerprint>/``): the trainer's
``metrics.jsonl`` and ``checkpoints/``, and ``result.json``, the done marker,
written atomically once the run has finished. So:

* a finished run (``result.json`` with the same fingerprint) is never trained again;
* a run cut short (a crash, a killed job, a lost Ray worker) resumes from its
  newest checkpoint: the trainer's batches are a pure function of
  ``(seed, step)``, so the resumed run continues exactly where it stopped;
* changing anything the ablation sets gives a new fingerprint, hence a fresh directory;
  a changed trainer default does not (it would silently discard every finished run),
  but the report notes which settings of finished runs differ from the current ones.

Runs execute one after another in this process (``backend="local"``), or as
Ray tasks, one run per task with ``gpus_per_run`` GPUs (``backend="ray"``;
the output directory must then be on storage every node can reach).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from zephyr.config import ConfigError
from zephyr.train.scaling import ScalingRecipe
from zephyr.versioning import fingerprint, read_marker, write_marker

from . import stores
from .config import AblationConfig
from .ladder import LadderPoint, ladder_points

__all__ = [
    "ResolvedMixture",
    "RunSpec",
    "RunResult",
    "AblationPlan",
    "plan_ablation",
    "execute_run",
    "load_run_result",
    "read_eval_curves",
    "enable_compilation_cache",
    "config_drift",
    "write_json",
]

_DONE = "result.json"
_RUN_KIND = "ablation-run"  # its `zephyr.versioning` done marker


@dataclass(frozen=True)
class ResolvedMixture:
    """A mixture with the concrete stores it trains on (derived stores substituted)."""

    name: str
    derivation: str
    components: dict[str, tuple[str, float]]  # dataset -> (store path actually read, weight)
    exposure: tuple[stores.ExposureCap, ...] = ()
    shuffled: tuple[str, ...] = ()  # datasets replaced by token-shuffled copies


@dataclass(frozen=True)
class RunSpec:
    """One training run; plain data only, so it pickles cheaply to a Ray worker."""

    mixture: str
    seed: int
    run_dir: str
    fingerprint: str
    train_config: dict[str, Any]  # zephyr.train.config.config_to_dict form
    compilation_cache: str | None = None
    point: str = ""  # the ladder point (zephyr.ablate.ladder) it trains; "" in a one-size ablation

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.mixture, self.point, self.seed)


@dataclass(frozen=True)
class RunResult:
    """What a finished run reports; ``status`` says whether this call trained, resumed or reused it."""

    mixture: str
    seed: int
    status: str  # "trained" | "resumed" | "cached"
    steps: int
    final_loss: float
    eval: dict[str, dict[str, float | None]]  # eval set -> {"loss", "bpb"}
    metrics_path: str
    checkpoint: str | None
    wall_s: float
    tokens_per_second: float
    run_dir: str
    fingerprint: str
    point: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.mixture, self.point, self.seed)


@dataclass(frozen=True)
class AblationPlan:
    """Every run an ablation needs (mixtures x seeds), with the shared training shape: steps, tokens per run,
    tokenizer and vocabulary."""

    config: AblationConfig
    mixtures: tuple[ResolvedMixture, ...]
    runs: tuple[RunSpec, ...]
    tokenizer: str | None
    vocab_size: int
    steps: int | None  # None in a ladder: every point has its own
    tokens_per_run: int | None
    notes: tuple[str, ...] = field(default=())
    points: tuple[LadderPoint, ...] = ()  # a ladder's sizes (zephyr.ablate.ladder), target last
    recipe: ScalingRecipe | None = None  # the ladder's recipe, vocabulary filled in

    def to_json(self) -> dict[str, Any]:
        return {
            "output_dir": self.config.output_dir,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "steps": self.steps,
            "tokens_per_run": self.tokens_per_run,
            "seeds": list(self.config.seeds),
            "eval": dict(self.config.eval),
            "mixtures": [
                {
                    "name": m.name,
                    "derivation": m.derivation,
                    "components": {d: {"store": s, "weight": w} for d, (s, w) in m.components.items()},
                    "shuffled": list(m.shuffled),
                    "exposure": [asdict(e) for e in m.exposure],
                }
                for m in self.mixtures
            ],
            "runs": [
                {
                    "mixture": r.mixture,
                    **({"point": r.point} if r.point else {}),
                    "seed": r.seed,
                    "run_dir": r.run_dir,
                    "fingerprint": r.fingerprint,
                }
                for r in self.runs
            ],
            "notes": list(self.notes),
            **({"ladder": [p.to_json() for p in self.points]} if self.points else {}),
            **({"recipe": dataclasses.asdict(self.recipe)} if self.recipe is not None else {}),
        }


# ----------------------------------------------------------------------------- planning


def plan_ablation(config: AblationConfig) -> AblationPlan:
    """Resolve stores (writing derived ones under ``OUTPUT/stores``), check them, and build every run.

    One size: a run per (mixture, seed). A ladder: a run per (mixture, ladder point, seed), the
    target's only when ``ladder.verify`` is set (with ``ladder.target_seeds``, default the first seed).
    """
    out = Path(config.output_dir).absolute()
    summaries: dict[str, stores.StoreSummary] = {}
    for m in config.mixtures:
        for comp in m.components.values():
            summaries.setdefault(comp.store, stores.store_summary(comp.store))
    for path in config.eval.values():
        summaries.setdefault(path, stores.store_summary(path))
    hashes = {s.tokenizer_hash for s in summaries.values()}
    if len(hashes) > 1:
        listing = "; ".join(f"{p}: {s.tokenizer_name} ({s.tokenizer_hash})" for p, s in summaries.items())
        raise ConfigError(
            f"the ablation's stores come from different tokenizers ({listing}); losses would not be comparable. "
            "Tokenize every training and eval store with the same tokenizer."
        )
    eos_ids = {s.eos_id for s in summaries.values()} - {None}
    if len(eos_ids) != 1:
        raise ConfigError(
            f"cannot tell the EOS id of the stores (found {sorted(eos_ids)} in their manifests' "
            "tokenizer.eos_id); tokenize them with an EOS token."
        )
    eos_id = eos_ids.pop()
    vocab = int(config.model.get("vocab_size") or max(s.vocab_size for s in summaries.values()))
    tokenizer = next(iter(summaries.values())).tokenizer_name

    notes: list[str] = []
    sizes: list[_Size] = []
    points: tuple[LadderPoint, ...] = ()
    recipe: ScalingRecipe | None = None
    if config.ladder is None:
        settings = config.train
        model = {
            **config.model,
            "vocab_size": vocab,
            "max_seq_len": max(int(config.model.get("max_seq_len", 0)), settings.seq_len),
        }
        sizes.append(
            _Size("", model, dict(config.optimizer), settings.num_steps, settings.batch_size, settings.seq_len)
        )
    else:
        spec = config.ladder
        recipe = dataclasses.replace(spec.recipe, vocab_size=spec.recipe.vocab_size or vocab)
        planned, ladder_notes = ladder_points(spec, recipe)
        notes.extend(ladder_notes)
        points = tuple(point for point, _ in planned)
        for point, run in planned:
            optimizer = recipe.optimizer_fields(run.width, run.tokens, run.steps)
            optimizer["learning_rate"] *= point.lr_multiplier
            sizes.append(
                _Size(
                    point.name,
                    recipe.model_fields(run.width),
                    optimizer,
                    run.steps,
                    run.batch_size,
                    run.seq_len,
                    kind=point.kind,
                )
            )
    resolved = _resolve_mixtures(
        config, out, summaries, notes, tokens=None if config.ladder is not None else config.train.num_tokens
    )
    eval_paths = {name: str(Path(p).absolute()) for name, p in config.eval.items()}
    runs = []
    for mix in resolved:
        read = {p: stores.store_summary(p) for p, _ in mix.components.values()}  # one manifest read per store
        store_ids = {p: (summary.config_hash, summary.tokens) for p, summary in read.items()}
        for size in sizes:
            for seed in _seeds_of(config, size, mix.name):
                runs.append(_run_spec(config, out, mix, size, seed, eval_paths, eos_id, store_ids))
    single = config.ladder is None
    return AblationPlan(
        config,
        tuple(resolved),
        tuple(runs),
        tokenizer,
        vocab,
        config.train.num_steps if single else None,
        config.train.num_tokens if single else None,
        tuple(notes),
        points,
        recipe,
    )


@dataclass(frozen=True)
class _Size:
    """What every run of one size shares: its point name ("" for a one-size ablation), model, optimizer, budget."""

    point: str
    model: dict[str, Any]
    optimizer: dict[str, Any]
    steps: int
    batch_size: int
    seq_len: int
    kind: str = ""


def _seeds_of(config: AblationConfig, size: _Size, mixture: str) -> tuple[int, ...]:
    if size.kind == "transfer":  # a property of the recipe, not of a mixture: checked on the baseline, one seed
        return config.seeds[:1] if mixture == config.baseline.name else ()
    if size.kind != "target":
        return config.seeds
    assert config.ladder is not None
    if not config.ladder.verify:
        return ()  # the target is predicted; it is trained only to verify the prediction
    return config.ladder.target_seeds or config.seeds[:1]


def _resolve_mixtures(
    config: AblationConfig,
    out: Path,
    summaries: dict[str, stores.StoreSummary],
    notes: list[str],
    *,
    tokens: int | None,
) -> list[ResolvedMixture]:
    """Each mixture with the stores it trains on: token-shuffled copies and matched-exposure subsets written."""
    resolved: list[ResolvedMixture] = []
    for m in config.mixtures:
        comps: dict[str, tuple[str, float]] = {}
        caps: list[stores.ExposureCap] = []
        for dataset, comp in m.components.items():
            if comp.weight <= 0:
                continue
            path = str(Path(comp.store).absolute())
            spec = config.matched_exposure.get(dataset)
            if spec is not None and tokens is not None:
                cap = stores.exposure_cap(
                    dataset,
                    unique_tokens=summaries[comp.store].tokens,
                    share=comp.weight,
                    ablation_tokens=tokens,
                    spec=spec,
                )
                caps.append(cap)
                if cap.note:
                    notes.append(f"{m.name}: {dataset}: {cap.note}")
                if cap.cap_tokens is not None:
                    if cap.cap_tokens < config.train.seq_len + 1:
                        raise ConfigError(
                            f"matched exposure keeps only {cap.cap_tokens} tokens of {dataset!r} in mixture "
                            f"{m.name!r}, "
                            f"less than one training window ({config.train.seq_len + 1}); raise the token budget or "
                            "lower production_tokens / production_epochs."
                        )
                    path = stores.write_capped_store(
                        path,
                        out / "stores" / f"{dataset}-cap{cap.cap_tokens}-s{spec.seed}",
                        max_tokens=cap.cap_tokens,
                        seed=spec.seed,
                    )
            if comp.shuffled:
                tag = xxhash.xxh3_64_hexdigest(path.encode())[:8]
                path = stores.write_shuffled_store(path, out / "stores" / f"{dataset}-shuffled-{tag}", seed=0)
            comps[dataset] = (path, comp.weight)
        resolved.append(
            ResolvedMixture(
                m.name, m.derivation, comps, tuple(caps), tuple(d for d, c in m.components.items() if c.shuffled)
            )
        )
    return resolved


def _run_spec(
    config: AblationConfig,
    out: Path,
    mix: ResolvedMixture,
    size: _Size,
    seed: int,
    eval_paths: dict[str, str],
    eos_id: int,
    store_ids: dict[str, tuple[str | None, int]],
) -> RunSpec:
    from zephyr.train.config import config_from_dict, config_to_dict

    settings = config.train
    ladder = config.ladder is not None
    eval_every = settings.eval_every or (size.steps if ladder else settings.resolved_eval_every)
    train: dict[str, Any] = {
        "model": size.model,
        "loss": dict(config.loss),
        "optimizer": size.optimizer,
        "data": {
            "train": {d: [p, w] for d, (p, w) in mix.components.items()},
            "eval": eval_paths,
            "seq_len": size.seq_len,
            "batch_size": size.batch_size,
            "seed": seed,
            "mixture_block": settings.mixture_block,
            "eos_id": eos_id,
        },
        "steps": size.steps,
        "seed": seed,
        "compute_dtype": settings.compute_dtype,
        "param_dtype": settings.param_dtype,
        "eval_every": eval_every,
        "eval_batches": settings.eval_batches,
        "checkpoint_every": settings.checkpoint_every or max(1, size.steps // 4),
        "keep_checkpoints": 1,
        "resume": True,
        "log_every": max(1, min(10, eval_every)),
        "progress": config.progress,
    }
    eval_batch_size = settings.eval_batch_size or (config.ladder.recipe.base_batch_size if config.ladder else None)
    if eval_batch_size is not None:  # absent otherwise, so runs finished before the setting existed keep their key
        train["eval_batch_size"] = eval_batch_size
    # Build it once here so a bad model/optimizer field fails before any run starts.
    checked = config_to_dict(config_from_dict(train))
    # The fingerprint covers what the ablation sets, not the trainer's defaults, so a new trainer
    # default does not silently invalidate finished runs; config_drift() reports such changes.
    fp = fingerprint({"train": {k: v for k, v in train.items() if k != "progress"}, "stores": store_ids})
    prefix = f"{size.point}-" if size.point else ""
    run_dir = out / "runs" / mix.name / f"{prefix}seed{seed}-{fp[:10]}"
    checked["output_dir"] = str(run_dir)
    return RunSpec(mix.name, seed, str(run_dir), fp, checked, config.compilation_cache, size.point)


# ----------------------------------------------------------------------------- running one run


def enable_compilation_cache(setting: str | None) -> str | None:
    """Point JAX's persistent compilation cache at ``setting`` ("auto": ``$ZEPHYR_CACHE_DIR/jax``).

    Every run of an ablation compiles the same step for the same shapes, so
    after the first run the compiled program is read back instead of rebuilt
    (tens of seconds per run on CPU). Leaves a cache directory the user
    already configured alone. Returns the directory in use, or None.
    """
    if setting is None:
        return None
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    if setting == "auto":
        from zephyr.cache import cache_root

        setting = str(cache_root() / "jax")
    Path(setting).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", setting)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return setting


def write_json(path: Path, obj: Any) -> None:
    """Write `obj` as JSON to `path` atomically (a temporary name beside it, then a rename)."""
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def config_drift(spec: RunSpec) -> list[str]:
    """Trainer settings of a finished run that differ from what ``spec`` would use now ("key: then -> now")."""
    recorded = Path(spec.run_dir) / "run.json"
    if not recorded.is_file():
        return []
    then = _flatten(json.loads(recorded.read_text()).get("train_config", {}))
    now = _flatten(spec.train_config)
    return [
        f"{k}: {then.get(k)!r} -> {now.get(k)!r}"
        for k in sorted(set(then) | set(now))
        if k not in ("output_dir", "progress") and then.get(k) != now.get(k)
    ]


def load_run_result(spec: RunSpec) -> RunResult | None:
    """The finished result of ``spec`` if its done marker exists with the same fingerprint."""
    marker = read_marker(str(Path(spec.run_dir) / _DONE), _RUN_KIND, spec.fingerprint)
    if marker is None:
        return None
    return RunResult(**{**marker.payload, "status": "cached"})


def _with_bpb(
    evals: dict[str, dict[str, float | None]], train_config: dict[str, Any]
) -> dict[str, dict[str, float | None]]:
    """Fill in bits per byte where the trainer left it empty, from the bytes of the evaluated targets."""
    data = train_config["data"]
    out = {}
    for name, vals in evals.items():
        loss, bpb = vals.get("loss"), vals.get("bpb")
        if bpb is None and loss is not None and name in data["eval"]:
            bpt = stores.eval_bytes_per_token(
                data["eval"][name],
                seq_len=data["seq_len"],
                batch_size=train_config.get("eval_batch_size") or data["batch_size"],
                eval_batches=train_config["eval_batches"],
            )
            bpb = float(loss) / math.log(2) / bpt if bpt else None
        out[name] = {"loss": None if loss is None else float(loss), "bpb": None if bpb is None else float(bpb)}
    return out


def execute_run(spec: RunSpec) -> RunResult:
    """Train ``spec`` unless it already finished; resume from its newest checkpoint if it was cut short."""
    done = load_run_result(spec)
    if done is not None:
        return done
    enable_compilation_cache(spec.compilation_cache)
    from zephyr.train.checkpoint import latest_checkpoint
    from zephyr.train.config import config_from_dict
    from zephyr.train.trainer import train

    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(
        run_dir / "run.json",
        {
            "mixture": spec.mixture,
            "seed": spec.seed,
            "fingerprint": spec.fingerprint,
            "train_config": spec.train_config,
        },
    )
    resumed = latest_checkpoint(run_dir / "checkpoints") is not None
    cfg = config_from_dict(spec.train_config)
    start = time.perf_counter()
    result = train(cfg)
    wall = time.perf_counter() - start
    evals = result.eval
    if not evals:
        raise RuntimeError(
            f"run {spec.run_dir} finished without eval results (metrics {result.metrics_path}); "
            "delete its checkpoints/ to retrain it."
        )
    final = RunResult(
        mixture=spec.mixture,
        seed=spec.seed,
        status="resumed" if resumed else "trained",
        steps=int(result.steps),
        final_loss=float(result.final_loss),
        eval=_with_bpb(evals, spec.train_config),
        metrics_path=str(result.metrics_path),
        checkpoint=result.checkpoint,
        wall_s=wall,
        tokens_per_second=float(result.tokens_per_second),
        run_dir=spec.run_dir,
        fingerprint=spec.fingerprint,
        point=spec.point,
    )
    write_marker(str(run_dir / _DONE), _RUN_KIND, spec.fingerprint, asdict(final))  # the done marker, last
    return final


def read_eval_curves(result: RunResult) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``{eval set: {"loss"|"bpb": [(step, value), ...]}}`` from the run's metrics log (last value per step).

    Should a step be logged twice (logs written before the trainer dropped a dead run's records past its
    last checkpoint on resume), the later value wins. Where the log has no
    bits per byte, it is derived from the loss with the final result's bytes per token.
    """
    from zephyr.train.trainer import read_metrics

    by_step: dict[tuple[str, str], dict[int, float]] = {}
    for record in read_metrics(result.metrics_path):
        step = record.get("step")
        if step is None:
            continue
        for key, value in record.items():
            if key.startswith("eval/") and value is not None and key.count("/") == 2:
                _, name, metric = key.split("/")
                if metric in ("loss", "bpb"):
                    by_step.setdefault((name, metric), {})[int(step)] = float(value)
    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for (name, metric), points in sorted(by_step.items()):
        curves.setdefault(name, {})[metric] = sorted(points.items())
    for name, entry in curves.items():
        final = result.eval.get(name, {})
        if "bpb" not in entry and final.get("bpb") and final.get("loss"):
            ratio = float(final["bpb"]) / float(final["loss"])  # bits per byte per nat per token
            entry["bpb"] = [(s, v * ratio) for s, v in entry["loss"]]
    return curves
