"""Real text that is always available offline, for demos and tests of ablations without a data download.

* :func:`package_readmes`: the long descriptions (README files) of the
  installed Python distributions, code blocks removed: English prose with some markup.
* :func:`python_sources`: the standard library's ``*.py`` files, cut into
  chunks at blank lines: code.
* :func:`news_articles`: the hand-cleaned article bodies of the
  article-extraction benchmark in ``../shared/data/aeb-dev`` when present.

Also :func:`train_bpe_tokenizer`, a small byte-level BPE trained with Hugging
Face ``tokenizers`` on such text. CPU ablations use it because the output layer
of a 49k-token vocabulary costs a tiny model far more than everything else.
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import re
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["package_readmes", "python_sources", "news_articles", "write_jsonl", "train_bpe_tokenizer", "take_chars"]

_DOC_TOKEN = "<|endoftext|>"


def take_chars(documents: Iterable[dict], max_chars: int) -> list[dict]:
    """Documents in order until their texts hold ``max_chars`` characters (the last one included whole)."""
    out, total = [], 0
    for doc in documents:
        if total >= max_chars:
            break
        out.append(doc)
        total += len(doc["text"])
    return out


def package_readmes(*, min_chars: int = 1000, prose_only: bool = True) -> list[dict]:
    """README texts of the installed distributions, sorted by name (one document each).

    With ``prose_only`` (the default), code is dropped so the text is prose: fenced
    blocks, indented blocks, interpreter and shell lines.
    """
    docs, seen = [], set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        text = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        if prose_only:
            text = _strip_code(text)
        if not name or name.lower() in seen or len(text) < min_chars:
            continue
        seen.add(name.lower())
        docs.append({"id": f"readme/{name.lower()}", "text": text.strip(), "source": "package-readme", "metadata": {}})
    return sorted(docs, key=lambda d: d["id"])


def _strip_code(text: str) -> str:
    kept, fenced = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")) or stripped.startswith((">>>", "...", "$ ", "pip install", "<")):
            continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept))


def python_sources(*, chunk_chars: int = 3000) -> list[dict]:
    """The standard library's top-level modules, cut at blank lines into pieces of about ``chunk_chars``."""
    docs = []
    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))):
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        pieces, current = [], ""
        for part in text.split("\n\n"):
            if current and len(current) + len(part) > chunk_chars:
                pieces.append(current)
                current = ""
            current += ("\n\n" if current else "") + part
        if current.strip():
            pieces.append(current)
        name = Path(path).stem
        docs.extend(
            {"id": f"stdlib/{name}/{i}", "text": p.strip(), "source": "python-stdlib", "metadata": {}}
            for i, p in enumerate(pieces)
            if p.strip()
        )
    return docs


def news_articles(shared_data: str | os.PathLike[str]) -> list[dict]:
    """English news and blog article bodies from ``shared_data/aeb-dev/ground-truth.json``."""
    truth = json.loads((Path(shared_data) / "aeb-dev" / "ground-truth.json").read_text(encoding="utf-8"))
    return [
        {"id": f"aeb/{key}", "text": value["articleBody"].strip(), "source": "aeb-dev", "metadata": {}}
        for key, value in sorted(truth.items())
        if value.get("articleBody", "").strip()
    ]


def write_jsonl(documents: Sequence[dict], path: str | os.PathLike[str]) -> str:
    """Write documents as JSON lines (the engine reads ``.jsonl`` as one shard)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return str(path)


def train_bpe_tokenizer(texts: Iterable[str], path: str | os.PathLike[str], *, vocab_size: int = 1024) -> str:
    """Train a byte-level BPE (GPT-2 pre-tokenizer, ``<|endoftext|>`` as document token) and save it.

    Returns the path of the written ``tokenizer.json``; load it with
    ``zephyr.tokenize.load_tokenizer(path)``. Deterministic for the same texts.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[_DOC_TOKEN],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(list(texts), trainer)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return str(path)
