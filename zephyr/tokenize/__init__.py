"""Tokenization into memory-mappable token stores, and weighted mixtures for training.

Public API:

* tokenizers: :class:`TokenizerSpec`, :func:`load_tokenizer`, :class:`Tokenizer`, :class:`TokenizerInfo`
* stores: :func:`tokenize_dataset`, :class:`TokenStore` / :func:`open_store`, :func:`verify_store`,
  :func:`inspect_store` (format documented in :mod:`zephyr.tokenize.store`)
* mixtures: :class:`Mixture`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.lazy import lazy_exports

if TYPE_CHECKING:
    from .mixture import Mixture, feistel_permute, largest_remainder_counts
    from .pipeline import (
        TokenizeConfig,
        TokenizeResult,
        is_validation_document,
        tokenize_dataset,
    )
    from .store import TokenStore, open_store
    from .store_check import VerifyReport, inspect_store, verify_store
    from .store_format import token_dtype
    from .tokenizer import Tokenizer, TokenizerInfo, TokenizerSpec, load_tokenizer

__all__ = [
    "TokenizerSpec",
    "TokenizerInfo",
    "Tokenizer",
    "load_tokenizer",
    "TokenizeConfig",
    "TokenizeResult",
    "tokenize_dataset",
    "is_validation_document",
    "TokenStore",
    "open_store",
    "token_dtype",
    "verify_store",
    "VerifyReport",
    "inspect_store",
    "Mixture",
    "largest_remainder_counts",
    "feistel_permute",
]

# The TYPE_CHECKING imports above, imported on first use (zephyr.lazy): one submodule never imports the others.
__getattr__, __dir__ = lazy_exports(__name__)
