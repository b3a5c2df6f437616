"""Hugging Face `save_to_disk` folders, read and written, checked against the `datasets` package itself.

A user's `Dataset.from_files` on a save_to_disk folder skipped the `.arrow` file and read
`dataset_info.json` as records. Here `datasets` writes folders (one Dataset in several data files, a
DatasetDict) and Zephyr must read exactly their records, in order, and never their JSON metadata;
Zephyr's `write_hf` output must load with `datasets.load_from_disk` as the same records.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

from zephyr import Dataset, execution
from zephyr.errors import BadInputError

datasets = pytest.importorskip("datasets")
REPO = Path(__file__).resolve().parents[2]


def _records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": f"doc-{i:04d}",
            "text": " ".join(rng.choice(["alpha", "beta", "gamma", "δέλτα", "ε"]) for _ in range(rng.randint(0, 12))),
            "score": rng.random() * 5,
            "tags": [rng.choice("xyz") for _ in range(rng.randint(0, 3))],
            "meta": {"source": rng.choice(["a", "b"]), "n": i},
        }
        for i in range(n)
    ]


@pytest.fixture(autouse=True)
def _quiet():
    with execution(backend="local", summary=False, progress=False):
        yield


def test_from_files_reads_a_save_to_disk_folder_and_not_its_metadata(tmp_path):
    records = _records(120)
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "hf"), num_shards=3)
    assert sorted(p.name for p in (tmp_path / "hf").iterdir() if p.suffix == ".json") == [
        "dataset_info.json",
        "state.json",
    ]
    got = Dataset.from_files(str(tmp_path / "hf")).collect()
    assert got == records  # every record, in save order, and nothing from the JSON files
    assert Dataset.from_hf(str(tmp_path / "hf"), columns=["id"]).collect() == [{"id": r["id"]} for r in records]


def test_a_folder_read_recursively_never_takes_hf_metadata_as_records(tmp_path, caplog):
    records = _records(10)
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "data" / "hf"))
    with caplog.at_level(logging.WARNING, logger="zephyr"):
        got = Dataset.from_files(str(tmp_path / "data")).collect()
    assert got == records
    assert "not reading 2 Hugging Face metadata file(s)" in caplog.text


def test_a_datasetdict_folder_is_read_by_split_and_refused_whole(tmp_path):
    train, test = _records(30, seed=1), _records(7, seed=2)
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(train), "test": datasets.Dataset.from_list(test)}
    ).save_to_disk(str(tmp_path / "dd"))
    assert Dataset.from_hf(str(tmp_path / "dd"), split="test").collect() == test
    assert Dataset.from_hf(str(tmp_path / "dd"), split="train").count() == 30
    with pytest.raises(BadInputError, match=r"DatasetDict folder with splits train, test: read one split"):
        Dataset.from_files(str(tmp_path / "dd")).collect()
    with pytest.raises(ValueError, match=r"splits train, test; it has no split 'validation'"):
        Dataset.from_hf(str(tmp_path / "dd"), split="validation")


def test_write_hf_loads_with_datasets_load_from_disk(tmp_path):
    records = _records(200, seed=3)
    paths = Dataset.from_list(records, num_shards=4).write_hf(str(tmp_path / "out"))
    assert [Path(p).name for p in paths] == [f"data-{i:05d}-of-00004.arrow" for i in range(4)]
    loaded = datasets.load_from_disk(str(tmp_path / "out"))
    assert loaded.to_list() == records
    assert Dataset.from_files(str(tmp_path / "out")).collect() == records  # and Zephyr reads it back


def test_write_hf_splits_make_a_datasetdict(tmp_path):
    train, test = _records(40, seed=4), _records(5, seed=5)
    Dataset.from_list(train, num_shards=2).write_hf(str(tmp_path / "dd"), split="train")
    Dataset.from_list(test).write_hf(str(tmp_path / "dd"), split="test")
    loaded = datasets.load_from_disk(str(tmp_path / "dd"))
    assert set(loaded) == {"train", "test"}
    assert loaded["train"].to_list() == train and loaded["test"].to_list() == test
    assert json.loads((tmp_path / "dd" / "dataset_dict.json").read_text()) == {"splits": ["train", "test"]}


def test_shards_with_different_fields_share_one_schema(tmp_path):
    """Each shard writes its own records' schema; the folder is unified so `datasets` reads it as one table."""
    records = [{"id": 1, "score": 1}, {"id": 2, "score": 2}, {"id": 3, "score": 2.5, "lang": "en"}]
    Dataset.from_list(records, num_shards=3).write_hf(str(tmp_path / "out"))
    loaded = datasets.load_from_disk(str(tmp_path / "out")).to_list()
    assert loaded == [
        {"id": 1, "score": 1.0, "lang": None},
        {"id": 2, "score": 2.0, "lang": None},
        {"id": 3, "score": 2.5, "lang": "en"},
    ]


def test_a_damaged_arrow_file_names_the_file(tmp_path):
    datasets.Dataset.from_list(_records(50)).save_to_disk(str(tmp_path / "hf"))
    data = next((tmp_path / "hf").glob("*.arrow"))
    data.write_bytes(data.read_bytes()[:300])
    with pytest.raises(BadInputError, match=data.name):
        Dataset.from_files(str(tmp_path / "hf")).collect()


def test_the_embedded_sample_round_trips_through_a_hf_folder(tmp_path):
    """The recipe's embedded sample, written as a DatasetDict (one split per quality split) and loaded by
    `datasets`, then read back by Zephyr: the same documents."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nemotron_sample_hf_test", REPO / "recipes" / "nemotron_sample.py")
    sample_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample_module)
    sample = sample_module.build_sample(tmp_path / "sample", docs_per_split=20)
    splits = sorted(p.name for p in sample.iterdir() if p.is_dir())
    for split in splits:
        Dataset.from_files(str(sample / split / "*.jsonl.zst")).write_hf(str(tmp_path / "hf"), split=split)
    loaded = datasets.load_from_disk(str(tmp_path / "hf"))
    assert sorted(loaded) == splits
    for split in splits:
        original = Dataset.from_files(str(sample / split / "*.jsonl.zst")).collect()
        assert loaded[split].to_list() == Dataset.from_hf(str(tmp_path / "hf"), split=split).collect()
        assert [d["warc_record_id"] for d in loaded[split]] == [d["warc_record_id"] for d in original]
