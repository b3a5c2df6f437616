"""Order-preserving byte encoding of keys, so shuffles hash, sort, group and compare plain bytes.

`encode(a) < encode(b)` exactly when `a < b` in Python, and `encode(a) == encode(b)` exactly when `a == b`,
for the values keys and sort keys are made of. The order, by value:

- None first, below every other value (a missing field reads as None, so it may meet any kind).
- Numbers: bool, int and float in one numeric order, exact as Python compares them (an int beyond 2**53
  against a float too; ints of any size). -0.0 equals 0.0; -inf and inf are the ends; NaN comes after inf
  and all NaNs are one key (polars and numpy sort NaN last as well; Python's own order is undefined there).
  Equal numbers have equal bytes: 1, 1.0 and True are one group key, go to one shuffle target, and a left
  1 matches a right 1.0 in a join.
- str by code point, bytes by byte value; tuples (and lists) element by element, a prefix first.
- datetime.date, datetime (naive; aware ones by their UTC instant), time (naive) and timedelta.
- Any other value is pickled: such keys group by the equality of their pickles and have no order.

Kinds Python cannot order against each other (a number and a str, a date and a datetime) still encode,
in a fixed order of kinds, because group keys only need equality. Sorting them is an error, raised
where two such keys meet: `kinds` and `unorderable` find them (see zephyr.engine.shuffle.gather).

Canonical bytes forget which of several equal numbers a key was (True, 1 or 1.0). `hint(value)` keeps
what `decode` cannot give back: b"" when decoding restores the value (ints, strs, non-integral floats:
nearly every key), else a short tag or the pickled value; `decode_key(data, hint)` restores it. The
shuffle carries the hint beside the key, so a reducer gets its group's key as the group's first record
had it.

Measured (benchmarks/engine_groupby.py): ints and strs are encoded column-wise in Arrow, as before;
floats, bools and null-holding columns are too (see `encode_array`); other values one at a time.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import math
import numbers
import pickle
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import BadInputError

__all__ = [
    "Descending",
    "UnorderableKeysError",
    "binary_array",
    "decode",
    "decode_key",
    "describe_kind",
    "encode",
    "encode_array",
    "encode_column",
    "encode_keys",
    "hint",
    "key_kind",
    "kinds",
    "unorderable",
]

_NONE = 0x01
_NEG_INF, _NEG_BIG, _NEG, _POS, _POS_BIG, _POS_INF, _NAN = 0x10, 0x11, 0x12, 0x14, 0x15, 0x16, 0x17
_STR, _BYTES = 0x20, 0x21
_TUPLE = 0x30
_DATE, _DATETIME, _AWARE, _TIME, _TIMEDELTA = range(0x40, 0x45)
_PICKLE = 0x50
_DESC = 0x60

_SMALL = 1 << 64  # magnitudes below this take 8 bytes, larger ones their length and bytes
_MASK64 = _SMALL - 1
_EXP_OFFSET = 1100  # frexp exponents of a fraction in (0, 1) lie in [-1073, 0]
_END = b"\x00\x00"
_COMPLEMENT = bytes(range(255, -1, -1))  # bytes.translate table: each byte b -> 255 - b
_NUM_INT = struct.Struct(">BQB")  # tag, magnitude (complemented when negative), no fraction (0x00 / 0xFF)
_MAGNITUDE = struct.Struct(">Q")
_FRACTION = struct.Struct(">BHQ")  # 1, exponent + _EXP_OFFSET, 53-bit mantissa (of the magnitude's fraction)
_DATE_PACK = struct.Struct(">BHBB")
_DATETIME_PACK = struct.Struct(">BHBBBBBI")
_TIME_PACK = struct.Struct(">BBBBI")
_TIMEDELTA_PACK = struct.Struct(">BIII")
_BIG_LENGTH = struct.Struct(">I")
_SPECIAL_FLOATS = {_NEG_INF: -math.inf, _POS_INF: math.inf, _NAN: math.nan}

# the kind of each tag, for order checks: 0 (None) orders against anything
NONE, NUMBER, STR, BYTES, TUPLE, DATE, DATETIME, AWARE, TIME, TIMEDELTA, OTHER = range(11)
_KIND_OF_TAG = np.full(256, OTHER, np.uint8)
_KIND_OF_TAG[_NONE] = NONE
_KIND_OF_TAG[_NEG_INF : _NAN + 1] = NUMBER
_KIND_OF_TAG[[_STR, _BYTES, _TUPLE]] = [STR, BYTES, TUPLE]
_KIND_OF_TAG[_DATE : _TIMEDELTA + 1] = [DATE, DATETIME, AWARE, TIME, TIMEDELTA]


class UnorderableKeysError(BadInputError, TypeError):
    """Two sort keys Python cannot order against each other (a number and a str), where they met."""


@dataclass(frozen=True)
class Descending:
    """A sort key in reverse order: its encoding is the byte complement of `value`'s (prefix-free codes
    complement into the exact reverse order), so None comes last."""

    value: Any


def _escape(data: bytes) -> bytes:
    # 0x00 is the terminator, so a literal 0x00 becomes 0x00 0xFF (still sorts below any other byte).
    return data.replace(b"\x00", b"\x00\xff") + _END


def _number(negative: bool, whole: int, fraction: float) -> bytes:
    """A finite number from its sign and its magnitude's integer part and fraction (exact, in [0, 1)).

    The magnitude's bytes order as magnitudes do: 8 bytes of integer part below 2**64 (else a 4-byte
    length and the bytes), then 0x00 for no fraction or 0x01, the fraction's exponent and mantissa. A
    negative number has its magnitude's bytes complemented (prefix-free codes complement into the
    reverse order), under a tag below every positive one: one numeric order for ints and floats."""
    if whole < _SMALL:
        body = struct.pack(">Q", whole)
        tag = _NEG if negative else _POS
    else:
        size = (whole.bit_length() + 7) // 8
        body = _BIG_LENGTH.pack(size) + whole.to_bytes(size, "big")
        tag = _NEG_BIG if negative else _POS_BIG
    if fraction:
        mantissa, exponent = math.frexp(fraction)
        body += _FRACTION.pack(1, exponent + _EXP_OFFSET, int(mantissa * (1 << 53)))
    else:
        body += b"\x00"
    return bytes([tag]) + (body.translate(_COMPLEMENT) if negative else body)


def _float(value: float) -> bytes:
    if value != value:
        return b"\x17"
    if value in (math.inf, -math.inf):
        return b"\x16" if value > 0 else b"\x10"
    negative = value < 0  # -0.0 is not: it equals 0
    magnitude = -value if negative else value
    whole = math.floor(magnitude)
    return _number(negative, whole, magnitude - whole)  # exact: whole >= magnitude / 2 when it is not 0


def _int(value: int) -> bytes:
    if 0 <= value < _SMALL:
        return _NUM_INT.pack(_POS, value, 0)
    if -_SMALL < value < 0:
        return _NUM_INT.pack(_NEG, value + _MASK64, 0xFF)  # the magnitude's complement: 2**64 - 1 - |value|
    return _number(value < 0, abs(value), 0.0)


def encode(value: Any) -> bytes:
    """The bytes of `value` whose order and equality are Python's (see the module docstring)."""
    if value is None:
        return b"\x01"
    kind = type(value)
    if kind is int:
        return _int(value)
    if kind is str:
        return b"\x20" + _escape(value.encode("utf-8", "surrogatepass"))
    if kind is float:
        return _float(value)
    if kind is bool:
        return _NUM_INT.pack(_POS, value, 0)
    if kind is bytes:
        return b"\x21" + _escape(value)
    if kind is tuple or kind is list:
        return b"\x30" + b"".join(map(encode, value)) + b"\x00"
    if kind is Descending:
        return bytes([_DESC]) + bytes(255 - b for b in encode(value.value))
    return _encode_other(value)


