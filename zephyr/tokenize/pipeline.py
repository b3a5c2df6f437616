"""Tokenize document files into a token store, on the Zephyr engine.

Each input file is one engine shard and one store shard (``shards/<i>``, ``i``
its index among the sorted matches of the globs), so a rerun skips every shard
whose ``shard.json`` was written with the same settings (``config_hash``) and
source file: tokenization resumes per shard after a crash. The tokenizer is
loaded once per worker process (:func:`load_tokenizer` is cached) and documents
are encoded in batches.

With ``validation_fraction > 0`` each document goes to the ``validation/``
sub-store when ``xxh3_64(id) / 2**64 < validation_fraction`` (its text when it
has no id): a pure function of the id, so the split is stable across reruns,
shard layouts and fractions (raising the fraction only moves documents into
validation).

Documents whose text is missing or empty are dropped and counted in the
manifest's ``skipped`` under the reasons ``missing_text`` and ``empty_text``.

``output`` may be a URL (``gs://bucket/stores/web``, ``s3://...``): every worker
stages its shard locally and uploads it (see :mod:`zephyr.tokenize.store`), and
resume, stale-shard removal and the manifest work the same on the bucket. Each
worker needs credentials for the bucket.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import xxhash

from .store import ShardRecord, ShardWriter, completed_shard, is_remote, token_dtype, write_manifest
from .tokenizer import TokenizerSpec, load_tokenizer

__all__ = ["TokenizeConfig", "TokenizeResult", "tokenize_dataset", "tokenize_file", "is_validation_document"]

_BATCH_DOCS = 256


@dataclass(frozen=True)
class TokenizeConfig:
    """Settings that decide the ids written; their hash guards shard reuse on resume."""

    tokenizer: TokenizerSpec = field(default_factory=TokenizerSpec)
    text_field: str = "text"
    id_field: str = "id"
    add_bos: bool = False
    add_eos: bool = True
    validation_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}.")

    def hash_with(self, tokenizer_hash: str) -> str:
        """Hash of everything that changes the stored ids (engine choice excluded: ids are identical)."""
        spec = asdict(self.tokenizer)
        spec.pop("engine")
        spec.pop("max_chunk_chars")
        payload = {**asdict(self), "tokenizer": spec, "tokenizer_hash": tokenizer_hash, "store_version": 1}
        return xxhash.xxh3_64_hexdigest(json.dumps(payload, sort_keys=True).encode())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tokenizer": asdict(self.tokenizer)}


@dataclass(frozen=True)
class TokenizeResult:
    """What :func:`tokenize_dataset` wrote: the manifests, and how many shards it reused."""

    output: str
    manifest: dict[str, Any]
    validation_manifest: dict[str, Any] | None
    shards_written: int
    shards_reused: int
    counters: dict[str, int]


def is_validation_document(doc_key: str, fraction: float) -> bool:
    """Deterministic split: the document's id hash, as a fraction of 2**64, is below ``fraction``."""
    return fraction > 0 and xxhash.xxh3_64_intdigest(doc_key.encode("utf-8", "surrogatepass")) < fraction * 2.0**64


def _train_relpath(index: int) -> str:
    return f"shards/{index:05d}"


def _validation_relpath(index: int) -> str:
    return f"validation/shards/{index:05d}"


