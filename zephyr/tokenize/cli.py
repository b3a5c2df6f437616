"""``zephyr tokenize``, ``zephyr inspect`` and ``zephyr verify``: registered by :func:`add_cli`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from zephyr.commands import add_command
from zephyr.engine.options import add_engine_options, add_on_bad_record_option, engine_overrides

__all__ = ["add_cli"]

# zephyr.tokenize.tokenizer.ENGINES, written out so that building the CLI imports no tokenizer code
# (tests/tokenize/test_tokenizer.py checks the two agree)
ENGINES = ("auto", "native", "tiktoken", "tokenizers")


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Register the token-store subcommands on the ``zephyr`` argparse parser."""
    p = add_command(subparsers, "tokenize", _run_tokenize)
    p.add_argument("input_glob", nargs="+", metavar="INPUT_GLOB", help="input file glob(s)")
    p.add_argument("output", metavar="OUTPUT", help="token store: a directory or a bucket URL (gs://, s3://)")
    p.add_argument(
        "--tokenizer",
        default="smollm2",
        help="'smollm2' (offline default), a tokenizer.json / directory / .gguf path, or a hub name",
    )
    p.add_argument(
        "--validation-fraction",
        type=float,
        default=0.0,
        help="send this fraction of documents (by id hash) to OUTPUT/validation",
    )
    p.add_argument("--text-field", default="text", help="the field holding each document's text")
    p.add_argument("--id-field", default="id", help="the field holding each document's id")
    p.add_argument("--add-bos", action="store_true", help="prepend BOS to every document")
    p.add_argument("--no-eos", action="store_true", help="do not append EOS (the document separator)")
    p.add_argument(
        "--parse-special",
        action="store_true",
        help="turn special-token strings in the text into special ids (default: plain text)",
    )
    p.add_argument(
        "--encoder",
        choices=ENGINES,
        default="auto",
        help="BPE encoder: auto = the first of native, tiktoken verified identical to tokenizers",
    )
    p.add_argument("--engine", dest="encoder", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--no-resume", action="store_true", help="rewrite shards even when complete")
    add_on_bad_record_option(p)
    add_engine_options(p)

    p = _store_command(subparsers, "inspect", _run_inspect)
    p.add_argument("--samples", type=int, default=3, help="documents to decode and show")
    p.add_argument("--max-chars", type=int, default=400, help="characters shown per sample")
    p.add_argument("--no-decode", action="store_true", help="show ids instead of loading the tokenizer")

    p = _store_command(subparsers, "verify", _run_verify)
    p.add_argument("--no-ids", action="store_true", help="skip the scan of every id against vocab_size")


def _store_command(
    subparsers: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """A subcommand that reads one token store, named by its STORE argument."""
    parser = add_command(subparsers, name, run)
    parser.add_argument("store", metavar="STORE", help="token store directory or bucket URL")
    return parser


def _run_tokenize(args: argparse.Namespace) -> int:
    """tokenize document files into a token store

    Tokenize INPUT_GLOB (jsonl[.gz|.zst], parquet, vortex; one store shard per file) into the token store
    OUTPUT. Reruns skip completed shards.

    examples:
      zephyr tokenize 'data/*.jsonl.zst' stores/web
      zephyr tokenize 'gs://bucket/docs/*.parquet' gs://bucket/stores/web --validation-fraction 0.01 --backend ray
      zephyr tokenize 'data/*.jsonl' stores/web --tokenizer path/to/tokenizer.json --encoder tokenizers
    """
    from zephyr.engine.context import execution
    from zephyr.errors import RefusedError, StorageError, ZephyrError

    from .pipeline import tokenize_dataset
    from .tokenizer import TokenizerSpec

    overrides = engine_overrides(args)
    spec = TokenizerSpec(source=args.tokenizer, parse_special=args.parse_special, engine=args.encoder)
    started = time.perf_counter()
    try:
        with execution(**overrides):
            result = tokenize_dataset(
                args.input_glob,
                args.output,
                tokenizer=spec,
                text_field=args.text_field,
                id_field=args.id_field,
                add_bos=args.add_bos,
                add_eos=not args.no_eos,
                validation_fraction=args.validation_fraction,
                resume=not args.no_resume,
                on_bad_record=args.on_bad_record,
            )
    except (StorageError, RefusedError) as exc:  # the machine's or a bucket's, not the command line's: exit 1
        print(f"zephyr tokenize: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError, ZephyrError) as exc:
        print(f"zephyr tokenize: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    m = result.manifest
    line = (
        f"wrote {result.output}: {m['documents']:,} documents, {m['tokens']:,} tokens, {len(m['shards'])} shards "
        f"({result.shards_written} written, {result.shards_reused} reused) in {seconds:.1f}s"
    )
    if result.validation_manifest:
        v = result.validation_manifest
        line += f"; validation {v['documents']:,} documents, {v['tokens']:,} tokens"
    print(line)
    return 0


def _run_inspect(args: argparse.Namespace) -> int:
    """summarise a token store

    Print counts, a document-length histogram and decoded samples. A bucket store is read by byte ranges
    (its offsets and the sampled documents), not copied.

    examples:
      zephyr inspect stores/web
      zephyr inspect stores/web --samples 5 --max-chars 200
    """
    from .store_check import inspect_store

    try:
        print(inspect_store(args.store, samples=args.samples, max_chars=args.max_chars, decode=not args.no_decode))
    except (FileNotFoundError, ValueError) as exc:
        print(f"zephyr inspect: {exc}", file=sys.stderr)
        return 2
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    """check a token store's files against its manifest

    Check offsets, counts, file sizes, digests (every 512-byte chunk too) and id range; exit 1 on any
    problem. A bucket store is streamed once where it is, not copied.

    examples:
      zephyr verify stores/web
      zephyr verify gs://bucket/stores/web --no-ids
    """
    from .store_check import verify_store

    report = verify_store(args.store, check_ids=not args.no_ids)
    if report.ok:
        print(f"OK {report.path}: {report.documents:,} documents, {report.tokens:,} tokens")
        return 0
    print(f"FAILED {report.path}: {len(report.problems)} problem(s)")
    for problem in report.problems:
        print(f"  - {problem}")
    print(json.dumps({"ok": False, "problems": list(report.problems)}), file=sys.stderr)
    return 1