def _encode_other(value: Any) -> bytes:
    if isinstance(value, dt.datetime):
        if value.utcoffset() is None:
            return _DATETIME_PACK.pack(_DATETIME, *value.timetuple()[:6], value.microsecond)
        try:
            utc = value.astimezone(dt.UTC)
        except OverflowError:  # an instant outside year 1..9999 in UTC
            return bytes([_PICKLE]) + pickle.dumps(value, protocol=5)
        return _DATETIME_PACK.pack(_AWARE, *utc.timetuple()[:6], utc.microsecond)
    if isinstance(value, dt.date):
        return _DATE_PACK.pack(_DATE, value.year, value.month, value.day)
    if isinstance(value, dt.time) and value.utcoffset() is None:
        return _TIME_PACK.pack(_TIME, value.hour, value.minute, value.second, value.microsecond)
    if isinstance(value, dt.timedelta):
        return _TIMEDELTA_PACK.pack(_TIMEDELTA, value.days + (1 << 31), value.seconds, value.microseconds)
    if isinstance(value, bool) or _is_numpy(value, "b"):
        return encode(bool(value))
    if isinstance(value, numbers.Integral):  # int subclasses (IntEnum), numpy integers
        return encode(int(value))
    if isinstance(value, float) or _is_numpy(value, "f"):  # numpy floating
        return _float(float(value))
    if isinstance(value, str):
        return encode(str(value))
    if isinstance(value, bytes | bytearray):
        return encode(bytes(value))
    return bytes([_PICKLE]) + pickle.dumps(value, protocol=5)


