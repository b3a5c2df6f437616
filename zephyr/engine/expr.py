"""Filter expressions: one tree, three evaluators (Python rows, Arrow scans, and Vortex scans through
`expr_vortex.to_vortex`).

`col("lang") == "en"` builds a small immutable tree instead of a Python lambda so the engine can push
the predicate into the file reader: parquet row groups and vortex segments whose statistics rule a
match out are never decoded, and columns the filter does not touch are never read. The same tree also
evaluates row by row (`evaluate`, `compile`) for jsonl and for whatever a scan cannot translate, and
all three evaluators agree on the result, nulls included.

Null semantics are SQL's (three-valued, Kleene logic), identical in Python, Arrow and Vortex:

- A missing field reads as `None` (null).
- Comparisons, arithmetic, `isin`, `str_contains` and `length` of a null are null.
- `a & b` is False if either side is False, else null if either is null; `a | b` is True if either
  side is True, else null if either is null; `~null` is null.
- `is_null()` / `is_not_null()` are never null.
- A filter keeps a record only where the expression is exactly True: null drops the record, so
  `col("x") != 1` drops records without `x` (write `(col("x") != 1) | col("x").is_null()` to keep
  them).

`/` is true division in every evaluator (integers are divided as floats). Comparing with a literal
`None` is always null, so it raises at construction with a hint to use `is_null()`.

Example:
    >>> from zephyr.engine.expr import col
    >>> keep = (col("lang") == "en") & (col("score") >= 0.5)
    >>> keep
    ((col("lang") == "en") & (col("score") >= 0.5))
    >>> keep.evaluate({"lang": "en", "score": 0.7}), keep.evaluate({"lang": "en"})
    (True, None)
"""

from __future__ import annotations

import datetime
import json
import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Expr", "col", "lit"]

_LITERAL_TYPES = (bool, int, float, str, bytes, datetime.date, datetime.datetime, datetime.time)

_COMPARE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _true_divide(a: Any, b: Any) -> float:
    """Python division that matches Arrow's unchecked float division (x/0 -> inf or nan, no error)."""
    try:
        return a / b
    except ZeroDivisionError:
        if a == 0 or (isinstance(a, float) and math.isnan(a)):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


_ARITH_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _true_divide,
}
# Arrow's own: comparisons through pc.Expression's operators, arithmetic through compute functions
# (true division casts both sides to float64 first, see Binary.to_arrow)
_ARROW_OPS: dict[str, Callable[[Any, Any], Any]] = {
    **_COMPARE_OPS,
    "+": pc.add,
    "-": pc.subtract,
    "*": pc.multiply,
}


def _method(op: str, *, reflected: bool = False) -> Callable[[Expr, Any], Expr]:
    """`self op other` as an Expr method, or with `reflected` its twin `other op self` (Python calls
    `col("a").__radd__(1)` for `1 + col("a")`; comparisons need none: `1 < col("a")` calls `__gt__`)."""

    def method(self: Expr, other: Any) -> Expr:
        left, right = (_wrap(other), self) if reflected else (self, other)
        if op in _COMPARE_OPS:
            return _compare(op, left, right)
        return (BoolOp if op in ("&", "|") else Binary)(op, left, _wrap(right))

    return method


