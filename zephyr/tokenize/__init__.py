"""Tokenization into memory-mappable token stores, and weighted mixtures for training.

Public API:

* tokenizers: :class:`TokenizerSpec`, :func:`load_tokenizer`, :class:`Tokenizer`, :class:`TokenizerInfo`
* stores: :func:`tokenize_dataset`, :class:`TokenStore` / :func:`open_store`, :func:`verify_store`,
  :func:`inspect_store` (format documented in :mod:`zephyr.tokenize.store`)
* mixtures: :class:`Mixture`
"""

from .mixture import Mixture, feistel_permute, largest_remainder_counts
from .pipeline import TokenizeConfig, TokenizeResult, is_validation_document, tokenize_dataset
from .store import TokenStore, VerifyReport, inspect_store, open_store, token_dtype, verify_store
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