def _is_numpy(value: Any, dtype_kind: str) -> bool:
    return type(value).__module__ == "numpy" and getattr(getattr(value, "dtype", None), "kind", "") == dtype_kind


# ----------------------------------------------------------------------------------------- hints
def hint(value: Any) -> bytes:
    """What `decode_key(encode(value), hint)` needs to give `value` back as it was: b"" when `decode`
    does (None, int, str, bytes, non-integral floats, naive datetimes...), b"b" for a bool, b"f" for an
    integral float, else b"p" and the pickled value (-0.0, an aware datetime, a tuple holding such)."""
    kind = type(value)
    if kind is int or kind is str or value is None or kind is bytes:
        return b""
    if kind is float:
        if not value.is_integer():
            return b""
        return b"f" if value or math.copysign(1.0, value) > 0 else b"p" + pickle.dumps(value, protocol=5)
    if kind is bool:
        return b"b"
    return b"" if _restores(value) else b"p" + pickle.dumps(value, protocol=5)


def _restores(value: Any) -> bool:
    """Whether `decode(encode(value))` gives back `value` with the same types (lists as tuples)."""
    kind = type(value)
    if kind is int or kind is str or value is None or kind is bytes:
        return True
    if kind is float:
        return not value.is_integer()
    if kind is tuple or kind is list:
        return all(map(_restores, value))
    if kind is dt.datetime:
        return value.utcoffset() is None and not value.fold
    if kind is dt.date or kind is dt.timedelta:
        return True
    if kind is dt.time:
        return value.utcoffset() is None and not value.fold
    return encode(value)[0] == _PICKLE


def decode_key(data: bytes, hint: bytes) -> Any:
    """The key `encode` and `hint` were given (see `hint`)."""
    if not hint:
        return decode(data)
    if hint == b"b":
        return bool(decode(data))
    if hint == b"f":
        return float(decode(data))
    return pickle.loads(hint[1:])


# ----------------------------------------------------------------------------------------- decode
def decode(data: bytes) -> Any:
    """The value `data` encodes: numbers as int when integral, else float; lists come back as tuples.
    `decode_key` with the key's hint gives the value as it was."""
    tag = data[0]
    if len(data) == 10 and (tag == _POS and data[9] == 0 or tag == _NEG and data[9] == 0xFF):  # an int, the usual key
        (magnitude,) = _MAGNITUDE.unpack_from(data, 1)
        return magnitude if tag == _POS else magnitude - _MASK64
    if tag == _STR and data.find(b"\x00") == len(data) - 2:  # a str without NUL, the other usual key
        return data[1:-2].decode("utf-8", "surrogatepass")
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


def _decode_number(data: bytes, pos: int, tag: int) -> tuple[Any, int]:
    negative = tag < _POS
    if tag in (_NEG, _POS):
        end = pos + 8
        head = data[pos:end]
    else:
        length = data[pos : pos + 4]
        (size,) = _BIG_LENGTH.unpack(length.translate(_COMPLEMENT) if negative else length)
        end = pos + 4 + size
        head = data[pos + 4 : end]
    whole = int.from_bytes(head.translate(_COMPLEMENT) if negative else head, "big")
    if data[end] == (0xFF if negative else 0):
        return (-whole if negative else whole), end + 1
    fraction = data[end : end + _FRACTION.size]
    _, exponent, mantissa = _FRACTION.unpack(fraction.translate(_COMPLEMENT) if negative else fraction)
    magnitude = float(whole) + math.ldexp(mantissa, exponent - _EXP_OFFSET - 53)  # exact: it was a float
    return (-magnitude if negative else magnitude), end + _FRACTION.size


