"""Filter expressions as Vortex scan predicates: `to_vortex(expr, schema)`, or None where Vortex cannot
express the expression exactly (the reader then filters those records in Python).

Vortex compares only values of the same type, so each translation returns the Vortex expression with its
Arrow type, and literals take the type of the column they meet. Kept apart from `expr` (the tree, with its
Python and Arrow evaluators) because only the vortex reader needs it, and vortex is an optional import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from zephyr.engine.expr import Binary, BoolOp, Column, Expr, IsIn, Literal, Not, NullCheck, StrContains

__all__ = ["to_vortex"]

Typed = tuple[Any, pa.DataType | None]  # a vortex expression and its Arrow type (None: not known)


class _Untranslatable(Exception):
    """This part of the tree has no Vortex equivalent; the caller filters in Python."""


def to_vortex(expr: Expr, schema: pa.Schema | None = None) -> Any:
    """The same predicate as a `vortex.expr.Expr`, or None when Vortex cannot express it exactly.

    Pass the file's Arrow `schema` (from `vortex_file.dtype.to_arrow_schema()`): literals are then typed
    like the column they meet. A field absent from `schema`, a type mismatch, `length()`, `/` and LIKE
    metacharacters in `str_contains` all give None, and the caller filters in Python instead.
    """
    try:
        return _vx(expr, schema)[0]
    except _Untranslatable:
        return None


def _vx(expr: Expr, schema: pa.Schema | None) -> Typed:
    translate = _TRANSLATIONS.get(type(expr))
    if translate is None:  # e.g. Length: Vortex offers byte_length, not a character count
        raise _Untranslatable(type(expr).__name__)
    return translate(expr, schema)


def _vx_pair(left: Expr, right: Expr, schema: pa.Schema | None) -> tuple[Any, Any, pa.DataType | None]:
    """Translate two operands so that their Vortex types agree (literals take the other side's type)."""
    if isinstance(left, Literal) and isinstance(right, Literal):
        raise _Untranslatable("constant expression")
    if isinstance(right, Literal):
        lv, lt = _vx(left, schema)
        return lv, _typed_vortex_literal(right.value, lt), lt
    if isinstance(left, Literal):
        rv, rt = _vx(right, schema)
        return _typed_vortex_literal(left.value, rt), rv, rt
    lv, lt = _vx(left, schema)
    rv, rt = _vx(right, schema)
    if lt is None or rt is None or lt != rt:
        raise _Untranslatable(f"operand types {lt} and {rt}")
    return lv, rv, lt


def _int_range(arrow_type: pa.DataType) -> tuple[int, int]:
    bits = arrow_type.bit_width
    if pa.types.is_signed_integer(arrow_type):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _typed_vortex_literal(value: Any, arrow_type: pa.DataType | None) -> Any:
    """A Vortex literal of `arrow_type` holding `value`, or raise _Untranslatable if it does not fit."""
    vx, ve = _vortex()
    if arrow_type is None:
        if isinstance(value, (bool, int, float, str)):
            return value  # Vortex infers bool / i64 / f64 / utf8.
        raise _Untranslatable("untyped literal")
    if pa.types.is_boolean(arrow_type):
        ok = isinstance(value, bool)
    elif pa.types.is_integer(arrow_type):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok:
            info = _int_range(arrow_type)
            ok = info[0] <= value <= info[1]
    elif pa.types.is_floating(arrow_type):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif pa.types.is_string(arrow_type):
        ok = isinstance(value, str)
    elif pa.types.is_binary(arrow_type):
        ok = isinstance(value, bytes)
    else:
        ok = False
    if not ok:
        raise _Untranslatable(f"{value!r} as {arrow_type}")
    return ve.literal(vx.DType.from_arrow(arrow_type), value)


def _vortex_type(arrow_type: pa.DataType | None) -> pa.DataType | None:
    """Normalize string flavours: Vortex files report string_view, parquet string/large_string."""
    if arrow_type is None:
        return None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return pa.string()
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type) or pa.types.is_binary_view(arrow_type):
        return pa.binary()
    return arrow_type


