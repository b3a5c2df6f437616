"""`zephyr export megatron STORE OUT` and `zephyr export hf CHECKPOINT OUT`: formats other tools read."""

from __future__ import annotations

import argparse
import sys

from zephyr.commands import add_command

__all__ = ["add_cli"]

# `zephyr export` runs nothing itself (its kinds do), so its help is here rather than in a function's docstring
_HELP = """export a token store (Megatron .bin/.idx) or a trained model (Hugging Face)

Write Zephyr outputs in formats other tools read: `zephyr export megatron STORE OUT` and
`zephyr export hf CHECKPOINT OUT`.

examples:
  zephyr export megatron stores/web out/web_text_document       # writes .bin and .idx
  zephyr export hf runs/tiny out/tiny-hf                         # a transformers Llama directory
"""


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Register `zephyr export megatron STORE OUT` and `zephyr export hf RUN OUT`."""
    parser = add_command(subparsers, "export", None, doc=_HELP)
    kinds = parser.add_subparsers(dest="export_kind", metavar="KIND", required=True)
    megatron = add_command(kinds, "megatron", _run_megatron)
    megatron.add_argument("store", metavar="STORE", help="token store directory or bucket URL")
    megatron.add_argument("out", metavar="OUT", help="output prefix: OUT.bin and OUT.idx are written")
    megatron.add_argument(
        "--split", choices=("train", "validation"), default="train", help="which split of the store to export"
    )
    hf = add_command(kinds, "hf", _run_hf)
    hf.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="a training output_dir (its newest checkpoint), a checkpoints/ folder or a step_* folder",
    )
    hf.add_argument("out", metavar="OUT", help="output directory")


def _run_megatron(args: argparse.Namespace) -> int:
    """a token store as Megatron-LM's indexed dataset (OUT.bin + OUT.idx)

    Write STORE as OUT.bin and OUT.idx, the MMapIndexedDataset pair Megatron-LM, NeMo and GPT-NeoX read
    (one document per sequence; uint16 ids, or int32 above 65535 tokens).

    examples:
      zephyr export megatron stores/web out/web_text_document
      zephyr export megatron stores/web out/web_val --split validation
    """
    from zephyr.tokenize.export import export_megatron

    try:
        result = export_megatron(args.store, args.out, split=args.split)
    except (FileNotFoundError, ValueError) as error:
        print(f"zephyr export megatron: error: {error}", file=sys.stderr)
        return 1
    print(
        f"wrote {result.bin_path} and {result.idx_path}: {result.documents:,} documents, {result.tokens:,} "
        f"tokens ({result.dtype})"
    )
    return 0


def _run_hf(args: argparse.Namespace) -> int:
    """a trained checkpoint as a Hugging Face Llama directory

    Write config.json + model.safetensors that transformers' LlamaForCausalLM loads, and the tokenizer that
    made the training data (tokenizer.json, tokenizer_config.json) for AutoTokenizer.

    examples:
      zephyr export hf runs/tiny out/tiny-hf
      zephyr export hf runs/tiny/checkpoints/step_00000100 out/tiny-hf-100
    """
    from zephyr.tokenize.export import export_tokenizer_hf
    from zephyr.train.export import export_checkpoint_hf, resolve_checkpoint

    try:
        out = export_checkpoint_hf(args.checkpoint, args.out)
        stores = _training_stores(resolve_checkpoint(args.checkpoint))
        tokenizer_files = export_tokenizer_hf(stores, out)
    except (FileNotFoundError, ValueError) as error:
        print(f"zephyr export hf: error: {error}", file=sys.stderr)
        return 1
    names = ", ".join(p.name for p in tokenizer_files)
    print(
        f"wrote {out}/config.json, model.safetensors and the tokenizer of its training data ({names}): load with "
        "AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained"
    )
    return 0


def _training_stores(checkpoint) -> list[str]:
    """The token stores a checkpoint was trained on, from the training config in its metadata.json."""
    import json

    config = json.loads((checkpoint / "metadata.json").read_text()).get("config") or {}
    train = (config.get("data") or {}).get("train") or {}
    stores = [entry[0] for entry in train.values() if isinstance(entry, list | tuple) and entry]
    if not stores:
        raise ValueError(
            f"{checkpoint}/metadata.json names no training token stores (data.train), so the tokenizer that made "
            "the model's ids is unknown; export it with zephyr.tokenize.export.export_tokenizer_hf(STORES, OUT)"
        )
    return stores
