"""memory:// works where one process does all the work, and is refused where it cannot (issue #17 item 4)."""

from __future__ import annotations

import uuid

import pytest

from zephyr import Dataset, execution
from zephyr.errors import PlanError


def test_memory_urls_under_the_processes_backend_are_refused(scratch):
    url = f"memory://zephyr-{uuid.uuid4().hex[:8]}/part-{{shard:05d}}.jsonl"
    with (
        execution(backend="processes", workers=2, scratch=scratch, summary=False, progress=False),
        pytest.raises(PlanError, match=r"output 'memory://.*each process has its own.*backend='local'"),
    ):
        Dataset.from_list([{"a": 1}, {"a": 2}], num_shards=2).write_jsonl(url)


def test_memory_urls_work_on_the_local_backend(scratch):
    url = f"memory://zephyr-{uuid.uuid4().hex[:8]}/part-{{shard:05d}}.jsonl"
    with execution(backend="local", scratch=scratch, summary=False, progress=False):
        paths = Dataset.from_list([{"a": 1}, {"a": 2}], num_shards=2).write_jsonl(url)
        assert sorted(r["a"] for r in Dataset.from_files(url.replace("{shard:05d}", "*")).collect()) == [1, 2]
    assert len(paths) == 2