def tokenize_file(path: str, index: int, output: str, config: TokenizeConfig, *, format: str | None = None,
                  resume: bool = True) -> dict[str, Any]:
    """Tokenize one input file into store shard ``index`` (and its validation shard). Runs in a worker.

    Returns ``{"index", "train", "validation", "skipped", "reused"}`` with the shard records as dicts.
    """
    from zephyr.engine import counters
    from zephyr.engine.io import read_records

    tokenizer = load_tokenizer(config.tokenizer)
    config_hash = config.hash_with(tokenizer.info.content_hash)
    split = config.validation_fraction > 0
    if resume:
        train = completed_shard(output, _train_relpath(index), config_hash)
        val = completed_shard(output, _validation_relpath(index), config_hash) if split else None
        if train is not None and train.source == path and (not split or (val is not None and val.source == path)):
            return {"index": index, "train": train.to_json(), "validation": val.to_json() if val else None,
                    "skipped": train.skipped, "reused": True}
    dtype = token_dtype(tokenizer.info.vocab_size)
    vocab = tokenizer.info.vocab_size
    skipped = {"missing_text": 0, "empty_text": 0}
    train_writer = ShardWriter(output, _train_relpath(index), dtype=dtype, vocab_size=vocab, source=path,
                               config_hash=config_hash)
    val_writer = (ShardWriter(output, _validation_relpath(index), dtype=dtype, vocab_size=vocab, source=path,
                              config_hash=config_hash) if split else None)
    text_field, id_field = config.text_field, config.id_field
    try:
        texts: list[str] = []
        to_val: list[bool] = []

        def flush() -> None:
            if val_writer is None:
                flat, lengths = tokenizer.encode_flat(texts, add_bos=config.add_bos, add_eos=config.add_eos)
                train_writer.add_flat(flat, lengths)
            else:
                encoded = tokenizer.encode_batch(texts, add_bos=config.add_bos, add_eos=config.add_eos)
                train_writer.add([e for e, v in zip(encoded, to_val) if not v])
                val_writer.add([e for e, v in zip(encoded, to_val) if v])
            texts.clear()
            to_val.clear()

        columns = [text_field, id_field] if split else [text_field]
        for record in read_records(path, format=format, columns=columns):
            text = record.get(text_field)
            if not isinstance(text, str):
                skipped["missing_text"] += 1
                continue
            if not text:
                skipped["empty_text"] += 1
                continue
            texts.append(text)
            if split:
                doc_id = record.get(id_field)
                to_val.append(is_validation_document(str(doc_id) if doc_id is not None else text,
                                                     config.validation_fraction))
            if len(texts) >= _BATCH_DOCS:
                flush()
        if texts:
            flush()
        train = train_writer.close(skipped=skipped)
        val = val_writer.close() if val_writer is not None else None
    except BaseException:
        train_writer.abort()
        if val_writer is not None:
            val_writer.abort()
        raise
    counters.increment("tokenize/documents", train.documents + (val.documents if val else 0))
    counters.increment("tokenize/tokens", train.tokens + (val.tokens if val else 0))
    for reason, n in skipped.items():
        if n:
            counters.increment(f"tokenize/skipped/{reason}", n)
    return {"index": index, "train": train.to_json(), "validation": val.to_json() if val else None,
            "skipped": skipped, "reused": False}


@dataclass(frozen=True)
class _ShardTask:
    """Picklable per-file task for the engine: holds paths and config, loads the tokenizer in the worker."""

    display_name = "tokenize"  # the stage name progress and run records show

    output: str
    config: TokenizeConfig
    format: str | None
    resume: bool

    def __call__(self, task: dict[str, Any]) -> dict[str, Any]:
        return tokenize_file(task["path"], task["index"], self.output, self.config, format=self.format,
                             resume=self.resume)


