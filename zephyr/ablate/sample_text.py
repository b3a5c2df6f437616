"""Real text that is always available offline, for demos and tests of ablations without a data download.

* :func:`package_readmes`: the long descriptions (README files) of the
  installed Python distributions, code blocks removed: English prose with some markup.
* :func:`python_sources`: the standard library's ``*.py`` files, cut into
  chunks at blank lines: code (``packages=True``: its subpackages and the installed
  packages' sources too, hundreds of MB).
* :func:`python_docstrings`: the docstrings of those same modules, one document per
  module: English technical prose, far more of it than the READMEs hold.
* :func:`python_reference`: the Python language reference's topics that ``pydoc`` ships.
* :func:`news_articles`: the hand-cleaned article bodies of the
  article-extraction benchmark in ``../shared/data/aeb-dev`` when present.

Also :func:`train_bpe_tokenizer`, a small byte-level BPE trained with Hugging
Face ``tokenizers`` on such text. CPU ablations use it because the output layer
of a 49k-token vocabulary costs a tiny model far more than everything else.
:func:`write_sample_stores` puts it together: a prose store and a code store, tokenized,
with validation splits (what ``recipes/mixture_ablation.py`` and ``benchmarks/scaling_ladder.py`` train on).
"""

from __future__ import annotations

import ast
import importlib.metadata
import itertools
import json
import os
import re
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

__all__ = [
    "package_readmes",
    "python_sources",
    "python_docstrings",
    "python_reference",
    "news_articles",
    "write_jsonl",
    "train_bpe_tokenizer",
    "take_chars",
    "prose_documents",
    "code_documents",
    "write_sample_stores",
]

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


def _python_files(packages: bool) -> Iterator[Path]:
    """The standard library's top-level modules (sorted); with ``packages``, then its subpackages, then
    the installed packages' modules (site-packages), each group sorted, tests and vendored copies skipped."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    yield from sorted(stdlib.glob("*.py"))
    if not packages:
        return
    roots = [p for p in sorted(stdlib.iterdir()) if p.is_dir() and p.name not in ("site-packages", "test", "idlelib")]
    purelib = Path(sysconfig.get_paths()["purelib"])
    roots += [p for p in sorted(purelib.iterdir()) if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = set(path.relative_to(root).parts[:-1])
            if not parts & {"tests", "test", "_vendor", "vendor", "__pycache__"}:
                yield path


def python_sources(*, chunk_chars: int = 3000, packages: bool = False) -> Iterator[dict]:
    """Python modules cut at blank lines into pieces of about ``chunk_chars`` (lazily, in a fixed order).

    The standard library's top-level modules; with ``packages``, then its subpackages and the installed
    packages' sources (take what you need with `take_chars`).
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in _python_files(packages):
        text = path.read_text(encoding="utf-8", errors="replace")
        pieces, current = [], ""
        for part in text.split("\n\n"):
            if current and len(current) + len(part) > chunk_chars:
                pieces.append(current)
                current = ""
            current += ("\n\n" if current else "") + part
        if current.strip():
            pieces.append(current)
        top = path.parent == stdlib
        name = f"stdlib/{path.stem}" if top else "python/" + "/".join(path.with_suffix("").parts[-3:])
        source = "python-stdlib" if top else "python-source"
        for i, p in enumerate(pieces):
            if p.strip():
                yield {"id": f"{name}/{i}", "text": p.strip(), "source": source, "metadata": {}}


def python_docstrings(*, min_chars: int = 200) -> Iterator[dict]:
    """The docstrings of the standard library's and installed packages' modules, one document per module.

    Each module's docstrings (module, classes, functions, in source order) of at least ``min_chars``
    characters, separated by blank lines, with doctest and indented code lines removed: English
    technical prose. Modules that do not parse are skipped.
    """
    for path in _python_files(packages=True):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        parts = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    parts.append(_strip_code(doc).strip())
        text = "\n\n".join(p for p in parts if p)
        if len(text) >= min_chars:
            name = "/".join(path.with_suffix("").parts[-3:])
            yield {"id": f"docstrings/{name}", "text": text, "source": "python-docstrings", "metadata": {}}


def python_reference() -> list[dict]:
    """The language reference topics ``pydoc`` ships (``pydoc_data.topics``), one document per topic."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions leave pydoc_data out
        return []
    return [
        {"id": f"pydoc/{name}", "text": text.strip(), "source": "python-reference", "metadata": {}}
        for name, text in sorted(topics.items())
        if len(text.strip()) >= 200
    ]


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


def prose_documents(
    chars: int, *, shared_data: str | os.PathLike[str] | None = None, extended: bool = False
) -> list[dict]:
    """Up to about ``chars`` characters of English prose: the aeb-dev news articles when ``shared_data`` holds
    them, else the installed packages' READMEs. ``extended`` goes on past those (news, READMEs, the Python
    language reference, then docstrings) until ``chars`` are reached: millions of characters, for ladders."""
    news = shared_data is not None and (Path(shared_data) / "aeb-dev" / "ground-truth.json").is_file()
    if not extended:
        return take_chars(news_articles(shared_data) if news and shared_data else package_readmes(), chars)
    sources: list[Iterable[dict]] = [news_articles(shared_data)] if news and shared_data else []
    sources += [package_readmes(), python_reference(), python_docstrings()]
    return take_chars(itertools.chain.from_iterable(sources), chars)


def code_documents(chars: int, *, extended: bool = False) -> list[dict]:
    """About ``chars`` characters of Python: the standard library's top-level modules; ``extended``, then its
    subpackages and the installed packages' sources."""
    return take_chars(python_sources(packages=extended), chars)


def write_sample_stores(
    root: str | os.PathLike[str],
    *,
    chars: int = 300_000,
    tokenizer: str = "small",
    vocab_size: int = 1024,
    tokenizer_chars: int = 2_000_000,
    validation_fraction: float = 0.15,
    shared_data: str | os.PathLike[str] | None = None,
    extended: bool = False,
) -> dict[str, str]:
    """Tokenize about ``chars`` characters each of prose and code into ``root/stores/{prose,code}``.

    ``extended`` draws on every source (`prose_documents`, `code_documents`) for more text than the
    news articles, READMEs and top-level standard library hold: what a ladder's larger runs need.

    ``tokenizer="small"`` trains a ``vocab_size`` byte-level BPE on the first ``tokenizer_chars``
    characters (half prose, half code) and saves it under ``root/tokenizer``; any other value is a
    tokenizer source (``smollm2``, a path). Each store keeps a ``validation_fraction`` of its
    documents in ``validation/``. Runs under the current ``zephyr.execution`` settings; a store
    already written with the same text and settings is reused by the tokenizer's own resume.
    Returns ``{"prose": path, "code": path}``.
    """
    from zephyr.tokenize import tokenize_dataset

    root = Path(root)
    texts = {
        "prose": prose_documents(chars, shared_data=shared_data, extended=extended),
        "code": code_documents(chars, extended=extended),
    }
    for name, docs in texts.items():
        write_jsonl(docs, root / "text" / f"{name}.jsonl")
    if tokenizer == "small":
        sample = [d["text"] for docs in texts.values() for d in take_chars(docs, tokenizer_chars // 2)]
        tokenizer = train_bpe_tokenizer(sample, root / "tokenizer" / "tokenizer.json", vocab_size=vocab_size)
    stores = {}
    for name in texts:
        out = root / "stores" / name
        tokenize_dataset(
            str(root / "text" / f"{name}.jsonl"),
            str(out),
            tokenizer=tokenizer,
            validation_fraction=validation_fraction,
        )
        stores[name] = str(out)
    return stores
