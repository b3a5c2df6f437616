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

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import xxhash

from zephyr.engine import absent_fields
from zephyr.errors import BadInputError
from zephyr.staged import StagedWork

from .store_format import SHARD_MARKER_KIND, is_remote, token_dtype
from .store_write import ShardRecord, ShardWriter, completed_shard, remove_temp_files, write_manifest
from .tokenizer import TokenizerSpec, load_tokenizer

__all__ = [
    "TokenizeConfig",
    "TokenizeResult",
    "TokenStoreWriter",
    "tokenize_dataset",
    "write_store_shard",
    "is_validation_document",
]

_BATCH_DOCS = 256
DEFAULT_ID_FIELD = "id"  # optional in the inputs (ids then read as None); any other field named must exist


@dataclass(frozen=True)
class TokenizeConfig:
    """Settings that decide the ids written; their hash guards shard reuse on resume."""

    tokenizer: TokenizerSpec = field(default_factory=TokenizerSpec)
    text_field: str = "text"
    id_field: str = DEFAULT_ID_FIELD
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
        if spec["max_chunk_chars"] == TokenizerSpec.max_chunk_chars:
            # Ids differ only next to a forced cut in a stretch with no safe split point, so a
            # non-default size is hashed; the default stays out so existing stores keep their hash.
            spec.pop("max_chunk_chars")
        if os.path.exists(spec["source"]):  # a local tokenizer file counts by where it is, however spelled
            spec["source"] = os.path.abspath(spec["source"])
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


STAGING_DIRNAME = ".next"  # hidden: globs, readers and `zephyr verify` leave it alone


def write_store_shard(
    records: Iterable[Any],
    index: int,
    source: str,
    root: str,
    config: TokenizeConfig,
    *,
    live: str | None = None,
    format: str | None = None,
    resume: bool = True,
) -> list[str]:
    """Tokenize ``records`` (dicts) into store shard ``index`` under ``root`` (and its validation shard).

    Runs in a worker. Returns the URLs of the ``shard.json`` files that describe the shard (train, then
    validation): of a complete shard already in ``live`` or ``root`` with the same settings and source when
    ``resume`` (the records are then not read), else of the one just written. A source whose records all
    lack the text field is a :class:`BadInputError` naming the fields they have: a wrong ``text_field``
    must fail, not produce an empty store.
    """
    from zephyr import counters
    from zephyr.fs import join

    tokenizer = load_tokenizer(config.tokenizer)
    config_hash = config.hash_with(tokenizer.info.content_hash)
    split = config.validation_fraction > 0
    train_rel, val_rel = _train_relpath(index), _validation_relpath(index)
    if resume:
        for base in dict.fromkeys(b for b in (live, root) if b is not None):
            train = completed_shard(base, train_rel, config_hash)
            val = completed_shard(base, val_rel, config_hash) if split else None
            val_ok = not split or (val is not None and val.source == source)
            if train is not None and train.source == source and val_ok:
                counters.increment("tokenize/shards_reused")
                return [join(base, train_rel, "shard.json")] + ([join(base, val_rel, "shard.json")] if split else [])
    dtype = token_dtype(tokenizer.info.vocab_size)
    vocab = tokenizer.info.vocab_size
    skipped = {"missing_text": 0, "empty_text": 0}
    train_writer = ShardWriter(root, train_rel, dtype=dtype, vocab_size=vocab, source=source, config_hash=config_hash)
    val_writer = (
        ShardWriter(root, val_rel, dtype=dtype, vocab_size=vocab, source=source, config_hash=config_hash)
        if split
        else None
    )
    text_field, id_field = config.text_field, config.id_field
    seen = 0
    first_record: Any = None
    try:
        texts: list[str] = []
        to_val: list[bool] = []
        ids: list[str | None] = []  # for each shard's document index (documents.parquet)

        def flush() -> None:
            if val_writer is None:
                flat, lengths = tokenizer.encode_flat(texts, add_bos=config.add_bos, add_eos=config.add_eos)
                train_writer.add_flat(flat, lengths, ids)
            else:
                encoded = tokenizer.encode_batch(texts, add_bos=config.add_bos, add_eos=config.add_eos)
                train_writer.add(
                    [e for e, v in zip(encoded, to_val, strict=False) if not v],
                    [i for i, v in zip(ids, to_val, strict=False) if not v],
                )
                val_writer.add(
                    [e for e, v in zip(encoded, to_val, strict=False) if v],
                    [i for i, v in zip(ids, to_val, strict=False) if v],
                )
            texts.clear()
            to_val.clear()
            ids.clear()

        id_unseen = id_field != DEFAULT_ID_FIELD  # checked only for a field named for ids: the default is optional
        for record in records:
            if seen == 0:
                first_record = record
            seen += 1
            if id_unseen and isinstance(record, dict) and record.get(id_field) is not None:
                id_unseen = False
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                skipped["missing_text"] += 1
                continue
            if not text:
                skipped["empty_text"] += 1
                continue
            texts.append(text)
            doc_id = record.get(id_field)
            ids.append(None if doc_id is None else str(doc_id))
            if split:
                to_val.append(
                    is_validation_document(str(doc_id) if doc_id is not None else text, config.validation_fraction)
                )
            if len(texts) >= _BATCH_DOCS:
                flush()
        if seen and skipped["missing_text"] == seen:
            raise BadInputError(_no_text_message(source, text_field, seen, first_record, format))
        if seen and id_field != DEFAULT_ID_FIELD:  # ids are optional, but a field named for them must exist
            absent_fields.note(
                [id_field],
                [id_field] if id_unseen else [],
                lambda: f"{source}: none of its {seen} records has the id field {id_field!r}",
            )
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
    return [join(root, train_rel, "shard.json")] + ([join(root, val_rel, "shard.json")] if split else [])


