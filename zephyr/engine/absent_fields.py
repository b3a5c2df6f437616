"""Fields read by value that are absent: a typo when no record has the field, ordinary when some lack it.

A filter reading a field that no record has would quietly keep nothing (`col("lagn") == "en"`), so that is
an error, as in polars (ColumnNotFoundError). But a field absent from some files or shards only is
ordinary: jsonl written by several sources, a `filter_reason` set on some documents only, so that a shard
whose documents all passed has none. Judging file by file made `filter(col("lang") == "en")` fail on the
one file without `lang`. So inside an engine task the readers and the pipeline only count, per file or
shard they checked, which fields it lacked (`note`), and the driver judges each stage over all of them
(`check_stage`): an error only when every file or shard checked lacked the field. Outside a task (a direct
`read_records` of one file) that file is the whole input and `note` raises at once. The same goes for a
field a key or sort key reads (`group_by("lang")`, `sort("ts")`) and a field named for document ids.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from zephyr import counters
from zephyr.errors import BadInputError

__all__ = ["ABSENT", "FieldPresence", "check_stage", "counted", "fields_read", "note", "noting_fields"]

ABSENT = "fields/parts_without:"  # files or shards read that lacked the field (kept in the summary)
_CHECKED = "fields/_parts_checked:"  # how many were checked (dropped once the stage is judged)
_in_task: contextvars.ContextVar[bool] = contextvars.ContextVar("zephyr_absent_fields_counted", default=False)


@contextlib.contextmanager
def counted() -> Iterator[None]:
    """Within the block (an engine task), `note` counts instead of raising."""
    token = _in_task.set(True)
    try:
        yield
    finally:
        _in_task.reset(token)


def note(fields: Iterable[str], missing: Iterable[str], message: Callable[[], str]) -> None:
    """One file or shard with records was checked for the `fields` read by value; `missing` it lacked."""
    absent = sorted(missing)
    if not _in_task.get():
        if absent:
            raise BadInputError(message())
        return
    for field in fields:
        counters.increment(_CHECKED + field)
    for field in absent:
        counters.increment(ABSENT + field)


def check_stage(stage_name: str, stage_counters: dict[str, int]) -> None:
    """Raise when every file or shard of the stage that was checked lacked a field read by value; drop the
    check counts from `stage_counters` (what stays: how many lacked a field, when some did)."""
    for key in [k for k in stage_counters if k.startswith(_CHECKED)]:
        checked = stage_counters.pop(key)
        field = key[len(_CHECKED) :]
        if stage_counters.get(ABSENT + field, 0) >= checked:
            raise BadInputError(
                f"{stage_name}: no record has field {field!r}, which a filter, key or sort key (or a field named "
                f"for ids) reads (none of the {checked} file(s) or shard(s) read has it). Fix the field name, or use "
                f"a function (lambda r: ...) or col({field!r}).is_null() if the field is optional."
            )


class FieldPresence:
    """Which of `fields` no record of a file or shard had so far, and its first record (the message names its
    fields). Once every field has appeared, `see` costs one test per record."""

    __slots__ = ("fields", "missing", "first")

    def __init__(self, fields: Iterable[str]) -> None:
        self.fields = frozenset(fields)
        self.reset()

    def reset(self) -> None:
        self.missing = set(self.fields)
        self.first: Any = None

    def see(self, record: Any) -> None:
        if self.missing:
            if self.first is None:
                self.first = record
            if isinstance(record, dict):
                self.missing -= record.keys()

    def see_batch(self, batch: Any) -> None:
        """An Arrow batch: its columns are its records' fields."""
        if self.missing and batch.num_rows:
            self.see(dict.fromkeys(batch.schema.names))

    def note(self, message: Callable[[list[str], dict], str]) -> None:
        """At the end of the file or shard: `note` which fields none of its records had; `message(missing,
        first)` says so when it is an error at once. A file or shard without dict records says nothing."""
        if isinstance(self.first, dict):
            missing, first = sorted(self.missing), self.first
            note(self.fields, missing, lambda: message(missing, first))


def fields_read(*fns: Any) -> set[str]:
    """The fields that key or sort-key functions read by value: those of expressions (`col("ts")`)."""
    names: set[str] = set()
    for fn in fns:
        value_columns = getattr(fn, "value_columns", None)
        if callable(value_columns):
            names |= set(value_columns())
    return names


def noting_fields(stream: Iterable[Any], fields: set[str], where: str) -> Iterator[Any]:
    """Pass `stream` (records, Arrow batches, or both: an aggregate's Python fold yields records among its
    batches) through, then `note` which of `fields` none of them had."""
    presence = FieldPresence(fields)
    items = iter(stream)
    for item in items:
        if isinstance(item, pa.RecordBatch | pa.Table):
            presence.see_batch(item)
        else:
            presence.see(item)
        yield item
        if not presence.missing:
            yield from items  # every field has appeared: the rest of the shuffle's input passes untouched
    presence.note(
        lambda missing, first: (
            f"{where}: no record has field(s) {', '.join(map(repr, missing))}; the first has {', '.join(sorted(first))}"
        )
    )
