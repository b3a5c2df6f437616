"""Column-wise key encoding (encode_array) gives exactly the bytes of `encode`, value by value."""

from __future__ import annotations

import random

import pyarrow as pa

from zephyr.engine.sortkey import decode, encode, encode_array


def test_encode_array_of_bytes_gives_the_bytes_of_encode():
    rng = random.Random(0)
    values = [b"", b"\x00", b"\x00\x00", b"\x00\xff", b"a\x00b", b"\xff" * 3]
    values += [bytes(rng.choice(b"\x00\x01\xfe\xffab") for _ in range(rng.randrange(12))) for _ in range(500)]
    for kind in (pa.binary(), pa.large_binary()):
        encoded = encode_array(pa.array(values, kind)).to_pylist()
        assert encoded == [encode(v) for v in values]
        assert [decode(e) for e in encoded] == values
        assert sorted(range(len(values)), key=encoded.__getitem__) == sorted(range(len(values)), key=values.__getitem__)


def test_encode_array_of_strings_is_unchanged():
    values = ["", "a", "a\x00", "é", "zz"]
    assert encode_array(pa.array(values)).to_pylist() == [encode(v) for v in values]
