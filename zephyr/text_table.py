"""Fixed-width text tables for the terminal: the run estimates, the ladder's points, Datashop's stages.

A table used to be two f-strings, the header's and the rows', that had to agree column by column;
here a column's title, alignment, width and number format are written once and serve both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["text_table"]

_COLUMN = re.compile(r"(?P<title>[^<>]*)(?P<align>[<>])(?P<width>\d*)(?P<number>.*)")


def text_table(columns: str, rows: Iterable[Sequence[Any]], *, indent: str = "", sep: str = "") -> list[str]:
    """The header line, then a line per row of values (None shows as "-").

    `columns` names each column by its title, `<` (left-aligned) or `>` (right), its width (none: as
    wide as the cell) and the format spec of its values, with `|` between columns:
    "stage<6|records in>14,|MB in>10,.1f|wall s>10,.1f|<".
    """
    specs = []
    for text in columns.split("|"):
        match = _COLUMN.fullmatch(text.strip(" "))
        if match is None:
            raise ValueError(f"text_table column {text!r}: expected a title, < or >, a width and a format")
        specs.append((match["title"], match["align"] + match["width"], match["number"]))

    def line(cells: Iterable[str]) -> str:
        return (indent + sep.join(cells)).rstrip()

    header = line(format(title, align) for title, align, _ in specs)
    body = [
        line(
            format("-", align) if value is None else format(value, align + number)
            for (_, align, number), value in zip(specs, row, strict=True)
        )
        for row in rows
    ]
    return [header, *body]
