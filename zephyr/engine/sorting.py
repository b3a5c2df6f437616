"""`Dataset.sort`'s pieces: the sort key (ascending, or descending as the exact reverse), the sampling pass
that picks the range boundaries, the check that refuses keys Python cannot order against each other, and the
reducer that emits each range in order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from zephyr.engine import ops as O
from zephyr.engine.absent_fields import fields_read

__all__ = ["KeyKinds", "SampleKeys", "SortKey", "check_sort_kinds", "constant_key", "emit_in_order"]


@dataclass(frozen=True)
class SortKey:
    """The sort key of a record; a descending one is wrapped in `sortkey.Descending`, whose encoding is
    the byte-complement of the ascending one (the exact reverse order, for any orderable key type)."""

    key: Callable[[Any], Any]
    descending: bool

    @property
    def display_name(self) -> str:
        return O.display_name(self.key) + (" desc" if self.descending else "")

    def value_columns(self) -> set[str]:
        """The fields the key reads by value (a field name given to `sort`), checked like a filter's."""
        return fields_read(self.key)

    def __call__(self, record: Any) -> Any:
        value = self.key(record)
        if not self.descending:
            return value
        from zephyr.engine.sortkey import Descending

        return Descending(value)


@dataclass(frozen=True)
class SampleKeys:
    """Up to `k` encoded sort keys of a shard, sampled uniformly (reservoir sampling, fixed seed), then
    one `KeyKinds`: the first record of each kind of key the shard holds (a number, a str, ...), so that
    `sort` refuses keys Python cannot order against each other before anything is shuffled."""

    sort_key: SortKey
    k: int

    def __call__(self, records: Iterable[Any]) -> Iterable[Any]:
        import random

        from zephyr.engine.sortkey import Descending, encode, key_kind

        rng = random.Random(0x5EED)
        reservoir: list[bytes] = []
        kinds: dict[str, tuple[Any, Any]] = {}
        key, descending = self.sort_key.key, self.sort_key.descending
        for seen, record in enumerate(records):
            value = key(record)
            kind = key_kind(value)
            if kind not in kinds:
                kinds[kind] = (value, record)
            slot = seen if seen < self.k else rng.randrange(seen + 1)
            if slot < self.k:
                encoded = encode(Descending(value) if descending else value)
                if seen < self.k:
                    reservoir.append(encoded)
                else:
                    reservoir[slot] = encoded
        yield from reservoir
        yield KeyKinds(kinds)


@dataclass(frozen=True)
class KeyKinds:
    """Per kind of sort key a shard holds (`sortkey.key_kind`), its first key and record."""

    first: dict[str, tuple[Any, Any]]


def check_sort_kinds(found: list[KeyKinds], key: Any) -> None:
    """Refuse a sort over keys of kinds Python cannot order against each other (None orders with all)."""
    from zephyr.engine.ops import preview
    from zephyr.engine.sortkey import UnorderableKeysError, describe_kind

    kinds: dict[str, tuple[Any, Any]] = {}
    for shard in found:
        for kind, first in shard.first.items():
            kinds.setdefault(kind, first)
    kinds.pop("None", None)
    unordered = [kind for kind in kinds if kind == "other"]
    if len(kinds) < 2 and not unordered:
        return
    shown = [kinds[k] for k in (unordered or list(kinds)[:2])]
    what = " and ".join(f"{describe_kind(value)} (record {preview(record)})" for value, record in shown)
    raise UnorderableKeysError(
        f"sort(key={O.display_name(key)}): sort keys Python cannot order against each other: {what}. "
        "Make the sort key one kind for every record (numbers, str, bytes, dates, datetimes or tuples of them), "
        "e.g. str(value) or float(value), or None for a missing value (None sorts first)"
    )


def constant_key(record: Any) -> int:
    """Every record's key in a sort's shuffle: ranges, not keys, pick the target."""
    return 0


def emit_in_order(key: Any, items: Iterable[Any]) -> Iterable[Any]:
    """A sort's reducer: the range's records, in the order the shuffle merged them."""
    yield from items


emit_in_order.display_name = "sort"  # type: ignore[attr-defined]
