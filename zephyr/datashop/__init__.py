"""Datashop: from a prompt to a filtered dataset (LM labels -> classifier -> cascade).

    from zephyr.datashop import load_config, run_datashop
    report = run_datashop(load_config("datashop.yaml"))
    print(report.summary())

Heavy dependencies (torch, transformers, fastText, sentence-transformers, vLLM) are imported only
by the step that needs them. The config (`zephyr.datashop.config`, plain dataclasses) is imported with the
package and offered as that module lists it (``__all__ += config.__all__``); the rest on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.datashop import config
from zephyr.datashop.config import *
from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
    from zephyr.datashop.apply import score_dataset
    from zephyr.datashop.classifiers import load_classifier, train_classifier
    from zephyr.datashop.label_stage import label_on_engine, label_resources
    from zephyr.datashop.labeling import (
        LabelingRun,
        LabelResult,
        label_documents,
        make_backend,
    )
    from zephyr.datashop.metrics import Agreement, agreement
    from zephyr.datashop.pipeline import DatashopReport, StageReport, run_datashop
    from zephyr.datashop.sample import sample_pool, sample_pool_dataset, split_holdout

__all__ = [
    "make_backend",
    "label_documents",
    "label_on_engine",
    "label_resources",
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
__all__ += config.__all__

# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): one submodule never imports the others.
__getattr__, __dir__ = lazy_exports(__name__)