def _decode_at(data: bytes, pos: int) -> tuple[Any, int]:
    tag = data[pos]
    if _NEG_BIG <= tag <= _POS_BIG:
        return _decode_number(data, pos + 1, tag)
    if tag == _STR:
        raw, end = _unescape_at(data, pos + 1)
        return raw.decode("utf-8", "surrogatepass"), end
    if tag == _NONE:
        return None, pos + 1
    if tag in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[tag], pos + 1
    if tag == _BYTES:
        return _unescape_at(data, pos + 1)
    if tag == _TUPLE:
        items = []
        pos += 1
        while data[pos] != 0:
            item, pos = _decode_at(data, pos)
            items.append(item)
        return tuple(items), pos + 1
    if tag == _DATE:
        _, *fields = _DATE_PACK.unpack_from(data, pos)
        return dt.date(*fields), pos + _DATE_PACK.size
    if tag in (_DATETIME, _AWARE):
        _, year, month, day, hour, minute, second, micro = _DATETIME_PACK.unpack_from(data, pos)
        zone = dt.UTC if tag == _AWARE else None
        return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=zone), pos + _DATETIME_PACK.size
    if tag == _TIME:
        _, *fields = _TIME_PACK.unpack_from(data, pos)
        return dt.time(*fields), pos + _TIME_PACK.size
    if tag == _TIMEDELTA:
        _, days, seconds, micros = _TIMEDELTA_PACK.unpack_from(data, pos)
        return dt.timedelta(days - (1 << 31), seconds, micros), pos + _TIMEDELTA_PACK.size
    if tag == _PICKLE:
        stream = io.BytesIO(data)
        stream.seek(pos + 1)
        value = pickle.load(stream)
        return value, stream.tell()
    if tag == _DESC:
        inner = bytes(255 - b for b in data[pos + 1 :])
        value, end = _decode_at(inner, 0)
        return Descending(value), pos + 1 + end
    raise ValueError(f"unknown key tag {tag} at offset {pos}")


def _skip(data: bytes, pos: int) -> int:
    """The offset just past the encoded value at `pos` (without decoding strings)."""
    tag = data[pos]
    if tag in (_POS, _NEG):
        return pos + 10 if data[pos + 9] in (0, 0xFF) else pos + 9 + _FRACTION.size
    if tag in (_STR, _BYTES):
        while True:
            nul = data.index(b"\x00", pos + 1)
            if data[nul + 1] != 0xFF:
                return nul + 2
            pos = nul + 1
    if tag == _TUPLE:
        pos += 1
        while data[pos] != 0:
            pos = _skip(data, pos)
        return pos + 1
    return _decode_at(data, pos)[1]


# ------------------------------------------------------------------------------------ order checks
def kinds(sorts: pa.Array) -> np.ndarray:
    """The kind (NONE, NUMBER, STR, ... OTHER) of each encoded value of a large_binary array, read off
    its first byte (a descending key: the complement of its second); an empty value (no sort key) is
    NONE. Vectorized: no Python object per row."""
    n = len(sorts)
    offsets = np.frombuffer(sorts.buffers()[1], np.int64)[sorts.offset : sorts.offset + n + 1]
    data = np.frombuffer(sorts.buffers()[2] or b"\x00", np.uint8)
    nonempty = offsets[1:] > offsets[:-1]
    first = np.zeros(n, np.uint8)
    first[nonempty] = data[offsets[:-1][nonempty]]
    descending = first == _DESC
    if descending.any():
        first[descending] = 255 - data[offsets[:-1][descending] + 1]
    out = _KIND_OF_TAG[first]
    out[~nonempty] = NONE
    return out


def unorderable(a: bytes, b: bytes) -> tuple[Any, Any] | None:
    """The two values Python cannot order against each other when comparing the values encoded as `a`
    and `b` (the first elements of differing kinds where tuples first differ), or None when it can."""
    if a[:1] == bytes([_DESC]) and b[:1] == bytes([_DESC]):
        a, b = bytes(255 - x for x in a[1:]), bytes(255 - x for x in b[1:])
    return _unorderable_at(a, 0, b, 0)


