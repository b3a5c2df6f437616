"""A mixture ablation end to end: two token stores, a baseline and candidate mixtures, a verdict each.

    zephyr run recipes/mixture_ablation.py [--quick] [--output out/mixture_ablation]
    zephyr run recipes/mixture_ablation.py --store hq=out/nemotron/store_hq --store web=out/nemotron/store_web \\
        --tokenizer smollm2 --model mini --steps 2000 --seq-len 512
    zephyr run recipes/mixture_ablation.py --ladder 10,12,16,20,24 --target-width 48 --verify --chars 5000000

Without ``--store``, two small stores are built from real text available
offline: English prose (the hand-cleaned news articles of ../shared/data/aeb-dev
when present, else the README texts of the installed packages) and Python code
(the standard library); with ``--chars`` above 300k, also the Python reference,
docstrings and the installed packages' sources. They are tokenized with a
1024-entry BPE trained on them so a
tiny model trains on CPU in seconds (``--tokenizer smollm2`` uses the real
SmolLM2 tokenizer instead: 49k entries, much slower on CPU). They are the recipe's ``sample`` step
(``OUTPUT/sample-<version>/stores/{prose,code}``), reused until their text or settings change.

With stores A and B (the first and second ``--store``), the ablation is::

    baseline           A 75%, B 25%
    baseline+B50       A 50%, B 50%          (a sweep of B's share)
    baseline+B75       A 25%, B 75%
    ...-shuffled-B     baseline+B75 with B token-shuffled (negative control: must come out worse)

evaluated on the held-out ``validation/`` split of both stores, decided on B's.
``--production-tokens N`` turns on matched exposure for B (its unique tokens
are capped so the ablation repeats it as often as an N-token production run
would). Runs train one after another here; ``zephyr run --backend ray recipes/mixture_ablation.py`` runs them as Ray
tasks (one per worker; ``--gpus-per-run 1`` on a GPU cluster). Finished runs
are skipped and interrupted ones resume, so rerunning the command is cheap;
the report (CSV, JSON, PNG) lands in the output directory.

``--ladder W1,W2,...`` turns it into a scaling ladder (see docs/ladder.md): every mixture trains
those widths with one scaling recipe at ``--tokens-per-param`` tokens per parameter, a law fitted
per mixture predicts its loss at ``--target-width`` (or ``--target-flops``), and the report says
whether the mixtures' ranking at the target is decided. ``--isoflop B1,B2`` adds isoflop sweeps
(``--isoflop-widths``) that measure the data's compute-optimal tokens per parameter, ``--transfer``
the learning-rate transfer check, and ``--verify`` trains the targets to measure the prediction's
error. ``--seq-len`` and ``--batch-size`` then set the recipe's; ``--steps`` and ``--model`` do not apply.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from zephyr.ablate import ablation_config_from_dict, run_ablation
from zephyr.ablate.sample_text import code_documents, prose_documents, write_sample_stores
from zephyr.fs import join
from zephyr.steps import StepRunner
from zephyr.versioning import fingerprint

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SAMPLE_STORES = ("prose", "code")  # what `write_sample_stores` writes under `<root>/stores/`


def sample_config(tokenizer: str, chars: int) -> dict:
    """The `sample` step's config: ~`chars` characters each of prose and code (past 300k, from every offline
    source: docstrings and installed packages too), tokenized with `tokenizer`; and a digest of that text,
    so that other shared data or other installed packages make another version (not the old stores)."""
    extended = chars > 300_000
    text = fingerprint(
        prose_documents(chars, shared_data=SHARED_DATA, extended=extended), code_documents(chars, extended=extended)
    )
    return {"tokenizer": tokenizer, "chars": chars, "extended": extended, "text": text}


def build_sample_stores(path: str, *, config: dict) -> dict:
    """The `sample` step: the prose and code stores, with their text and tokenizer, under `path`."""
    stores = write_sample_stores(
        path, chars=config["chars"], tokenizer=config["tokenizer"], shared_data=SHARED_DATA, extended=config["extended"]
    )
    return {"stores": stores}


def check_stores(stores: dict[str, str]) -> None:
    """Given stores must have a validation split: the ablation evaluates on it."""
    for name, path in stores.items():
        if not (Path(path) / "validation" / "manifest.json").is_file():
            raise SystemExit(
                f"store {path} ({name}) has no validation/ split to evaluate on; tokenize it with "
                "--validation-fraction 0.01 (or similar)."
            )


def ablation_dict(stores: dict[str, str], args: argparse.Namespace) -> dict:
    """The ablation config (as written to OUTPUT/ablation.yaml) for stores A and B."""
    (a, a_path), (b, b_path) = list(stores.items())[:2]
    fractions = [0.5, 0.75] if not args.quick else [0.75]
    heavy = f"baseline+{b}75"
    config = {
        "output_dir": str(Path(args.output) / "ablation"),
        "seeds": [int(s) for s in args.seeds.split(",")],
        "confidence": args.confidence,
        "primary_eval": b,
        "baseline": {"mixture": {a: [a_path, 0.75], b: [b_path, 0.25]}},
        "candidates": [
            {"sweep": {"dataset": b, "fractions": fractions}},
            {"name": f"{heavy}-shuffled-{b}", "negative_control": {"dataset": b, "of": heavy}},
        ],
        "model": {"preset": args.model},
        "optimizer": {"learning_rate": args.learning_rate or 3e-3, "warmup_steps": max(1, args.steps // 10)},
        "train": {
            "steps": args.steps,
            "seq_len": args.seq_len,
            "batch_size": args.batch_size,
            "eval_batches": args.eval_batches,
        },
        "eval": {a: str(Path(a_path) / "validation"), b: str(Path(b_path) / "validation")},
        "backend": args.backend,
        "ray": {"gpus_per_run": args.gpus_per_run},
    }
    if args.production_tokens:
        config["matched_exposure"] = {b: {"production_tokens": args.production_tokens}}
    if args.ladder:
        del config["model"], config["optimizer"]
        config["train"] = {"eval_batches": args.eval_batches, "eval_batch_size": args.batch_size}
        config["ladder"] = ladder_dict(args)
    return config


def _numbers(text: str, kind: type) -> list:
    return [kind(float(x)) for x in text.split(",") if x.strip()]


def ladder_dict(args: argparse.Namespace) -> dict:
    """The ``ladder:`` section: CPU-sized shapes (8-wide heads, two layers per 16 of width, SwiGLU 3x)."""
    recipe = {
        "seq_len": args.seq_len,
        "base_batch_size": args.batch_size,
        "head_dim": 8,
        "aspect_ratio": 16,
        "mlp_multiple": 4,
        "tokens_per_param": args.tokens_per_param,
        **({"base_lr": args.learning_rate} if args.learning_rate else {}),
    }
    ladder: dict = {"widths": _numbers(args.ladder, int), "recipe": recipe, "verify": args.verify}
    if args.target_flops:
        ladder["target_flops"] = args.target_flops
    else:
        ladder["target_width"] = args.target_width or 4 * max(ladder["widths"])
    if args.isoflop:
        ladder["isoflop"] = {"budgets": _numbers(args.isoflop, float), "widths": _numbers(args.isoflop_widths, int)}
    if args.transfer:
        ladder["transfer"] = {"widths": [min(ladder["widths"]), max(ladder["widths"])]}
    return ladder


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="zephyr run recipes/mixture_ablation.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output", default="out/mixture_ablation", help="where stores, runs and the report go")
    parser.add_argument(
        "--store",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="an existing token store (give two: A, then B); default: build prose and code stores",
    )
    parser.add_argument(
        "--tokenizer",
        default="small",
        help="for built stores: 'small' (a 1024-entry BPE trained here) or a tokenizer source",
    )
    parser.add_argument("--chars", type=int, default=300_000, help="characters of text per built store")
    parser.add_argument("--model", default="tiny", help="model preset: tiny, mini, 20m, 60m, 150m")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--eval-batches", type=int, default=16)
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="default 3e-3; a ladder: the recipe's base_lr (its rule)"
    )
    parser.add_argument("--seeds", default="0,1,2,3", help="comma-separated seeds (4: two or three rarely settle it)")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument(
        "--production-tokens",
        type=float,
        default=None,
        help="matched exposure for B: total tokens of the production run",
    )
    parser.add_argument("--gpus-per-run", type=float, default=0.0)
    parser.add_argument("--quick", action="store_true", help="one candidate plus the control, 60 steps, 2 seeds")
    ladder = parser.add_argument_group("scaling ladder")
    ladder.add_argument("--ladder", default=None, metavar="W1,W2,...", help="train these widths per mixture")
    ladder.add_argument("--target-width", type=int, default=None, help="the width to predict (default 4x the largest)")
    ladder.add_argument("--target-flops", type=float, default=None, help="or the compute to predict at")
    ladder.add_argument("--tokens-per-param", type=float, default=20.0, help="tokens per parameter of every run")
    ladder.add_argument("--isoflop", default=None, metavar="B1,B2,...", help="isoflop budgets (FLOPs)")
    ladder.add_argument("--isoflop-widths", default="8,12,16,20,24,32", help="the widths of each isoflop budget")
    ladder.add_argument("--transfer", action="store_true", help="learning-rate transfer check at both ends")
    ladder.add_argument("--verify", action="store_true", help="also train the targets and report the error")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seeds = 60, "0,1"
    if args.ladder and args.seeds == parser.get_default("seeds"):
        args.seeds = "0"  # a ladder's runs are the repeats: one seed each unless asked for more
    return args


def plan_line(config: dict, args: argparse.Namespace) -> str:
    """What the ablation trains, in one line (what a dry run says it would do)."""
    mixtures = 1 + len(config["candidates"][0]["sweep"]["fractions"]) + 1  # baseline, B's shares, the control
    seeds = len(config["seeds"])
    runs = (
        f"a ladder of widths {args.ladder} (target {args.target_width or args.target_flops or '4x the largest'})"
        if args.ladder
        else f"{mixtures * seeds} runs of {args.steps} steps, model {args.model!r}"
    )
    written = Path(args.output) / "ablation.yaml"
    return f"{written} and train {mixtures} mixtures x {seeds} seeds ({runs}) into {config['output_dir']}"


def main(argv: Sequence[str] | None = None) -> int:
    """Build the sample stores (a step: reused once built) unless given, then train the ablation. A dry run
    plans the stores' pipelines and says what it would train; the runner ends it, writing nothing."""
    from zephyr.engine.context import current_config

    args = parse_args(argv)
    args.backend = "ray" if current_config().backend == "ray" else "local"  # `zephyr run ... --backend ray`
    out = Path(args.output)
    given = dict(item.split("=", 1) for item in args.store)
    if args.store and (len(given) < 2 or any(not v for v in given.values())):
        print("give two stores as --store NAME=PATH --store NAME=PATH", file=sys.stderr)
        return 2
    check_stores(dict(list(given.items())[:2]))  # A and B, the two the ablation trains on
    with StepRunner(str(out)) as steps:
        if given:
            stores = given
        else:
            sample = steps.run("sample", build_sample_stores, config=sample_config(args.tokenizer, args.chars))
            stores = {name: join(sample.path, "stores", name) for name in SAMPLE_STORES}
        config = ablation_dict(stores, args)
        if steps.would_write("ablation", config["output_dir"], plan_line(config, args), builds_input=False):
            return 0  # a dry run or an estimate: the runner's end says what would run and stops
        out.mkdir(parents=True, exist_ok=True)
        (out / "ablation.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        print(
            f"ablation config: {out / 'ablation.yaml'} (rerun it with `zephyr ablate {out / 'ablation.yaml'}`)",
            file=sys.stderr,
        )
        outcome = run_ablation(ablation_config_from_dict(config))
    if outcome.ladder is not None:
        return 0
    control = outcome.report.verdicts[-1]
    if control.difference.verdict != "worse":
        print(
            f"warning: the negative control {control.mixture} did not come out worse ({control.difference.verdict}); "
            "the ablation is too small or too noisy to trust: add steps or seeds.",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
