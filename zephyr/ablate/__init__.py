"""Mixture ablations: train small models on candidate mixtures and compare them honestly.

Declare a baseline mixture, candidates, seeds, a model and a token budget, and
shared eval sets (:mod:`zephyr.ablate.config`); every (mixture, seed) run is
trained with :mod:`zephyr.train` locally or as Ray tasks, finished runs are
skipped and cut ones resumed (:mod:`zephyr.ablate.runner`); the report gives
loss and bits per byte per eval set over seeds, paired differences against the
baseline with t intervals, and a verdict per candidate
(:mod:`zephyr.ablate.report`). Negative controls and matched exposure use
derived stores (:mod:`zephyr.ablate.stores`).

Example::

    from zephyr.ablate import load_ablation_config, run_ablation
    outcome = run_ablation(load_ablation_config("ablation.yaml"))
    print(outcome.report.verdict("prose_heavy").difference.verdict)   # "better" / "worse" / "inconclusive"
"""

from .ablation import AblationOutcome, run_ablation
from .config import (
    MODEL_PRESETS,
    AblationConfig,
    Component,
    ExposureSpec,
    MixtureSpec,
    TrainSettings,
    ablation_config_from_dict,
    load_ablation_config,
    mixture_with_fraction,
)
from .report import (
    CandidateVerdict,
    Report,
    ReportRow,
    build_report,
    format_report,
    plot_report,
    write_report,
)
from .runner import AblationPlan, RunResult, RunSpec, execute_run, plan_ablation
from .stats import PairedDifference, Spread, paired_difference, spread, t_critical
from .stores import (
    ExposureCap,
    eval_bytes_per_token,
    exposure_cap,
    store_summary,
    write_capped_store,
    write_shuffled_store,
)

__all__ = [
    "AblationConfig",
    "Component",
    "MixtureSpec",
    "ExposureSpec",
    "TrainSettings",
    "MODEL_PRESETS",
    "ablation_config_from_dict",
    "load_ablation_config",
    "mixture_with_fraction",
    "AblationPlan",
    "AblationOutcome",
    "RunSpec",
    "RunResult",
    "plan_ablation",
    "execute_run",
    "run_ablation",
    "Report",
    "ReportRow",
    "CandidateVerdict",
    "build_report",
    "format_report",
    "write_report",
    "plot_report",
    "Spread",
    "PairedDifference",
    "spread",
    "paired_difference",
    "t_critical",
    "ExposureCap",
    "exposure_cap",
    "store_summary",
    "write_shuffled_store",
    "write_capped_store",
    "eval_bytes_per_token",
]