def _unorderable_at(a: bytes, i: int, b: bytes, j: int) -> tuple[Any, Any] | None:
    kind_a, kind_b = _KIND_OF_TAG[a[i]], _KIND_OF_TAG[b[j]]
    if kind_a == NONE or kind_b == NONE:
        return None
    if kind_a != kind_b or kind_a == OTHER:
        return _decode_at(a, i)[0], _decode_at(b, j)[0]
    if kind_a != TUPLE:
        return None
    i, j = i + 1, j + 1
    while a[i] != 0 and b[j] != 0:  # element by element, up to the first that differs
        end_a, end_b = _skip(a, i), _skip(b, j)
        if a[i:end_a] != b[j:end_b]:
            return _unorderable_at(a, i, b, j)
        i, j = end_a, end_b
    return None  # one is a prefix of the other: the shorter comes first


_KIND_NAMES = ("None", "number", "str", "bytes", "tuple", "date", "datetime", "aware datetime", "time", "timedelta")
_KIND_OF_TYPE = {type(None): "None", bool: "number", int: "number", float: "number", str: "str", bytes: "bytes"}
_KIND_OF_TYPE.update({tuple: "tuple", list: "tuple", dt.date: "date", dt.timedelta: "timedelta"})


def key_kind(value: Any) -> str:
    """The kind of a key for order checks: "None", "number", "str", ... or "other" (no order)."""
    kind = _KIND_OF_TYPE.get(type(value))
    if kind is not None:
        return kind
    tag = _KIND_OF_TAG[encode(value)[0]]
    return _KIND_NAMES[tag] if tag < len(_KIND_NAMES) else "other"


