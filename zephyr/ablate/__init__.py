"""Mixture ablations: train small models on candidate mixtures and compare them honestly.

Declare a baseline mixture, candidates, seeds, a model and a token budget, and
shared eval sets (:mod:`zephyr.ablate.config`); every (mixture, seed) run is
trained with :mod:`zephyr.train` locally or as Ray tasks, finished runs are
skipped and cut ones resumed (:mod:`zephyr.ablate.runner`); the report gives
loss and bits per byte per eval set over seeds, paired differences against the
baseline with t intervals, and a verdict per candidate
(:mod:`zephyr.ablate.report`). Negative controls and matched exposure use
derived stores (:mod:`zephyr.ablate.stores`). A scaling ladder (``ladder:``,
:mod:`zephyr.ablate.ladder_spec`) trains every mixture at several sizes with one
recipe, fits a law per mixture and predicts its loss and the ranking at a larger
target (:mod:`zephyr.ablate.ladder`, :mod:`zephyr.ablate.ladder_fit`,
:mod:`zephyr.ablate.scaling_law`, :mod:`zephyr.ablate.ladder_report`).

Example::

    from zephyr.ablate import load_ablation_config, run_ablation
    outcome = run_ablation(load_ablation_config("ablation.yaml"))
    print(outcome.report.verdict("prose_heavy").difference.verdict)   # "better" / "worse" / "inconclusive"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
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
    from .ladder import LadderPoint
    from .ladder_fit import LadderReport, build_ladder_report
    from .ladder_report import format_ladder_report, write_ladder_report
    from .ladder_spec import IsoflopSpec, LadderSpec, TransferSpec
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
    "LadderSpec",
    "IsoflopSpec",
    "TransferSpec",
    "LadderPoint",
    "LadderReport",
    "build_ladder_report",
    "format_ladder_report",
    "write_ladder_report",
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

# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): one submodule never imports the others.
__getattr__, __dir__ = lazy_exports(__name__)
