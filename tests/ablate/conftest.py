"""Two small real-text token stores (prose and Python code) with a small real BPE tokenizer, built once.

Prose is the hand-cleaned news articles of ../shared/data/aeb-dev when that
folder exists, else the README texts of the installed packages; code is the
standard library's Python sources. Both are real text available offline. The
tokenizer is a 1024-entry byte-level BPE trained on them with Hugging Face
``tokenizers``: a tiny model's cost would otherwise be all in a 49k output layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from zephyr import execution
from zephyr.ablate.sample_text import (
    news_articles,
    package_readmes,
    python_sources,
    take_chars,
    train_bpe_tokenizer,
    write_jsonl,
)
from zephyr.tokenize import tokenize_dataset

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@dataclass(frozen=True)
class Stores:
    root: Path
    prose: str
    code: str
    prose_source: str  # "aeb-dev news" or "package READMEs"
    tokenizer: str


@pytest.fixture(scope="session")
def ablation_stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    root = tmp_path_factory.mktemp("ablation-stores")
    if (SHARED_DATA / "aeb-dev" / "ground-truth.json").is_file():
        prose, prose_source = take_chars(news_articles(SHARED_DATA), 300_000), "aeb-dev news"
    else:
        prose, prose_source = take_chars(package_readmes(), 300_000), "package READMEs"
    code = take_chars(python_sources(), 300_000)
    write_jsonl(prose, root / "text" / "prose.jsonl")
    write_jsonl(code, root / "text" / "code.jsonl")
    tokenizer = train_bpe_tokenizer(
        [d["text"] for d in prose + code], root / "tokenizer" / "tokenizer.json", vocab_size=1024
    )
    with execution(backend="local", summary=False):
        for name in ("prose", "code"):
            tokenize_dataset(
                str(root / "text" / f"{name}.jsonl"), str(root / name), tokenizer=tokenizer, validation_fraction=0.15
            )
    return Stores(root, str(root / "prose"), str(root / "code"), prose_source, tokenizer)
