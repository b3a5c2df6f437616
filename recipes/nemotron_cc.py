"""Nemotron-CC: normalize -> exact dedup -> fuzzy dedup -> tokenize each quality split -> mixture -> train.

    zephyr run recipes/nemotron_cc.py                         # the embedded sample, end to end
    zephyr run --backend ray --scratch gs://bucket/scratch recipes/nemotron_cc.py \\
        --input 'gs://bucket/nemotron-cc/**/*.jsonl.zst' --output /mnt/out/nemotron --no-train

Input: Nemotron-CC's `.jsonl.zst` files (`text`, `warc_record_id`, metadata), either under one directory
per split (`<input>/<split>/*.jsonl.zst`) or as published (`quality=high/kind=actual/...`): the split of
a file is read from its path. Without `--input`, an embedded sample is generated on first use (no download;
see recipes/nemotron_sample.py) with exact and near duplicates planted.

Every step's output lives under `<output>/<step>-<version>`, the version a hash of the step's code, config
and inputs: a rerun skips finished steps, a changed step reruns only what depends on it. Token stores are
local directories (memory-mapped by the trainer), so `--output` must be a local or mounted path; inputs
and intermediate documents can be on any filesystem Zephyr reads (gs://, s3://, through the region guard).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zephyr import Dataset, counters
from zephyr.cli import ZephyrArgumentParser
from zephyr.engine.context import current_config
from zephyr.engine.options import add_on_bad_record_option, positive_int
from zephyr.engine.run.pending import pending_producer
from zephyr.errors import BadInputError
from zephyr.fs import expand_glob, join, url_to_fs
from zephyr.operators import dedup_documents
from zephyr.operators.fuzzy_dedup import (
    FuzzyDedupConfig,
    annotate_clusters,
    find_duplicate_clusters,
)
from zephyr.operators.lineage import LINEAGE_DIR, drop_removed
from zephyr.steps import StepOutput, StepRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nemotron_sample import SPLITS, build_sample  # noqa: E402

SPLIT_RANK = {name: rank for rank, name in enumerate(SPLITS)}  # lower rank: higher quality, kept on ties


# ------------------------------------------------------------------------------------------ steps
@dataclass(frozen=True)
class Normalize:
    """A Nemotron-CC record -> a Zephyr document {id, text, source, split, metadata}.

    Records are checked here, where they enter, not in a later step that reads an intermediate file: one
    without an id (a non-empty string or an integer in `id_field`; by default Nemotron-CC's `warc_record_id`,
    else `id`) is bad input naming its file and record, unless `skip_bad` (--on-bad-record skip) drops and
    counts it; text that is empty or not a string is dropped and counted by what it was.

    Text longer than `max_chars` (--max-document-chars) is cut at the last space before it and counted
    (normalize/documents_capped, normalize/chars_cut), as MinHash caps its shingles: every later step holds
    a document whole, several times over. One 175 MB document against --memory-per-worker 1GB, before the
    cap: exact dedup's worker peaked at 1.38 GB, fuzzy dedup's at 3.12 GB, tokenize's at 1.79 GB."""

    split: str
    id_field: str | None = None  # None: warc_record_id, else id
    skip_bad: bool = False
    max_chars: int = 1_000_000

    def __call__(self, record: dict) -> dict:
        text = record.get("text")
        if not isinstance(text, str) and text is not None:
            return _dropped("text_not_a_string")
        if not text or text.isspace():  # (not strip(): a copy of the whole text)
            return _dropped("text_empty")
        if len(text) > self.max_chars:
            text = _capped(text, self.max_chars)
        fields = (self.id_field,) if self.id_field else ("warc_record_id", "id")
        id_field = next((f for f in fields if _is_id(record.get(f))), None)
        if id_field is None:
            if self.skip_bad:
                return _dropped("no_id")
            found = {f: type(record[f]).__name__ for f in fields if f in record}
            raise BadInputError(
                f"a record needs an id, a non-empty string or an integer in {' or '.join(map(repr, fields))}"
                + (f" (it has {found})" if found else "")
                + f"; its fields are {sorted(record)[:12]}. Fix: --id-field FIELD names the field your records "
                "keep their id in, or --on-bad-record skip drops such records (counted as normalize/dropped_no_id)"
            )
        metadata = dict(record.get("metadata") or {})
        metadata.update({k: v for k, v in record.items() if k not in ("text", id_field, "metadata")})
        return {
            "id": record[id_field],
            "text": text.replace("\r\n", "\n").strip(),
            "source": f"nemotron_cc/{self.split}",
            "split": self.split,
            "metadata": metadata,
        }