@dataclass(frozen=True, eq=False, repr=False)
class Expr:
    """A node of a filter expression. Build with `col` and `lit`; combine with operators.

    Python's `and`/`or`/`not` cannot be overloaded: use `&`, `|`, `~` (with parentheses, as in
    `(col("a") > 1) & (col("b") == "x")`).
    """

    # --- building: `col("a") + 1`, `1 + col("a")` (the reflected twin), `a & b` (see _method) ---------
    __eq__ = _method("==")  # type: ignore[assignment]
    __ne__ = _method("!=")  # type: ignore[assignment]
    __lt__ = _method("<")
    __le__ = _method("<=")
    __gt__ = _method(">")
    __ge__ = _method(">=")
    __and__, __rand__ = _method("&"), _method("&", reflected=True)
    __or__, __ror__ = _method("|"), _method("|", reflected=True)
    __add__, __radd__ = _method("+"), _method("+", reflected=True)
    __sub__, __rsub__ = _method("-"), _method("-", reflected=True)
    __mul__, __rmul__ = _method("*"), _method("*", reflected=True)
    __truediv__, __rtruediv__ = _method("/"), _method("/", reflected=True)

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of expression {self!r} is unknown until it is evaluated on a record. "
            "Combine expressions with & | ~ (not `and`/`or`/`not`, and no chained `a < x < b`), "
            "with parentheses: (col('a') > 1) & (col('a') < 5)"
        )

    def __hash__(self) -> int:
        # `==` builds an expression, so hashing is by structure (the readable form is exact).
        return hash(repr(self))

    def isin(self, values: Iterable[Any]) -> Expr:
        """True where the value equals one of `values`; null where the value is null."""
        if isinstance(values, (str, bytes)):
            raise TypeError(
                f"isin() takes a collection of values, got the single {type(values).__name__} {values!r}: "
                f"write .isin([{values!r}])"
            )
        values = tuple(values)
        for value in values:
            _check_literal(value, "isin() value")
        return IsIn(self, values)

    def is_null(self) -> Expr:
        """True where the value is null or the field is missing."""
        return NullCheck(self, False)

    def is_not_null(self) -> Expr:
        """True where the field is present and not null."""
        return NullCheck(self, True)

    def str_contains(self, substring: str) -> Expr:
        """True where the string value contains `substring` (case-sensitive, no patterns)."""
        if not isinstance(substring, str):
            raise TypeError(f"str_contains() takes a str, got {type(substring).__name__} {substring!r}")
        return StrContains(self, substring)

    def length(self) -> Expr:
        """Length of a string value in characters (Unicode code points)."""
        return Length(self)

    # --- inspecting ----------------------------------------------------------------------------
    def columns(self) -> set[str]:
        """Names of the fields this expression reads."""
        out: set[str] = set()
        for child in self._children():
            out |= child.columns()
        return out

    def value_columns(self) -> set[str]:
        """The fields read for their value: `columns()` less those only tested with `is_null()` /
        `is_not_null()`. A filter over a value field that no record has is a mistake (a typo)."""
        out: set[str] = set()
        for child in self._children():
            out |= child.value_columns()
        return out

    def _children(self) -> tuple[Expr, ...]:
        # a node's subexpressions are its Expr fields (left and right, or child): one walk serves every node
        return tuple(v for v in (getattr(self, f.name) for f in fields(self)) if isinstance(v, Expr))

    # --- evaluating ----------------------------------------------------------------------------
    def evaluate(self, record: dict) -> Any:
        """Value of the expression on one record: a Python value, or None for null."""
        return self._compiled()(record)

    __call__ = evaluate  # an expression serves wherever a record -> value function does (group_by keys)

    def matches(self, record: dict) -> bool:
        """Whether a filter with this expression keeps `record` (the value is exactly True)."""
        return self._compiled()(record) is True

    def compile(self) -> Callable[[dict], Any]:
        """A plain Python closure equivalent to `evaluate`, for hot loops (no tree walk per record)."""
        raise NotImplementedError(type(self).__name__)

    def _compiled(self) -> Callable[[dict], Any]:
        # Built once per node and kept out of pickles (closures do not pickle).
        fn = self.__dict__.get("_fn")
        if fn is None:
            fn = self.compile()
            object.__setattr__(self, "_fn", fn)
        return fn

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_fn", None)
        return state

    def to_arrow(self) -> pc.Expression:
        """The same predicate as a `pyarrow.compute.Expression` (for `pyarrow.dataset` filters)."""
        raise NotImplementedError(type(self).__name__)


