"""A token store is replaced only by a complete new one (issue #17 item 1), written by an engine sink."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest
import zstandard

from zephyr import execution
from zephyr.errors import BadInputError
from zephyr.tokenize import open_store, tokenize_dataset, verify_store
from zephyr.tokenize.cli import add_cli


def _write(path: Path, docs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(orjson.dumps(d) for d in docs) + b"\n"))


@pytest.fixture
def inputs(tmp_path):
    for k in range(3):
        _write(
            tmp_path / "in" / f"part-{k}.jsonl.zst",
            [{"id": f"{k}-{i}", "text": f"document {k} number {i}, with words.", "source": "t"} for i in range(5)],
        )
    return tmp_path


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="zephyr")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def test_wrong_text_field_fails_and_keeps_the_store(inputs, scratch, capsys, monkeypatch):
    monkeypatch.setenv("ZEPHYR_SCRATCH", scratch)
    store = inputs / "store"
    glob = str(inputs / "in" / "*.jsonl.zst")
    assert _cli(["tokenize", glob, str(store), "--backend", "local"]) == 0
    before = _snapshot(store)
    capsys.readouterr()
    assert _cli(["tokenize", glob, str(store), "--backend", "local", "--text-field", "body"]) == 2
    err = capsys.readouterr().err
    assert "has a string field 'body'" in err and "'id', 'source', 'text'" in err and "--text-field" in err
    assert _snapshot(store) == before  # not a byte changed, no staging left behind
    assert verify_store(store).ok and open_store(store).num_documents == 15


def test_a_failed_replacement_leaves_the_old_store_and_a_good_one_replaces_it(inputs, scratch):
    store = inputs / "store"
    glob = str(inputs / "in" / "*.jsonl.zst")
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        first = tokenize_dataset(glob, store)
        before = _snapshot(store)
        # a replacement with other settings whose last file has no text: shards 0 and 1 are written (staged)
        _write(inputs / "in" / "part-2.jsonl.zst", [{"id": "x", "body": "no text field here"}])
        with pytest.raises(BadInputError, match=r"part-2.jsonl.zst: none of its 1 records has a string field 'text'"):
            tokenize_dataset(glob, store, add_bos=True)
        assert {k: v for k, v in _snapshot(store).items() if not k.startswith(".next/")} == before
        assert verify_store(store).ok and open_store(store).num_documents == first.manifest["documents"]
        # the complete replacement switches every shard, and leaves no staging directory
        _write(inputs / "in" / "part-2.jsonl.zst", [{"id": "y", "text": "one document"}])
        again = tokenize_dataset(glob, store, add_bos=True)
    # the staged shards 0 and 1 of the failed run are complete: resumed, not rewritten
    assert again.manifest["documents"] == 11 and (again.shards_written, again.shards_reused) == (1, 2)
    assert not (store / ".next").exists()
    assert verify_store(store).ok
    reopened = open_store(store)
    assert all(int(reopened.document(i)[0]) == reopened.tokenizer["bos_id"] for i in range(reopened.num_documents))


def test_store_writing_is_an_engine_sink(inputs, scratch, capsys):
    with execution(backend="local", scratch=scratch, summary=False, progress=False, dry_run=True):
        result = tokenize_dataset(str(inputs / "in" / "*.jsonl.zst"), inputs / "store")
    assert "write_token_store(" in capsys.readouterr().out
    assert result.manifest == {} and not (inputs / "store").exists()  # a dry run writes nothing


def test_verify_flags_stray_files_and_a_rerun_removes_them(inputs, scratch):
    store = inputs / "store"
    glob = str(inputs / "in" / "*.jsonl.zst")
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        tokenize_dataset(glob, store)
        dead = store / "shards" / "00001" / ".tmp-0123456789abcdef0123456789abcdef-offsets.npy"
        dead.write_bytes(b"half")  # what a writer killed (or out of disk) while closing a shard leaves
        report = verify_store(store)
        assert not report.ok and any("stray file shards/00001/.tmp-" in p for p in report.problems)
        tokenize_dataset(glob, store)
    assert not dead.exists() and verify_store(store).ok


def test_an_id_field_no_record_has_fails_and_keeps_the_store(inputs, scratch, capsys, monkeypatch):
    """`--id-field nope` exited 0 and wrote `id: None` for every document of the store's index."""
    monkeypatch.setenv("ZEPHYR_SCRATCH", scratch)
    store = inputs / "store"
    glob = str(inputs / "in" / "*.jsonl.zst")
    assert _cli(["tokenize", glob, str(store), "--backend", "local", "--id-field", "source"]) == 0
    before = _snapshot(store)
    capsys.readouterr()
    assert _cli(["tokenize", glob, str(store), "--backend", "local", "--id-field", "nope"]) == 2
    assert "no record has field 'nope'" in capsys.readouterr().err
    # the live store stays (shards staged in .next/ for a replacement are kept for a rerun to resume, as for
    # any failed replacement)
    assert {k: v for k, v in _snapshot(store).items() if not k.startswith(".next/")} == before
    assert verify_store(store).ok


def test_a_failed_tokenize_is_reported_as_failed_not_succeeded(inputs, scratch, capsys, monkeypatch):
    """The command printed its error and exited 2, then its summary said "zephyr tokenize succeeded"."""
    from zephyr.cli import main

    monkeypatch.setenv("ZEPHYR_SCRATCH", scratch)
    glob = str(inputs / "in" / "*.jsonl.zst")
    assert main(["tokenize", glob, str(inputs / "store"), "--backend", "local", "--text-field", "body"]) == 2
    err = capsys.readouterr().err
    assert "zephyr tokenize failed in" in err and "succeeded" not in err


def test_checkpoints_of_a_store_another_run_rewrote_are_redone_in_one_run(inputs, tmp_path):
    """A killed run's checkpoints name shards that a later run with other settings rewrote: the resumed run
    reruns them. The second pass it used to take planned the same shards again, resumed the same checkpoints,
    and failed saying that another run was writing the store."""
    store, glob = inputs / "store", str(inputs / "in" / "*.jsonl.zst")
    scratch = str(tmp_path / "kept-scratch")
    with execution(backend="local", scratch=scratch, summary=False, progress=False, keep_scratch=True):
        first = tokenize_dataset(glob, store)  # its checkpoints stay, as a killed run's do
        (store / "manifest.json").unlink()  # killed before its manifest: the next run writes in place
        tokenize_dataset(glob, store, add_bos=True)  # every shard.json now certifies other settings
        (store / "manifest.json").unlink()
        again = tokenize_dataset(glob, store)
    assert again.manifest["documents"] == first.manifest["documents"] and again.shards_reused == 0
    assert verify_store(store).ok
    reopened = open_store(store)
    assert all(int(reopened.document(i)[0]) != reopened.tokenizer["bos_id"] for i in range(reopened.num_documents))
