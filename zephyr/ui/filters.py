"""A small, safe filter language for the Documents page, parsed into the engine's `col`/`lit` expressions.

Why not `eval`: the filter comes from a browser. This is a hand-written tokenizer and recursive-descent
parser that can only build `zephyr.engine.expr` trees, so a filter means exactly what the engine's
`Dataset.filter(expr)` means (SQL null semantics; pushed down into parquet/vortex scans).

Grammar (keywords case-insensitive):

    expr    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | atom
    atom    := "(" expr ")"
             | FIELD ("==" | "=" | "!=" | "<" | "<=" | ">" | ">=") VALUE
             | FIELD ["not"] "in" "[" VALUE ("," VALUE)* "]"
             | FIELD "is" ["not"] "null"
             | FIELD "contains" STRING
             | "len" "(" FIELD ")" OP NUMBER
             | FIELD                                   (true where the field is exactly true)
    VALUE   := STRING ('...' or "...") | NUMBER | true | false

Examples: `filter_reason == "exact_duplicate"`, `lang in ["en", "de"] and quality_score >= 0.5`,
`quality_signals.words < 50` (a dotted name reads a nested field),
`dup_cluster is not null`, `text contains "recipe"`, `len(text) > 1000`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zephyr.engine.expr import Expr, col, lit

__all__ = ["FilterSyntaxError", "parse_filter"]

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<op>==|!=|<=|>=|=|<|>)
    | (?P<punct>[()\[\],])
    | (?P<word>[A-Za-z_][A-Za-z0-9_.\-/]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "true", "false", "contains", "len"}
_MAX_LENGTH = 2000


class FilterSyntaxError(ValueError):
    """A filter that does not parse: the message names the position and what was expected."""


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    pos: int


def _tokens(text: str) -> list[_Tok]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FilterSyntaxError(
                f"filter: cannot read {text[pos : pos + 20]!r} at character {pos + 1}; "
                'strings need quotes, e.g. lang == "en"'
            )
        kind = m.lastgroup or ""
        value, start = m.group(kind), m.start(kind)
        if kind == "word" and value.lower() in _KEYWORDS:
            kind, value = "kw", value.lower()
        out.append(_Tok(kind, value, start))
        pos = m.end()
    out.append(_Tok("end", "", len(text)))
    return out


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, expected: str) -> FilterSyntaxError:
        tok = self.peek()
        got = "the end of the filter" if tok.kind == "end" else repr(tok.text)
        return FilterSyntaxError(f"filter {self.text!r}: expected {expected} at character {tok.pos + 1}, got {got}")

    def expect(self, kind: str, text: str | None = None) -> _Tok:
        tok = self.peek()
        if tok.kind != kind or (text is not None and tok.text != text):
            raise self.fail(repr(text) if text else kind)
        return self.take()

    def parse(self) -> Expr:
        expr = self.or_()
        if self.peek().kind != "end":
            raise self.fail("'and', 'or' or the end")
        return expr

    def or_(self) -> Expr:
        expr = self.and_()
        while self.peek().kind == "kw" and self.peek().text == "or":
            self.take()
            expr = expr | self.and_()
        return expr

    def and_(self) -> Expr:
        expr = self.not_()
        while self.peek().kind == "kw" and self.peek().text == "and":
            self.take()
            expr = expr & self.not_()
        return expr

    def not_(self) -> Expr:
        if self.peek().kind == "kw" and self.peek().text == "not":
            self.take()
            return ~self.not_()
        return self.atom()

    def value(self) -> Any:
        tok = self.take()
        if tok.kind == "string":
            return _unquote(tok.text)
        if tok.kind == "number":
            return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
        if tok.kind == "kw" and tok.text in ("true", "false"):
            return tok.text == "true"
        self.i -= 1
        raise self.fail('a value ("text", a number, true or false)')

    def atom(self) -> Expr:
        tok = self.peek()
        if tok.kind == "punct" and tok.text == "(":
            self.take()
            expr = self.or_()
            self.expect("punct", ")")
            return expr
        if tok.kind == "kw" and tok.text == "len":
            self.take()
            self.expect("punct", "(")
            field = col(self.expect("word").text)
            self.expect("punct", ")")
            op = self.expect("op").text
            return _compare(field.length(), op, self.value())
        if tok.kind != "word":
            raise self.fail("a field name")
        field = col(self.take().text)
        nxt = self.peek()
        if nxt.kind == "op":
            op = self.take().text
            return _compare(field, op, self.value())
        if nxt.kind == "kw" and nxt.text in ("in", "not"):
            negate = self.take().text == "not"
            if negate:
                self.expect("kw", "in")
            self.expect("punct", "[")
            values = [self.value()]
            while self.peek().kind == "punct" and self.peek().text == ",":
                self.take()
                values.append(self.value())
            self.expect("punct", "]")
            expr = field.isin(values)
            return ~expr if negate else expr
        if nxt.kind == "kw" and nxt.text == "is":
            self.take()
            negate = self.peek().kind == "kw" and self.peek().text == "not"
            if negate:
                self.take()
            self.expect("kw", "null")
            return field.is_not_null() if negate else field.is_null()
        if nxt.kind == "kw" and nxt.text == "contains":
            self.take()
            tok = self.expect("string")
            return field.str_contains(_unquote(tok.text))
        return field == lit(True)


def _compare(left: Expr, op: str, value: Any) -> Expr:
    right = lit(value)
    return {
        "==": lambda: left == right,
        "=": lambda: left == right,
        "!=": lambda: left != right,
        "<": lambda: left < right,
        "<=": lambda: left <= right,
        ">": lambda: left > right,
        ">=": lambda: left >= right,
    }[op]()


def parse_filter(text: str) -> Expr | None:
    """The expression for `text`, or None for an empty filter. Raises FilterSyntaxError with the position."""
    text = (text or "").strip()
    if not text:
        return None
    if len(text) > _MAX_LENGTH:
        raise FilterSyntaxError(f"filter is {len(text)} characters; at most {_MAX_LENGTH} are accepted")
    return _Parser(text).parse()
