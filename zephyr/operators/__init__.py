"""Pipeline operators: WARC reading, HTML extraction, language id, quality rules, PII, exact dedup.

Each operator is a plain function or a frozen-dataclass config with `__call__`, usable directly in
`Dataset.map` / `flat_map` / `map_shard`; decisions are recorded as fields (`lang`, `lang_score`,
`quality_signals`, `filter_reason`, `dup_*`, `pii_counts`) and a later `filter` drops by field:

    from zephyr.operators import warc_dataset, ExtractText, LanguageId, QualityFilter, PiiRedactor, keep

    docs = (warc_dataset("crawl/*.warc.gz")          # one shard per file, documents via ReadWarc
            .map(ExtractText())
            .map_shard(LanguageId(languages=("en",), min_score=0.65).map_shard)
            .map(QualityFilter())
            .map(PiiRedactor())
            .filter(keep))

Fuzzy (MinHash) dedup lives in its own modules (zephyr/operators/minhash*.py, fuzzy_dedup.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports
from zephyr.operators import quality
from zephyr.operators.quality import *

if TYPE_CHECKING:
    from zephyr.operators.charset import decode_html
    from zephyr.operators.exact_dedup import (
        dedup_documents,
        dedup_paragraphs,
        normalize_for_hash,
        text_hash,
    )
    from zephyr.operators.extract import (
        ExtractConfig,
        ExtractedPage,
        ExtractText,
        extract_page,
        html_to_markdown,
        html_to_text,
    )
    from zephyr.operators.langid import LanguageId, detect_language
    from zephyr.operators.pii import PiiRedactor, redact_pii
    from zephyr.operators.warc import ReadWarc, WarcReadConfig, read_warc, warc_dataset

__all__ = [
    "read_warc",
    "warc_dataset",
    "ReadWarc",
    "WarcReadConfig",
    "decode_html",
    "ExtractConfig",
    "ExtractedPage",
    "ExtractText",
    "extract_page",
    "html_to_text",
    "html_to_markdown",
    "LanguageId",
    "detect_language",
    "PiiRedactor",
    "redact_pii",
    "normalize_for_hash",
    "text_hash",
    "dedup_documents",
    "dedup_paragraphs",
    "keep",
]
__all__ += quality.__all__


def keep(doc: dict) -> bool:
    """Filter predicate: True for documents no operator marked with a `filter_reason`."""
    return not doc.get("filter_reason")


# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): one submodule never imports the
# others (but the light quality rules, imported with the package and offered as `zephyr.operators.quality.__all__`
# lists them).
__getattr__, __dir__ = lazy_exports(__name__)