def _no_text_message(source: str, text_field: str, seen: int, first: Any, format: str | None) -> str:
    """Name the field asked for and the fields the records do have (read again, unprojected)."""
    fields: list[str] = sorted(first) if isinstance(first, dict) else []
    if "://" in source or os.path.exists(source):
        try:
            from zephyr.engine.io import read_records

            record = next(iter(read_records(source, format=format)), None)
            fields = sorted(record) if isinstance(record, dict) else fields
        except Exception:  # noqa: BLE001 - the message falls back to the projected record's fields
            pass
    has = f"they have the fields {', '.join(map(repr, fields))}" if fields else "they have no fields"
    if text_field in fields:
        fix = "the field is there but never a string: check the data, or choose another field with text_field="
    else:
        fix = "choose the field that holds the text with text_field= (zephyr tokenize --text-field NAME)"
    return (
        f"{source}: none of its {seen} records has a string field {text_field!r}; {has}. {fix.capitalize()}. "
        "Nothing was written; an existing store at the output is left as it was."
    )


@dataclass(frozen=True)
class TokenStoreWriter:
    """The engine sink of a token store: each engine shard becomes store shard ``files.index(source)``
    (the engine shard index when ``files`` is None). Picklable: holds paths and config; the tokenizer is
    loaded in the worker. Returns the ``shard.json`` URLs; the driver writes the manifest."""

    display_name = "tokenize"  # the stage name progress and run records show

    root: str
    config: TokenizeConfig
    live: str | None = None
    files: tuple[str, ...] | None = None
    format: str | None = None
    resume: bool = True

    def __call__(self, records: Iterable[Any], *, shard: int, total: int, source: str | None) -> list[str]:
        index = self.files.index(source) if self.files is not None and source in self.files else shard
        return write_store_shard(
            records,
            index,
            source or f"shard {shard}",
            self.root,
            self.config,
            live=self.live,
            format=self.format,
            resume=self.resume,
        )


