"""Every counterexample the differential suite found, shrunk, kept as an explicit test (issue #28 item 5).

Found while the suite was written (besides the issue's own faults, which it finds on the old code within
its bounded profile: ints sorted before floats, 1 and 1.0 two keys, a left 1 missing a right 1.0):

1. `sort(..., num_shards=2)` of an empty dataset raised IndexError while picking range boundaries from
   no samples.
"""

from __future__ import annotations

from zephyr import Dataset, execution


def test_sorting_an_empty_dataset_into_several_shards(tmp_path):
    with execution(backend="local", scratch=str(tmp_path), progress=False, summary=False):
        assert Dataset.from_list([], num_shards=1).sort(lambda r: r["s"], num_shards=2).collect() == []
        assert (
            Dataset.from_list([{"s": 1}], num_shards=1).filter(lambda r: False).sort("s", num_shards=3).collect() == []
        )