def _capped(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, at the last whitespace in its final tenth if there is one."""
    head = text[:max_chars]
    cut = max(head.rfind(" "), head.rfind("\n"))
    head = head[:cut] if cut > max_chars * 0.9 else head
    counters.increment("normalize/documents_capped")
    counters.increment("normalize/chars_cut", len(text) - len(head))
    return head


def _is_id(value: Any) -> bool:
    return (isinstance(value, str) and value != "") or (isinstance(value, int) and not isinstance(value, bool))


def _dropped(reason: str) -> dict:
    counters.increment(f"normalize/dropped_{reason}")
    return {}


def split_of(path: str) -> str:
    """The quality split of a Nemotron-CC file from its path (`quality=high/kind=actual` or `<split>/`)."""
    quality = re.search(r"quality=([a-z-]+)", path)
    if quality:
        kind = re.search(r"kind=([a-z]+)", path)
        name = quality.group(1).replace("-", "_")
        if name in ("high", "low"):
            name += "_" + (kind.group(1) if kind else "actual")
        return name
    parent = path.rstrip("/").split("/")[-2]
    return parent.replace("-", "_")


def _non_empty(doc: dict) -> bool:
    return bool(doc)


def _quality_order(doc: dict) -> tuple[int, str]:
    return SPLIT_RANK.get(doc["split"], len(SPLIT_RANK)), doc["id"]


def normalize(path: str, *, config: dict, inputs: list[str]) -> dict:
    normalizer = dict(id_field=config["id_field"], skip_bad=config["skip_bad"], max_chars=config["max_chars"])
    files_by_split: dict[str, list[str]] = {}
    for pattern in inputs:
        if pending_producer(pattern) is not None:  # a dry run: the sample is not built, plan one split for all
            files_by_split.setdefault("<split>", []).append(pattern)
            continue
        for file in expand_glob(pattern):
            files_by_split.setdefault(split_of(file), []).append(file)
    summary: dict[str, Any] = {"documents_in": 0, "documents_out": 0, "splits": {}, "dropped": {}, "capped": 0}
    for split, files in sorted(files_by_split.items()):
        run = (
            Dataset.from_files(sorted(files))
            .map(Normalize(split, **normalizer))
            .filter(_non_empty)
            .write(join(path, split, "part-{shard:05d}.jsonl.zst"))
            .execute()
        )
        summary["documents_in"] += run.stages[0].records_in
        summary["documents_out"] += run.stages[0].records_out
        summary["splits"][split] = run.stages[0].records_out
        summary["capped"] += run.counters.get("normalize/documents_capped", 0)
        for name, n in run.counters.items():
            if name.startswith("normalize/dropped_"):
                reason = name.removeprefix("normalize/dropped_")
                summary["dropped"][reason] = summary["dropped"].get(reason, 0) + n
    return summary


def exact_dedup(path: str, *, config: dict, docs: str) -> dict:
    # keep the copy from the highest-quality split (then the smallest id): deterministic; removed copies'
    # ids, reason and the id kept for each go to <path>/_removed (lineage, read by `zephyr ui`)
    marked = dedup_documents(
        Dataset.from_files(join(docs, "*", "*.jsonl.zst")), order_key=_quality_order, num_shards=config["num_shards"]
    )
    run = drop_removed(marked, join(path, LINEAGE_DIR)).write(join(path, "part-{shard:05d}.jsonl.zst")).execute()
    kept = run.stages[-1].records_out
    return {
        "documents_in": run.stages[0].records_in,
        "documents_out": kept,
        "duplicates_removed": run.stages[0].records_in - kept,
    }


def fuzzy_dedup(path: str, *, config: dict, docs: str) -> dict:
    fuzzy = FuzzyDedupConfig(threshold=config["threshold"], num_shards=config["num_shards"])
    source = Dataset.from_files(join(docs, "*.jsonl.zst"))
    report = find_duplicate_clusters(source, config=fuzzy, work_dir=join(path, "work"))
    annotated = annotate_clusters(source, report, config=fuzzy)
    # kept documents land per quality split in the same pass, ready for one token store per split
    run = (
        drop_removed(annotated, join(path, LINEAGE_DIR))
        .write(join(path, "docs", "{split}", "part-{shard:05d}.jsonl.zst"), partition_by="split")
        .execute()
    )
    kept = run.stages[-1].records_out
    return {
        "documents_in": report.documents,
        "documents_out": kept,
        "duplicates_removed": report.documents - kept,
        "candidate_edges": report.candidate_edges,
        "verified_edges": report.verified_edges,
        "cc_iterations": report.cc_iterations,
    }


def tokenize(path: str, *, config: dict, docs: str) -> dict:
    from zephyr.tokenize import tokenize_dataset

    summary: dict[str, Any] = {}
    for split in config["splits"]:
        fs, split_dir = url_to_fs(join(docs, "docs", split))
        if not fs.exists(split_dir) and pending_producer(split_dir) is None:  # every document was a duplicate
            continue
        result = tokenize_dataset(
            join(docs, "docs", split, "*.jsonl.zst"),
            join(path, "stores", split),
            tokenizer=config["tokenizer"],
            validation_fraction=config["validation_fraction"],
        )
        validation = result.validation_manifest or {}
        summary[split] = {
            "store": result.output,
            "documents": result.manifest.get("documents", 0),  # a dry run's result has an empty manifest
            "tokens": result.manifest.get("tokens", 0),
            "validation_documents": validation.get("documents", 0),
            "validation_tokens": validation.get("tokens", 0),
        }
    return summary


def mixture(path: str, *, config: dict, stores: dict) -> dict:
    weights = dict(config["weights"]) or {s: info["tokens"] for s, info in stores.items()}
    total = sum(weights[s] for s in stores if s in weights)
    mix = {s: (info["store"], weights.get(s, 0) / total) for s, info in stores.items()}
    Path(path).mkdir(parents=True, exist_ok=True)
    (Path(path) / "mixture.json").write_text(json.dumps(mix, indent=1))
    return {"mixture": mix}


def train(path: str, *, config: dict, mixture_path: str, stores: dict) -> dict:
    from zephyr.train import DataConfig, ModelConfig, OptimizerConfig, TrainConfig
    from zephyr.train import train as run_training

    mix = json.loads((Path(mixture_path) / "mixture.json").read_text())
    eval_sets = {
        s: str(Path(info["store"]) / "validation")
        for s, info in stores.items()
        if info["validation_tokens"] > 4 * config["seq_len"]
    }
    cfg = TrainConfig(
        model=ModelConfig(
            vocab_size=config["vocab_size"],
            hidden_dim=config["hidden_dim"],
            intermediate_dim=3 * config["hidden_dim"],
            num_layers=config["num_layers"],
            num_heads=config["num_heads"],
            num_kv_heads=config["num_heads"],
            max_seq_len=config["seq_len"],
        ),
        optimizer=OptimizerConfig(learning_rate=config["learning_rate"], warmup_steps=10),
        data=DataConfig(
            train={s: (p, w) for s, (p, w) in mix.items() if w > 0},
            eval=eval_sets,
            seq_len=config["seq_len"],
            batch_size=config["batch_size"],
        ),
        steps=config["steps"],
        output_dir=path,
        eval_batches=2,
        checkpoint_every=config["steps"],
        progress=sys.stderr.isatty(),
    )
    result = run_training(cfg)
    return {
        "steps": result.steps,
        "final_loss": result.final_loss,
        "eval": result.eval,
        "tokens_per_second": result.tokens_per_second,
    }


# ------------------------------------------------------------------------------------------- main
@dataclass(frozen=True)
class RecipeConfig:
    input: list[str] = field(default_factory=list)
    output: str = "out/nemotron_cc"
    weights: dict[str, float] = field(default_factory=dict)
    train: bool = True
    train_steps: int = 60
    tokenizer: str = "smollm2"
    num_shards: int = 4
    sample_docs_per_split: int = 420
    on_bad_record: str | None = None  # None: the execution config's ("raise" unless set)
    id_field: str | None = None  # None: warc_record_id, else id
    max_document_chars: int = 1_000_000


def parse_args(argv: list[str] | None = None) -> RecipeConfig:
    # zephyr's parser: no abbreviations, one-line errors, defaults shown in --help
    parser = ZephyrArgumentParser(prog="zephyr run recipes/nemotron_cc.py", description=__doc__)
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        help="glob(s) of Nemotron-CC .jsonl.zst files (default: the embedded sample)",
    )
    parser.add_argument("--output", default="out/nemotron_cc", help="root of every step's output (local)")
    parser.add_argument(
        "--weights",
        default="",
        help="mixture weights, e.g. high_actual=0.5,medium=0.5 (default: proportional to each split's tokens)",
    )
    parser.add_argument("--no-train", action="store_true", help="skip the short training run on the mixture")
    parser.add_argument("--train-steps", type=int, default=60, help="steps of the short training run")
    parser.add_argument("--tokenizer", default="smollm2", help="tokenizer.json path or hub name (default: SmolLM2)")
    parser.add_argument("--num-shards", type=int, default=4, help="shards of the dedup shuffles")
    parser.add_argument(
        "--sample-docs-per-split",
        type=int,
        default=420,
        help="size of the embedded sample (used when no --input is given)",
    )
    parser.add_argument(
        "--id-field",
        default=None,
        help="the field that holds each record's unique id (default: warc_record_id, else id)",
    )
    parser.add_argument(
        "--max-document-chars",
        type=positive_int,
        default=1_000_000,
        help="cut longer documents' text to this many characters, counted (normalize/documents_capped)",
    )
    add_on_bad_record_option(parser)
    args = parser.parse_args(argv)
    weights = {}
    for item in filter(None, args.weights.split(",")):
        name, _, value = item.partition("=")
        if name not in SPLITS:
            parser.error(f"--weights: unknown split {name!r}; splits are {', '.join(SPLITS)}")
        try:
            weights[name] = float(value)
        except ValueError:
            parser.error(f"--weights: {name}={value!r} is not a number; write e.g. {name}=0.5")
    return RecipeConfig(
        args.input,
        args.output,
        weights,
        not args.no_train,
        args.train_steps,
        args.tokenizer,
        args.num_shards,
        args.sample_docs_per_split,
        args.on_bad_record,
        args.id_field,
        args.max_document_chars,
    )


def run(config: RecipeConfig) -> dict[str, StepOutput]:
    inputs = config.input
    with StepRunner(config.output) as steps:
        if not inputs:
            n = config.sample_docs_per_split
            sample = Path(config.output) / f"sample-{n}"
            if (sample / "planted.json").is_file() or not steps.would_write(
                "sample", str(sample), f"the sample {sample}"
            ):
                sample = build_sample(sample, docs_per_split=n)
            inputs = [str(sample / "*" / "*.jsonl.zst")]
        skip_bad = (config.on_bad_record or current_config().on_bad_record) == "skip"
        docs = steps.run(
            "normalize",
            normalize,
            config={"id_field": config.id_field, "skip_bad": skip_bad, "max_chars": config.max_document_chars},
            inputs={"inputs": inputs},
        )
        exact = steps.run("exact_dedup", exact_dedup, config={"num_shards": config.num_shards}, inputs={"docs": docs})
        fuzzy = steps.run(
            "fuzzy_dedup",
            fuzzy_dedup,
            config={"threshold": 0.8, "num_shards": config.num_shards},
            inputs={"docs": exact},
        )
        # the splits normalize found; a dry run's planned normalize has no figures yet: every split is planned
        found = docs.summary.get("splits") or SPLITS
        splits = sorted(found, key=lambda s: SPLIT_RANK.get(s, len(SPLIT_RANK)))
        tokens = steps.run(
            "tokenize",
            tokenize,
            config={"splits": splits, "tokenizer": config.tokenizer, "validation_fraction": 0.05},
            inputs={"docs": fuzzy},
        )
        mix = steps.run("mixture", mixture, config={"weights": config.weights}, inputs={"stores": tokens.summary})
        outputs = {"normalize": docs, "exact_dedup": exact, "fuzzy_dedup": fuzzy, "tokenize": tokens, "mixture": mix}
        if config.train:
            from zephyr.tokenize import load_tokenizer

            # the stores' vocabulary is the tokenizer's (their manifests copy it), known before they exist
            vocab_size = int(load_tokenizer(config.tokenizer).info.vocab_size)
            outputs["train"] = steps.run(
                "train",
                train,
                config={
                    "steps": config.train_steps,
                    "seq_len": 128,
                    "batch_size": 8,
                    "hidden_dim": 128,
                    "num_layers": 2,
                    "num_heads": 4,
                    "learning_rate": 3e-3,
                    "vocab_size": vocab_size,
                },
                inputs={"mixture_path": mix, "stores": tokens.summary},
            )
        return outputs


def summary_lines(outputs: dict[str, StepOutput]) -> list[str]:
    """The recipe's own figures, under the run's step table (docs in/out/removed per step are in that table):
    tokens and weight per split, what dedup found, the training losses. Lines fit 80 columns."""
    tokens = outputs["tokenize"].summary
    mix = outputs["mixture"].summary["mixture"]
    lines = [
        "",
        "Nemotron-CC recipe summary",
        f"{'split':<15} {'documents':>10} {'tokens':>12} {'validation':>11} {'weight':>7}",
    ]
    for split, info in tokens.items():
        lines.append(
            f"{split:<15} {info['documents']:>10,} {info['tokens']:>12,} {info['validation_tokens']:>11,} "
            f"{mix[split][1]:>7.3f}"
        )
    train, held_out = sum(i["tokens"] for i in tokens.values()), sum(i["validation_tokens"] for i in tokens.values())
    lines.append(f"{'total':<15} {sum(i['documents'] for i in tokens.values()):>10,} {train:>12,} {held_out:>11,}")
    lines.append(
        f"tokens: {train:,} train + {held_out:,} validation = {train + held_out:,}, the tokenize/tokens counter"
    )
    fuzzy = outputs["fuzzy_dedup"].summary
    lines.append(
        f"exact duplicates removed: {outputs['exact_dedup'].summary['duplicates_removed']:,}; "
        f"near duplicates removed: {fuzzy['duplicates_removed']:,} ({fuzzy['verified_edges']:,} verified of "
        f"{fuzzy['candidate_edges']:,} candidate edges, {fuzzy['cc_iterations']} connected-components rounds)"
    )
    if "train" in outputs:
        t = outputs["train"].summary
        evals = ", ".join(f"{k} {v['loss']:.3f}" for k, v in sorted(t["eval"].items()))
        lines.append(f"training: {t['steps']} steps, final loss {t['final_loss']:.3f}; eval loss: {evals}")
    return [part for line in lines for part in textwrap.wrap(line, 80, subsequent_indent="  ") or [""]]


def main(argv: list[str] | None = None) -> None:
    from zephyr import execution
    from zephyr.engine.run.progress import report_results

    config = parse_args(argv)
    with execution(**({"on_bad_record": config.on_bad_record} if config.on_bad_record else {})):
        outputs = run(config)
    report_results(summary_lines(outputs))  # one final summary: under `zephyr run`, below the run's table


if __name__ == "__main__":
    main()