def tokenize_dataset(
    input_glob: str | Sequence[str],
    output: str | os.PathLike[str],
    *,
    tokenizer: str | TokenizerSpec = "smollm2",
    text_field: str = "text",
    id_field: str = DEFAULT_ID_FIELD,
    add_bos: bool = False,
    add_eos: bool = True,
    validation_fraction: float = 0.0,
    format: str | None = None,
    resume: bool = True,
    on_bad_record: str | None = None,
) -> TokenizeResult:
    """Tokenize every file matching ``input_glob`` into the token store ``output``.

    Runs under the current :func:`zephyr.execution` settings (backend,
    workers). ``output`` is a local directory or a URL (``gs://``, ``s3://``).
    ``tokenizer`` is a source string or a :class:`TokenizerSpec`.
    EOS (the tokenizer's document separator) is appended to every document by
    default; BOS is not. Returns the manifests written; the store is complete
    once ``manifest.json`` exists. See :mod:`zephyr.tokenize.store` for the format.

    A complete store at ``output`` is replaced only by a complete new one: the new shards are
    written to ``output/.next/`` and moved into place once every shard succeeded, so a failed run
    (a wrong ``text_field``, a crash) leaves the old store readable. Shards of the old store with the
    same settings and source are kept, not rewritten. Writing is an engine sink
    (:class:`TokenStoreWriter`), so the engine's checkpoints, retries and dry runs apply.

    Example::

        from zephyr import execution
        from zephyr.tokenize import tokenize_dataset
        with execution(backend="processes", workers=2):
            tokenize_dataset("data/*.jsonl.zst", "stores/web", validation_fraction=0.01)
    """
    from zephyr import Dataset
    from zephyr.engine.io.listing import data_files
    from zephyr.engine.run.pending import pending_producer
    from zephyr.fs import join

    spec = tokenizer if isinstance(tokenizer, TokenizerSpec) else TokenizerSpec(source=os.fspath(tokenizer))
    config = TokenizeConfig(
        tokenizer=spec,
        text_field=text_field,
        id_field=id_field,
        add_bos=add_bos,
        add_eos=add_eos,
        validation_fraction=validation_fraction,
    )
    globs = [input_glob] if isinstance(input_glob, str) else list(input_glob)
    files: list[str] = []
    for pattern in globs:
        if pending_producer(pattern) is not None:
            files.append(pattern)  # what an earlier step would write: the dry run plans against it as it is
            continue
        for match in data_files(pattern, format):
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
        raise ValueError(
            f"tokenizer {info.name!r} has no {'EOS' if add_eos and info.eos_id is None else 'BOS'} token; "
            "pass TokenizerSpec(eos_token=..., bos_token=...) or add_eos=False / add_bos=False."
        )
    config_hash = config.hash_with(info.content_hash)
    split = validation_fraction > 0
    staging = join(out, STAGING_DIRNAME)
    root = staging if _exists(join(out, "manifest.json")) else out  # never write into a complete store
    # ids go to each shard's document index; read them whenever the inputs have them (a split needs them)
    columns = [text_field, id_field] if split or _has_field(files, id_field, format) else [text_field]
    writer = TokenStoreWriter(root, config, live=out, files=tuple(files), format=format, resume=resume)
    # a checkpointed shard (of a killed run) whose shard.json another run has rewritten since runs again
    check = _ShardsOfOtherRuns(config_hash, tuple(files))
    dataset = Dataset.from_files(files, format=format, columns=columns, on_bad_record=on_bad_record)
    run = dataset.write_shards(writer, name=f"write_token_store({out})", check=check).execute()
    if run.planned:  # a dry run: the plan was printed; nothing is written
        return TokenizeResult(out, {}, None, 0, 0, {})
    counters = dict(run.counters)
    records = _read_shard_records(run.outputs, files, config_hash, split)
    if todo := [f for i, f in enumerate(files) if i not in records]:
        raise RuntimeError(
            f"token store {out}: shards {todo} were reported written but their shard.json files do "
            "not match this run; another run is writing the same store. Let it finish, then rerun."
        )
    staged = [i for i, (train, _) in sorted(records.items()) if train.path.startswith(staging)]
    _promote(out, staging, staged, split)
    results = [records[i] for i in range(len(files))]
    skipped: dict[str, int] = {}
    for train, _ in results:
        for reason, n in train.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    dtype = token_dtype(info.vocab_size)
    tok_manifest = info.to_manifest()
    common = dict(dtype=dtype, tokenizer=tok_manifest, sources=globs, config=config.to_json(), config_hash=config_hash)
    val_manifest = None
    if split:
        val_manifest = write_manifest(
            join(out, "validation"),
            shards=[
                replace(v, path=_validation_relpath(i)[len("validation/") :])
                for i, (_, v) in enumerate(results)
                if v is not None
            ],
            split="validation",
            skipped={},
            **common,
        )
    manifest = write_manifest(
        out,
        shards=[replace(t, path=_train_relpath(i)) for i, (t, _) in enumerate(results)],
        split="train",
        skipped=skipped,
        **common,
    )
    _remove_stale(out, len(files), split)
    _remove_tree(staging)
    remove_temp_files(out)
    reused = counters.get("tokenize/shards_reused", 0)
    return TokenizeResult(out, manifest, val_manifest, len(results) - reused, reused, counters)


def _exists(url: str) -> bool:
    from zephyr.fs import url_to_fs

    fs, path = url_to_fs(url)
    fs.invalidate_cache()
    return bool(fs.exists(path))