def col(name: str) -> Expr:
    """A reference to the top-level field `name` of each record (missing -> null)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"col() takes a non-empty field name (str), got {name!r}")
    return Column(name)


def lit(value: Any) -> Expr:
    """A constant: None, bool, int, float, str, bytes, date, datetime or time."""
    if isinstance(value, Expr):
        return value
    if value is not None:
        _check_literal(value, "lit() value")
    return Literal(value)


def _check_literal(value: Any, what: str) -> None:
    if value is not None and not isinstance(value, _LITERAL_TYPES):
        raise TypeError(
            f"{what} must be None, bool, int, float, str, bytes, date, datetime or time; got "
            f"{type(value).__name__} {value!r}. For membership in a collection use col(...).isin([...])"
        )


def _wrap(value: Any) -> Expr:
    return value if isinstance(value, Expr) else lit(value)


def _compare(op: str, left: Expr, right: Any) -> Expr:
    right = _wrap(right)
    for side in (left, right):
        if isinstance(side, Literal) and side.value is None:
            raise ValueError(
                f"comparing with None is always null in SQL semantics, so {op} None never matches; "
                "use col(...).is_null() or col(...).is_not_null() instead"
            )
    return Binary(op, left, right)


def _render(e: Expr) -> str:
    return e._literal_text() if isinstance(e, Literal) else repr(e)


def _arrow_scalar(value: Any) -> pc.Expression:
    return pc.scalar(value)


@dataclass(frozen=True, eq=False, repr=False)
class Column(Expr):
    """`col(name)`: a record's field (None when the record lacks it)."""

    name: str

    def __repr__(self) -> str:
        return f"col({json.dumps(self.name, ensure_ascii=False)})"

    def columns(self) -> set[str]:
        return {self.name}

    def value_columns(self) -> set[str]:
        return {self.name}

    def compile(self) -> Callable[[dict], Any]:
        name = self.name
        return lambda record: record.get(name)

    def to_arrow(self) -> pc.Expression:
        return pc.field(self.name)


@dataclass(frozen=True, eq=False, repr=False)
class Literal(Expr):
    """`lit(value)`: a constant (None, bool, int, float, str, bytes, date, datetime or time)."""

    value: Any

    def __repr__(self) -> str:
        return f"lit({self._literal_text()})"

    def _literal_text(self) -> str:
        if isinstance(self.value, str):
            return json.dumps(self.value, ensure_ascii=False)
        return repr(self.value)

    def compile(self) -> Callable[[dict], Any]:
        value = self.value
        return lambda record: value

    def to_arrow(self) -> pc.Expression:
        return _arrow_scalar(self.value)


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    """`left op right` for a comparison (==, !=, <, <=, >, >=) or arithmetic (+, -, *, /): null when either
    side is null (SQL semantics), evaluated per record by Python and per batch by Arrow alike (`_BINARY`)."""

    op: str
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"({_render(self.left)} {self.op} {_render(self.right)})"

    @property
    def is_comparison(self) -> bool:
        return self.op in _COMPARE_OPS

    def compile(self) -> Callable[[dict], Any]:
        left, right, op, expr = self.left.compile(), self.right.compile(), self.op, self
        fn = _COMPARE_OPS[op] if self.is_comparison else _ARITH_OPS[op]
        undefined = (
            "is not defined. The field holds values of another type than the literal; cast it in a map() "
            "first, or compare with a literal of the field's type"
            if self.is_comparison
            else "is not defined; arithmetic needs numbers"
        )

        def binary(record: dict) -> Any:
            a = left(record)
            if a is None:
                return None
            b = right(record)
            if b is None:
                return None
            try:
                return fn(a, b)
            except TypeError:
                raise TypeError(
                    f"cannot evaluate {expr!r}: {type(a).__name__} {a!r} {op} {type(b).__name__} {b!r} {undefined}"
                ) from None

        return binary

    def to_arrow(self) -> pc.Expression:
        a, b = self.left.to_arrow(), self.right.to_arrow()
        if self.op == "/":
            return pc.divide(a.cast(pa.float64()), b.cast(pa.float64()))
        return _ARROW_OPS[self.op](a, b)


@dataclass(frozen=True, eq=False, repr=False)
class BoolOp(Expr):
    """`a & b`, `a | b`: SQL three-valued logic (null and false is false, null or true is true)."""

    op: str  # "&" or "|"
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"({_render(self.left)} {self.op} {_render(self.right)})"

    def compile(self) -> Callable[[dict], Any]:
        left, right = self.left.compile(), self.right.compile()
        if self.op == "&":

            def and_(record: dict) -> Any:  # Kleene AND
                a = left(record)
                if a is not None and not a:
                    return False
                b = right(record)
                if b is not None and not b:
                    return False
                return None if a is None or b is None else True

            return and_

        def or_(record: dict) -> Any:  # Kleene OR
            a = left(record)
            if a is not None and a:
                return True
            b = right(record)
            if b is not None and b:
                return True
            return None if a is None or b is None else False

        return or_

    def to_arrow(self) -> pc.Expression:
        a, b = self.left.to_arrow(), self.right.to_arrow()
        return pc.and_kleene(a, b) if self.op == "&" else pc.or_kleene(a, b)


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    """`~a`: logical not (null stays null)."""

    child: Expr

    def __repr__(self) -> str:
        return f"~{_render(self.child)}"

    def compile(self) -> Callable[[dict], Any]:
        child = self.child.compile()

        def not_(record: dict) -> Any:
            value = child(record)
            return None if value is None else not value

        return not_

    def to_arrow(self) -> pc.Expression:
        return ~self.child.to_arrow()


