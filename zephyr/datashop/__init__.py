"""Datashop: from a prompt to a filtered dataset (LM labels -> classifier -> cascade).

    from zephyr.datashop import load_config, run_datashop
    report = run_datashop(load_config("datashop.yaml"))
    print(report.summary())

Heavy dependencies (torch, transformers, fastText, sentence-transformers, vLLM) are imported only
by the step that needs them.
"""

from zephyr.datashop.config import (
    ClassifierConfig,
    DatashopConfig,
    FilterConfig,
    LabelerConfig,
    PoolConfig,
    PromptConfig,
    StageConfig,
    config_from_dict,
    load_config,
)
from zephyr.datashop.labeling import LabelingRun, LabelResult, label_documents, make_backend
from zephyr.datashop.metrics import Agreement, agreement
from zephyr.datashop.sample import sample_pool, sample_pool_dataset, split_holdout

__all__ = [
    "PromptConfig",
    "LabelerConfig",
    "PoolConfig",
    "ClassifierConfig",
    "FilterConfig",
    "StageConfig",
    "DatashopConfig",
    "load_config",
    "config_from_dict",
    "make_backend",
    "label_documents",
    "LabelResult",
    "LabelingRun",
    "sample_pool",
    "sample_pool_dataset",
    "split_holdout",
    "train_classifier",
    "load_classifier",
    "Agreement",
    "agreement",
    "score_dataset",
    "run_datashop",
    "DatashopReport",
    "StageReport",
]


def __getattr__(name: str):
    # These pull in numpy-heavy modules or the engine; load them on first use.
    if name in ("train_classifier", "load_classifier"):
        from zephyr.datashop import classifiers

        return getattr(classifiers, name)
    if name == "score_dataset":
        from zephyr.datashop.apply import score_dataset

        return score_dataset
    if name in ("run_datashop", "DatashopReport", "StageReport"):
        from zephyr.datashop import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'zephyr.datashop' has no attribute {name!r}")
