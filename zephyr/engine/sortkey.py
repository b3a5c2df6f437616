"""Order-preserving byte encoding of keys, so shuffles sort and compare plain bytes.

`encode(a) < encode(b)` exactly when `a < b`, for values of the same type among None, bool, int (64-bit),
float, str, bytes and tuples/lists of those (lists come back as tuples). Values of other types are
pickled: still usable as group keys (equality), but their order is arbitrary. Different types order by
type tag (None < bool < int < float < str < bytes < tuple < other).
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["decode", "encode", "encode_array", "encode_column"]

_NONE, _BOOL, _INT, _FLOAT, _STR, _BYTES, _TUPLE, _PICKLE, _BIGINT = range(1, 10)
_INT_OFFSET = 1 << 63
_END = b"\x00\x00"


def _escape(data: bytes) -> bytes:
    # 0x00 is the terminator, so a literal 0x00 becomes 0x00 0xFF (still sorts below any other byte).
    return data.replace(b"\x00", b"\x00\xff") + _END


def encode(value: Any) -> bytes:
    """Encode `value` so that byte order equals value order (see module docstring)."""
    if value is None:
        return b"\x01"
    if value is True or value is False:
        return b"\x02\x01" if value else b"\x02\x00"
    kind = type(value)
    if kind is int:
        if -_INT_OFFSET <= value < _INT_OFFSET:
            return b"\x03" + struct.pack(">Q", value + _INT_OFFSET)
        return bytes([_BIGINT]) + pickle.dumps(value, protocol=5)
    if kind is str:
        return b"\x05" + _escape(value.encode("utf-8", "surrogatepass"))
    if kind is float:
        (bits,) = struct.unpack(">Q", struct.pack(">d", value))
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
        return b"\x04" + struct.pack(">Q", bits)
    if kind is bytes:
        return b"\x06" + _escape(value)
    if kind is tuple or kind is list:
        return b"\x07" + b"".join(encode(v) for v in value) + b"\x00"
    if isinstance(value, int):  # int subclasses such as numpy-free enums
        return encode(int(value))
    if isinstance(value, str):
        return encode(str(value))
    return bytes([_PICKLE]) + pickle.dumps(value, protocol=5)


def encode_column(values: pa.Array) -> list[bytes]:
    """`[encode(v) for v in values.to_pylist()]`, computed column-wise for null-free ints and strings."""
    return encode_array(values).to_pylist()


def encode_array(values: pa.Array) -> pa.Array:
    """`encode` of every item as one large_binary array: column-wise (no Python object per row) for
    null-free ints, strings and bytes, which is what keeps a field-keyed scatter in Arrow."""
    kind = values.type
    n = len(values)
    if values.null_count == 0 and (pa.types.is_signed_integer(kind) or kind in (pa.uint8(), pa.uint16(), pa.uint32())):
        shifted = (
            values.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64) ^ np.uint64(_INT_OFFSET)
        ).astype(">u8")
        rows = np.empty((n, 9), np.uint8)
        rows[:, 0] = _INT
        rows[:, 1:] = shifted.view(np.uint8).reshape(n, 8)
        offsets = np.arange(0, 9 * n + 1, 9, dtype=np.int64)
        return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(rows)])
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if values.null_count == 0 and (text or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raw = pc.replace_substring(values.cast(pa.large_binary()), b"\x00", b"\x00\xff")

        def bind(b: bytes) -> pa.Scalar:
            return pa.scalar(b, pa.large_binary())

        return pc.binary_join_element_wise(bind(bytes([_STR if text else _BYTES])), raw, bind(_END), bind(b""))
    return binary_array([encode(v) for v in values.to_pylist()])


def binary_array(items: list[bytes]) -> pa.Array:
    """A large_binary array built at its exact size (the generic builder over-allocates by doubling)."""
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, len(items)), out=offsets[1:])
    data = b"".join(items)
    return pa.Array.from_buffers(pa.large_binary(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def decode(data: bytes) -> Any:
    """Inverse of `encode` (lists come back as tuples)."""
    value, end = _decode_at(data, 0)
    if end != len(data):
        raise ValueError(f"trailing bytes after encoded key at offset {end} of {len(data)}")
    return value


def _unescape_at(data: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        nul = data.index(b"\x00", pos)
        out += data[pos:nul]
        if data[nul + 1] == 0xFF:
            out.append(0)
            pos = nul + 2
        else:  # 0x00 0x00 terminator
            return bytes(out), nul + 2


def _decode_at(data: bytes, pos: int) -> tuple[Any, int]:
    tag = data[pos]
    pos += 1
    if tag == _NONE:
        return None, pos
    if tag == _BOOL:
        return bool(data[pos]), pos + 1
    if tag == _INT:
        return struct.unpack_from(">Q", data, pos)[0] - _INT_OFFSET, pos + 8
    if tag == _FLOAT:
        (bits,) = struct.unpack_from(">Q", data, pos)
        bits = bits ^ (1 << 63) if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
        return struct.unpack(">d", struct.pack(">Q", bits))[0], pos + 8
    if tag == _STR:
        raw, pos = _unescape_at(data, pos)
        return raw.decode("utf-8", "surrogatepass"), pos
    if tag == _BYTES:
        return _unescape_at(data, pos)
    if tag == _TUPLE:
        items = []
        while data[pos] != 0:
            item, pos = _decode_at(data, pos)
            items.append(item)
        return tuple(items), pos + 1
    if tag in (_PICKLE, _BIGINT):
        stream = io.BytesIO(data)
        stream.seek(pos)
        value = pickle.load(stream)
        return value, stream.tell()
    raise ValueError(f"unknown key tag {tag} at offset {pos - 1}")