@dataclass(frozen=True, eq=False, repr=False)
class IsIn(Expr):
    """`col(...).isin(values)`: whether the value is one of `values` (null: null)."""

    child: Expr
    values: tuple

    def __repr__(self) -> str:
        items = ", ".join(_render(Literal(v)) for v in self.values)
        return f"{_render(self.child)}.isin([{items}])"

    def compile(self) -> Callable[[dict], Any]:
        child = self.child.compile()
        members = frozenset(v for v in self.values if v is not None)

        def isin(record: dict) -> Any:
            value = child(record)
            if value is None:
                return None
            try:
                return value in members
            except TypeError:  # unhashable (a list or dict value) never equals a scalar member
                return False

        return isin

    def to_arrow(self) -> pc.Expression:
        child = self.child.to_arrow()
        values = [v for v in self.values if v is not None]
        try:
            value_set = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TypeError(f"isin() values must share one type for Arrow, got {self.values!r}: {exc}") from None
        # Arrow's is_in is never null; wrap it so a null input stays null (SQL), as in Python and Vortex.
        return pc.if_else(child.is_null(), pa.scalar(None, pa.bool_()), pc.is_in(child, value_set=value_set))


@dataclass(frozen=True, eq=False, repr=False)
class NullCheck(Expr):
    """`col(...).is_null()` / `.is_not_null()`: never null itself; the one test a field may be absent for."""

    child: Expr
    negated: bool  # True: is_not_null

    def __repr__(self) -> str:
        return f"{_render(self.child)}.{'is_not_null' if self.negated else 'is_null'}()"

    def value_columns(self) -> set[str]:
        return set()  # asking whether an optional field is absent is legitimate

    def compile(self) -> Callable[[dict], Any]:
        child = self.child.compile()
        if self.negated:
            return lambda record: child(record) is not None
        return lambda record: child(record) is None

    def to_arrow(self) -> pc.Expression:
        child = self.child.to_arrow()
        return child.is_valid() if self.negated else child.is_null()


@dataclass(frozen=True, eq=False, repr=False)
class StrContains(Expr):
    """`col(...).str_contains(substring)`: whether a string value contains `substring` (null: null)."""

    child: Expr
    substring: str

    def __repr__(self) -> str:
        return f"{_render(self.child)}.str_contains({json.dumps(self.substring, ensure_ascii=False)})"

    def compile(self) -> Callable[[dict], Any]:
        child, needle, expr = self.child.compile(), self.substring, self

        def contains(record: dict) -> Any:
            value = child(record)
            if value is None:
                return None
            if not isinstance(value, str):
                raise TypeError(f"cannot evaluate {expr!r}: the value is {type(value).__name__} {value!r}, not a str")
            return needle in value

        return contains

    def to_arrow(self) -> pc.Expression:
        return pc.match_substring(self.child.to_arrow(), pattern=self.substring)


@dataclass(frozen=True, eq=False, repr=False)
class Length(Expr):
    """`col(...).length()`: the length of a string value, in characters (null: null)."""

    child: Expr

    def __repr__(self) -> str:
        return f"{_render(self.child)}.length()"

    def compile(self) -> Callable[[dict], Any]:
        child, expr = self.child.compile(), self

        def length(record: dict) -> Any:
            value = child(record)
            if value is None:
                return None
            if not isinstance(value, str):
                raise TypeError(f"cannot evaluate {expr!r}: length() needs a str, got {type(value).__name__}")
            return len(value)

        return length

    def to_arrow(self) -> pc.Expression:
        return pc.utf8_length(self.child.to_arrow())