def tokenize_dataset(input_glob: str | Sequence[str], output: str | os.PathLike[str], *,
                     tokenizer: str | TokenizerSpec = "smollm2", text_field: str = "text", id_field: str = "id",
                     add_bos: bool = False, add_eos: bool = True, validation_fraction: float = 0.0,
                     format: str | None = None, resume: bool = True) -> TokenizeResult:
    """Tokenize every file matching ``input_glob`` into the token store ``output``.

    Runs under the current :func:`zephyr.execution` settings (backend,
    workers). ``output`` is a local directory or a URL (``gs://``, ``s3://``).
    ``tokenizer`` is a source string or a :class:`TokenizerSpec`.
    EOS (the tokenizer's document separator) is appended to every document by
    default; BOS is not. Returns the manifests written; the store is complete
    once ``manifest.json`` exists. See :mod:`zephyr.tokenize.store` for the format.

    Example::

        from zephyr import execution
        from zephyr.tokenize import tokenize_dataset
        with execution(backend="processes", workers=2):
            tokenize_dataset("data/*.jsonl.zst", "stores/web", validation_fraction=0.01)
    """
    from zephyr import Dataset
    from zephyr.fs import expand_glob, join

    spec = tokenizer if isinstance(tokenizer, TokenizerSpec) else TokenizerSpec(source=os.fspath(tokenizer))
    config = TokenizeConfig(tokenizer=spec, text_field=text_field, id_field=id_field, add_bos=add_bos,
                            add_eos=add_eos, validation_fraction=validation_fraction)
    globs = [input_glob] if isinstance(input_glob, str) else list(input_glob)
    files: list[str] = []
    for pattern in globs:
        for match in expand_glob(pattern):
            if match not in files:
                files.append(match)
    files.sort()
    remote = is_remote(output)
    out = os.fspath(output).rstrip("/") if remote else str(Path(output).absolute())
    if remote:
        _check_remote_output(out)
    elif Path(out).exists() and not Path(out).is_dir():
        raise NotADirectoryError(f"output {out} exists and is not a directory; a token store is a directory.")
    info = load_tokenizer(spec).info  # fail fast in the driver (bad source, missing EOS) before any worker starts
    if add_eos and info.eos_id is None or add_bos and info.bos_id is None:
        raise ValueError(f"tokenizer {info.name!r} has no {'EOS' if add_eos and info.eos_id is None else 'BOS'} token; "
                         "pass TokenizerSpec(eos_token=..., bos_token=...) or add_eos=False / add_bos=False.")
    config_hash = config.hash_with(info.content_hash)
    if not remote:
        Path(out).mkdir(parents=True, exist_ok=True)
    _remove_stale(out, len(files), validation_fraction > 0)
    # A fresh nonce per call keeps the engine's own stage checkpoints from replaying an older run's
    # results; resumption is per store shard (shard.json + config hash), which is exact.
    nonce = uuid.uuid4().hex
    tasks = [{"index": i, "path": p, "run": nonce} for i, p in enumerate(files)]
    run = Dataset.from_list(tasks, num_shards=len(tasks)).map(_ShardTask(out, config, format, resume)).execute()
    results = sorted(run.outputs, key=lambda r: r["index"])
    skipped: dict[str, int] = {}
    for r in results:
        for reason, n in r["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + n
    dtype = token_dtype(info.vocab_size)
    tok_manifest = info.to_manifest()
    common = dict(dtype=dtype, tokenizer=tok_manifest, sources=globs, config=config.to_json(), config_hash=config_hash)
    val_manifest = None
    if validation_fraction > 0:
        val_manifest = write_manifest(join(out, "validation"),
                                      shards=[_relative(r["validation"], "validation/") for r in results],
                                      split="validation", skipped={}, **common)
    manifest = write_manifest(out, shards=[ShardRecord.from_json(r["train"]) for r in results], split="train",
                              skipped=skipped, **common)
    reused = sum(1 for r in results if r["reused"])
    return TokenizeResult(out, manifest, val_manifest, len(results) - reused, reused, dict(run.counters))


def _relative(d: dict[str, Any], prefix: str) -> ShardRecord:
    rec = ShardRecord.from_json(d)
    return replace(rec, path=rec.path[len(prefix):]) if rec.path.startswith(prefix) else rec


def _check_remote_output(url: str) -> None:
    from zephyr.fs import url_to_fs

    fs, path = url_to_fs(url)
    try:
        is_file = fs.isfile(path)
    except OSError as exc:
        raise OSError(f"output {url}: cannot reach the bucket ({exc}); check the URL and the credentials.") from exc
    if is_file:
        raise NotADirectoryError(f"output {url} is an object, not a prefix; a token store is a directory: "
                                 f"choose another output, e.g. {url}-store.")


def _remove_stale(out: str, num_shards: int, keep_validation: bool) -> None:
    """Drop what an earlier run into the same store left that this run will not rewrite.

    ``manifest.json`` first (the store is incomplete until it is rewritten), shard directories past
    this run's file count, and a ``validation/`` split when this run makes none: a reader would
    otherwise find an old validation store overlapping the new training data. Local directory or bucket.
    """
    from zephyr.fs import url_to_fs

    fs, root = url_to_fs(out)
    fs.invalidate_cache()

    def remove(path: str, recursive: bool = False) -> None:
        try:
            fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass
        fs.invalidate_cache()

    remove(f"{root}/manifest.json")
    if not keep_validation and fs.exists(f"{root}/validation"):
        remove(f"{root}/validation", recursive=True)
    for sub in ("shards", "validation/shards"):
        try:
            entries = fs.ls(f"{root}/{sub}", detail=True)
        except FileNotFoundError:
            continue
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if entry.get("type") == "directory" and name.isdigit() and int(name) >= num_shards:
                remove(entry["name"].rstrip("/"), recursive=True)
    if keep_validation:
        remove(f"{root}/validation/manifest.json")