def describe_kind(value: Any) -> str:
    """A value for an error message: its kind and type, and a short repr."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


# ----------------------------------------------------------------------------------- column-wise
def encode_column(values: pa.Array) -> list[bytes]:
    """`[encode(v) for v in values.to_pylist()]`, computed column-wise where `encode_array` can."""
    return encode_array(values).to_pylist()


def encode_array(values: pa.Array) -> pa.Array:
    """`encode` of every item as one large_binary array (a sort key column: no hints)."""
    return encode_keys(values, hints=False)[0]


def encode_keys(values: pa.Array, *, hints: bool = True) -> tuple[pa.Array, pa.Array | None]:
    """(`encode` of every item, `hint` of every item) as large_binary arrays; the hints only when asked.

    Column-wise (no Python object per row, which is what keeps a field-keyed scatter in Arrow) for
    integers, floats, bools, strings and bytes, with or without nulls, and dictionary-encoded columns of
    those; any other type is encoded value by value."""
    kind = values.type
    n = len(values)
    if pa.types.is_dictionary(kind):
        keys, key_hints = encode_keys(values.dictionary, hints=hints)
        indices = values.indices
        taken = pc.take(keys, indices)
        return _none_for_null(taken, indices), None if key_hints is None else _none_for_null(
            pc.take(key_hints, indices), indices, b""
        )
    if pa.types.is_null(kind):
        return _constant(b"\x01", n), _constant(b"", n) if hints else None
    if pa.types.is_boolean(kind):
        ints = _int_rows(values.cast(pa.int8()))
        return ints, _none_for_null(_constant(b"b", n), values, b"") if hints else None
    if pa.types.is_integer(kind):
        return _int_rows(values), _constant(b"", n) if hints else None
    if pa.types.is_floating(kind):
        encoded = _float_rows(values.cast(pa.float64()))
        if encoded is not None:
            return encoded[0], encoded[1] if hints else None
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if text or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        raw = pc.replace_substring(values.cast(pa.large_binary()), b"\x00", b"\x00\xff")

        def bind(b: bytes) -> pa.Scalar:
            return pa.scalar(b, pa.large_binary())

        joined = pc.binary_join_element_wise(bind(bytes([_STR if text else _BYTES])), raw, bind(_END), bind(b""))
        return _none_for_null(joined, values), _constant(b"", n) if hints else None
    items = values.to_pylist()
    return binary_array([encode(v) for v in items]), binary_array([hint(v) for v in items]) if hints else None


def _int_rows(values: pa.Array) -> pa.Array:
    """Integers as `encode` gives them: 10 bytes each (tag, 8 bytes of magnitude, complemented when
    negative, and the no-fraction byte); nulls: None's byte. Measured per million int64 (CPU time):
    6 ms for a column without negatives (ids, counts, timestamps: the usual keys), 11 ms with some;
    the 9-byte encoding this replaced (ints apart from floats) took 9 ms."""
    n = len(values)
    ints = values.fill_null(0).to_numpy(zero_copy_only=False)
    rows = np.empty((n, 10), np.uint8)
    if pa.types.is_unsigned_integer(values.type) or not n or ints.min() >= 0:
        rows[:, 0] = _POS
        rows[:, 1:9] = ints.astype(">u8").view(np.uint8).reshape(n, 8)
        rows[:, 9] = 0
    else:
        signed = ints.astype(np.int64)
        negative = signed < 0
        # a negative v's bytes are 2**64 - 1 - |v| = v - 1 in 64-bit two's complement
        magnitude = signed.view(np.uint64) - negative.astype(np.uint64)
        rows[:, 0] = _POS - 2 * negative.view(np.uint8)  # _NEG is _POS - 2
        rows[:, 1:9] = magnitude.astype(">u8").view(np.uint8).reshape(n, 8)
        rows[:, 9] = negative.view(np.uint8) * 0xFF
    if not values.null_count:
        offsets = np.arange(0, 10 * n + 1, 10, dtype=np.int64)
        return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(rows)])
    lengths = np.where(values.is_null().to_numpy(zero_copy_only=False), 1, 10)
    rows[lengths == 1, 0] = _NONE
    return _compact(rows, lengths)


def _float_rows(values: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """Floats as `_float` encodes them, and their hints; None when one's magnitude is 2**64 or more (then
    they are encoded one by one)."""
    n = len(values)
    x = values.fill_null(0.0).to_numpy(zero_copy_only=False)
    null = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else np.zeros(n, bool)
    finite = np.isfinite(x)
    magnitude = np.where(finite, np.abs(x), 0.0)
    if np.any(magnitude >= 2.0**64):
        return None
    whole = np.floor(magnitude)
    fraction = magnitude - whole
    mantissa, exponent = np.frexp(fraction)
    negative = x < 0
    rows = np.zeros((n, 20), np.uint8)
    rows[:, 1:9] = whole.astype(np.uint64).astype(">u8").view(np.uint8).reshape(n, 8)
    has_fraction = fraction != 0
    rows[:, 9] = has_fraction
    rows[:, 10:12] = (exponent + _EXP_OFFSET).astype(">u2").view(np.uint8).reshape(n, 2)
    rows[:, 12:20] = (mantissa * float(1 << 53)).astype(np.uint64).astype(">u8").view(np.uint8).reshape(n, 8)
    rows[negative, 1:] = 255 - rows[negative, 1:]
    rows[:, 0] = np.where(negative, _NEG, _POS)
    lengths = np.where(has_fraction, 20, 10)
    for mask, tag in ((np.isnan(x), _NAN), (x == np.inf, _POS_INF), (x == -np.inf, _NEG_INF), (null, _NONE)):
        rows[mask, 0] = tag
        lengths[mask] = 1
    keys = _compact(rows, lengths)
    integral = finite & ~has_fraction & ~null
    negative_zero = integral & (x == 0) & np.signbit(x)
    hint_rows = np.full((n, 1), ord("f"), np.uint8)
    hints = _compact(hint_rows, integral.astype(np.int64))
    if negative_zero.any():
        hints = pc.if_else(pa.array(negative_zero), pa.scalar(hint(-0.0), pa.large_binary()), hints)
    return keys, hints


def _compact(rows: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A large_binary array whose item i is `rows[i, :lengths[i]]`."""
    n = len(lengths)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = rows[np.arange(rows.shape[1]) < lengths[:, None]]
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


@functools.lru_cache(maxsize=16)
def _constant(item: bytes, n: int) -> pa.Array:
    """n copies of `item` as a large_binary array (cached: batches of one size share it, Arrow arrays
    being immutable; an int or str key column's empty hints cost nothing per batch)."""
    offsets = np.arange(0, len(item) * n + 1, len(item) or 1, dtype=np.int64) if item else np.zeros(n + 1, np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(item * n)])


def _none_for_null(encoded: pa.Array, values: pa.Array, item: bytes = b"\x01") -> pa.Array:
    """`encoded` with `item` (None's encoding, or an empty hint) where `values` is null."""
    if not values.null_count:
        return encoded
    return pc.if_else(values.is_null(), pa.scalar(item, pa.large_binary()), encoded)


def binary_array(items: list[bytes]) -> pa.Array:
    """A large_binary array built at its exact size (the generic builder over-allocates by doubling)."""
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, len(items)), out=offsets[1:])
    data = b"".join(items)
    return pa.Array.from_buffers(pa.large_binary(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