def _vortex() -> tuple[Any, Any]:
    import vortex as vx
    import vortex.expr as ve

    return vx, ve


def _column(e: Column, schema: pa.Schema | None) -> Typed:
    _, ve = _vortex()
    if schema is None:
        return ve.column(e.name), None
    index = schema.get_field_index(e.name)
    if index < 0:
        # Missing field: null in Python semantics; Vortex would reject the scan.
        raise _Untranslatable(f"no field {e.name!r}")
    return ve.column(e.name), _vortex_type(schema.field(index).type)


def _literal(e: Literal, schema: pa.Schema | None) -> Typed:
    if isinstance(e.value, bool):
        return _typed_vortex_literal(e.value, pa.bool_()), pa.bool_()
    raise _Untranslatable("bare literal")


def _binary(e: Binary, schema: pa.Schema | None) -> Typed:
    _, ve = _vortex()
    if e.is_comparison:
        a, b, _ = _vx_pair(e.left, e.right, schema)
        fn = {"==": ve.eq, "!=": ve.not_eq, "<": ve.lt, "<=": ve.lt_eq, ">": ve.gt, ">=": ve.gt_eq}[e.op]
        return fn(a, b), pa.bool_()
    if e.op == "/":
        raise _Untranslatable("division")  # Vortex integer division would differ from true division.
    a, b, t = _vx_pair(e.left, e.right, schema)
    if t is None or not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise _Untranslatable(f"arithmetic on {t}")
    return {"+": ve.add, "-": ve.sub, "*": ve.mul}[e.op](a, b), t


def _bool_op(e: BoolOp, schema: pa.Schema | None) -> Typed:
    _, ve = _vortex()
    a, at = _vx(e.left, schema)
    b, bt = _vx(e.right, schema)
    if at != pa.bool_() or bt != pa.bool_():
        raise _Untranslatable("non-boolean operand")
    return (ve.and_(a, b) if e.op == "&" else ve.or_(a, b)), pa.bool_()


def _not(e: Not, schema: pa.Schema | None) -> Typed:
    _, ve = _vortex()
    value, t = _vx(e.child, schema)
    if t != pa.bool_():
        raise _Untranslatable("non-boolean operand")
    return ve.not_(value), pa.bool_()


def _is_in(e: IsIn, schema: pa.Schema | None) -> Typed:
    vx, ve = _vortex()
    child, t = _vx(e.child, schema)
    if t is None:
        raise _Untranslatable("isin on an untyped operand")
    values = [_typed_vortex_literal(v, t) for v in e.values if v is not None]
    if not values:
        raise _Untranslatable("empty isin")
    python_values = [v for v in e.values if v is not None]
    if pa.types.is_floating(t):
        python_values = [float(v) for v in python_values]
    return ve.in_list(child, ve.literal(vx.list_(vx.DType.from_arrow(t)), python_values)), pa.bool_()


def _null_check(e: NullCheck, schema: pa.Schema | None) -> Typed:
    _, ve = _vortex()
    child, _ = _vx(e.child, schema)
    return (ve.is_not_null(child) if e.negated else ve.is_null(child)), pa.bool_()


def _str_contains(e: StrContains, schema: pa.Schema | None) -> Typed:
    _, ve = _vortex()
    if any(ch in e.substring for ch in "%_\\"):
        raise _Untranslatable("LIKE metacharacter in substring")
    child, t = _vx(e.child, schema)
    if t is not None and t != pa.string():
        raise _Untranslatable(f"str_contains on {t}")
    return ve.like(child, f"%{e.substring}%"), pa.bool_()


_TRANSLATIONS: dict[type, Callable[[Any, pa.Schema | None], Typed]] = {
    Column: _column,
    Literal: _literal,
    Binary: _binary,
    BoolOp: _bool_op,
    Not: _not,
    IsIn: _is_in,
    NullCheck: _null_check,
    StrContains: _str_contains,
}