@dataclass(frozen=True)
class _ShardsOfOtherRuns:
    """`write_shards`' check: the ``shard.json`` URLs that no longer describe a shard of this run (another run
    rewrote them with other settings, or from another source)."""

    config_hash: str
    files: tuple[str, ...]

    def __call__(self, urls: list[str]) -> list[str]:
        return [url for url in urls if _shard_info(url, self.config_hash, self.files) is None]


def _shard_info(url: str, config_hash: str, files: Sequence[str]) -> dict[str, Any] | None:
    """What the ``shard.json`` at `url` says, when it certifies a shard of these settings from one of `files`."""
    from zephyr.fs import url_to_fs

    url_to_fs(url)[0].invalidate_cache()
    try:
        marker = StagedWork(url, SHARD_MARKER_KIND, config_hash).done()
    except FileNotFoundError:
        return None
    info = marker.payload if marker is not None else {}
    return info if info.get("source") in files else None


def _read_shard_records(
    urls: Sequence[str], files: Sequence[str], config_hash: str, split: bool
) -> dict[int, tuple[ShardRecord, ShardRecord | None]]:
    """The shard records the writers reported, keyed by store shard index; ``path`` holds the shard's full
    location. A record whose ``shard.json`` is gone or describes other settings or another source (a
    store another run is writing) is left out: the caller reports it."""
    found: dict[int, dict[str, ShardRecord]] = {}
    for url in urls:
        info = _shard_info(url, config_hash, files)
        if info is None:
            continue
        index = files.index(info["source"])
        kind = "validation" if info["path"].startswith("validation/") else "train"
        found.setdefault(index, {})[kind] = ShardRecord.from_json({**info, "path": url.rsplit("/shard.json", 1)[0]})
    out: dict[int, tuple[ShardRecord, ShardRecord | None]] = {}
    for index, kinds in found.items():
        if "train" in kinds and (not split or "validation" in kinds):
            out[index] = (kinds["train"], kinds.get("validation"))
    return out


def _promote(out: str, staging: str, staged: Sequence[int], split: bool) -> None:
    """Move the shards written to ``staging`` over the store's, after removing its manifest: the store
    reads as incomplete only during these renames, and a crash inside them is repaired by a rerun (the
    moved shards are complete and reused)."""
    from zephyr.fs import join, url_to_fs

    if not staged:
        return
    fs, _ = url_to_fs(out)
    for name in ("manifest.json", "validation/manifest.json"):
        _remove_tree(join(out, name))
    for index in staged:
        for rel in (_train_relpath(index), _validation_relpath(index)) if split else (_train_relpath(index),):
            _remove_tree(join(out, rel))
            src, dst = url_to_fs(join(staging, rel))[1], url_to_fs(join(out, rel))[1]
            fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
            fs.mv(src, dst, recursive=True)
            fs.invalidate_cache()


def _remove_tree(url: str) -> None:
    from zephyr.fs import url_to_fs

    fs, path = url_to_fs(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=True)
    fs.invalidate_cache()


def _check_remote_output(url: str) -> None:
    from zephyr.fs import url_to_fs

    fs, path = url_to_fs(url)
    try:
        is_file = fs.isfile(path)
    except OSError as exc:
        raise OSError(f"output {url}: cannot reach the bucket ({exc}); check the URL and the credentials.") from exc
    if is_file:
        raise NotADirectoryError(
            f"output {url} is an object, not a prefix; a token store is a directory: "
            f"choose another output, e.g. {url}-store."
        )


def _remove_stale(out: str, num_shards: int, keep_validation: bool) -> None:
    """Drop what an earlier store at ``out`` had that the manifest just written no longer lists.

    Shard directories past this run's file count, and a ``validation/`` split when this run makes
    none: a reader would otherwise find an old validation store overlapping the new training data.
    Local directory or bucket.
    """
    from zephyr.fs import url_to_fs

    fs, root = url_to_fs(out)
    fs.invalidate_cache()

    def remove(path: str, recursive: bool = False) -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=recursive)
        fs.invalidate_cache()

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


def _has_field(files: Sequence[str], field: str, format: str | None) -> bool:
    """Whether the inputs can be read with `field` among their columns: a row format always (a missing key
    reads as None); a columnar one when the first file's schema has it."""
    from zephyr.engine.io import format_named, infer_format

    if not files:
        return False
    first = files[0]
    fmt = format_named(format or infer_format(first))
    if fmt.schema is None:
        return True
    try:
        return fmt.schema(first).get_field_index(field) >= 0
    except Exception:  # noqa: BLE001 - unreadable here: the reader reports it properly
        return False
