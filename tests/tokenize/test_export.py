"""Exports: Megatron `.bin`/`.idx` read back by an independent reader, and the per-document index."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
import zstandard

from zephyr import execution
from zephyr.tokenize import open_store, tokenize_dataset

REPO = Path(__file__).resolve().parents[2]

TEXTS = [
    "The first document talks about rivers and the sea.",
    "Zweites Dokument: Größe, Maß und Gewicht.",
    "A third, longer document. " * 30,
    "第四个文档：中文文本。",
    "x",
]


def read_megatron(prefix: str) -> tuple[str, list[np.ndarray], np.ndarray]:
    """An independent MMapIndexedDataset reader, written from the documented .idx layout:

    9-byte magic b"MMIDIDX\\x00\\x00", <Q version (1), <B dtype code, <Q sequence count, <Q document
    count, int32 sequence lengths, int64 sequence byte offsets into .bin, int64 document indices.
    """
    codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
    raw = Path(prefix + ".idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", raw, 9)
    (code,) = struct.unpack_from("<B", raw, 17)
    sequences, documents = struct.unpack_from("<QQ", raw, 18)
    assert version == 1
    offset = 34
    lengths = np.frombuffer(raw, np.int32, sequences, offset)
    offset += lengths.nbytes
    pointers = np.frombuffer(raw, np.int64, sequences, offset)
    offset += pointers.nbytes
    doc_index = np.frombuffer(raw, np.int64, documents, offset)
    assert offset + doc_index.nbytes == len(raw), "nothing after the document indices"
    dtype = np.dtype(codes[code])
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    seqs = [data[p // dtype.itemsize : p // dtype.itemsize + n] for p, n in zip(pointers, lengths, strict=True)]
    return dtype.name, seqs, doc_index


@pytest.fixture
def store(tmp_path, scratch):
    folder = tmp_path / "in"
    folder.mkdir()
    docs = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(TEXTS * 3)]
    for k in range(2):
        payload = b"\n".join(orjson.dumps(d) for d in docs[k::2]) + b"\n"
        (folder / f"part-{k}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(payload))
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        tokenize_dataset(str(folder / "*.jsonl.zst"), tmp_path / "store", validation_fraction=0.2)
    return tmp_path / "store", docs


def test_megatron_export_reads_back_identical_documents(store, tmp_path):
    path, _ = store
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "export",
            "megatron",
            str(path),
            str(tmp_path / "mega" / "web_text_document"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    opened = open_store(path)
    dtype, seqs, doc_index = read_megatron(str(tmp_path / "mega" / "web_text_document"))
    assert dtype == "uint16"
    assert len(seqs) == opened.num_documents > 0
    for i, seq in enumerate(seqs):
        assert seq.tolist() == opened.document(i).tolist()
    assert doc_index.tolist() == list(range(opened.num_documents + 1))
    # and the validation split on request
    from zephyr.tokenize.export import export_megatron

    export_megatron(path, tmp_path / "mega" / "val", split="validation")
    _, val_seqs, _ = read_megatron(str(tmp_path / "mega" / "val"))
    assert [s.tolist() for s in val_seqs] == [
        opened.validation.document(i).tolist() for i in range(opened.validation.num_documents)
    ]


def test_every_store_has_a_document_index(store):
    path, docs = store
    opened = open_store(path)
    index = opened.document_index()
    assert index.column_names == ["document", "shard", "id", "source", "start", "end"]
    rows = index.to_pylist()
    assert len(rows) == opened.num_documents
    by_id = {d["id"]: d["text"] for d in docs}
    for row in rows:
        assert row["id"] in by_id and row["source"].endswith(".jsonl.zst")
        assert opened.tokens(row["start"], row["end"]).tolist() == opened.document(row["document"]).tolist()
    train_ids = {r["id"] for r in rows}
    val_ids = {r["id"] for r in opened.validation.document_index().to_pylist()}
    assert train_ids | val_ids == set(by_id) and not train_ids & val_ids
    shard_file = path / opened.manifest["shards"][0]["path"] / "documents.parquet"
    assert "documents.parquet" in opened.manifest["shards"][0]["xxh3_64"] and shard_file.is_file()
