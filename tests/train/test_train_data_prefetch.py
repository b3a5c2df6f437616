"""The trainer's read-ahead (BatchPrefetcher) and the rows each host reads (host_rows)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from zephyr.train.config import ConfigError, DataConfig
from zephyr.train.data import BatchPrefetcher, host_rows, make_mixture


@pytest.mark.parametrize("ahead", [0, 1, 3])
def test_prefetched_batches_are_the_steps_batches(tiny_config, ahead):
    mixture = make_mixture(tiny_config().data)
    with BatchPrefetcher(mixture, 4, range(4), start=5, stop=12, ahead=ahead) as batches:
        got = [batches.get(step) for step in range(5, 12)]
        with pytest.raises(ValueError, match="asked for step 3, the next one is 12"):
            batches.get(3)
    assert all(np.array_equal(g, mixture.batch(step, 4)) for g, step in zip(got, range(5, 12), strict=True))


def test_a_host_reads_its_rows_only(tiny_config):
    mixture = make_mixture(tiny_config().data)
    with BatchPrefetcher(mixture, 8, range(2, 6), start=0, stop=2, ahead=1) as batches:
        assert np.array_equal(batches.get(0), mixture.batch(0, 8)[2:6])
        assert np.array_equal(batches.get(1), mixture.batch(1, 8)[2:6])


def test_a_read_error_reaches_the_training_loop(tiny_config, tmp_path):
    """A store that breaks under a running job (a shard file gone): the step that needs it raises it."""
    data = tiny_config().data
    store = tmp_path / "store"
    shutil.copytree(data.train["articles"][0], store)
    mixture = make_mixture(DataConfig(train={"a": (str(store), 1.0)}, seq_len=64, batch_size=4))
    for shard in sorted((store / "shards").iterdir()):
        (shard / "tokens.bin").unlink()
    batches = BatchPrefetcher(mixture, 4, range(4), start=0, stop=10, ahead=2)
    with pytest.raises(FileNotFoundError, match=r"tokens\.bin"):
        batches.get(0)
    batches.close()


def test_host_rows_of_one_process_are_the_whole_batch():
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
    assert host_rows(sharding, 8, 16) == range(0, 8)


def test_data_config_checks_the_new_fields(tmp_path: Path):
    with pytest.raises(ConfigError, match="data.prefetch must be >= 0"):
        DataConfig(prefetch=-1)
    with pytest.raises(ConfigError, match="data.bucket_reads must be 'ranges'"):
        DataConfig(bucket_reads="mirror")  # type: ignore[arg-type]
