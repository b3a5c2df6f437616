"""`zephyr.text_table`: one column spec serves the header and the rows (the estimates, the ladder, Datashop)."""

from __future__ import annotations

import pytest

from zephyr.text_table import text_table


def test_header_and_rows_share_each_columns_alignment_width_and_format():
    lines = text_table("stage<6|records>10,|MB>8.1f|<", [(0, 1234567, 12.345, "  read"), (12, None, 0.0, "  sort")])
    assert lines == [
        "stage    records      MB",
        "0      1,234,567    12.3  read",
        "12             -     0.0  sort",
    ]


def test_indent_and_separator_frame_every_line():
    assert text_table("a>3|b<2", [(1, "x")], indent="  ", sep=" | ") == ["    a | b", "    1 | x"]


def test_a_row_with_the_wrong_number_of_values_or_a_bad_column_is_refused():
    with pytest.raises(ValueError):
        text_table("a>3|b>3", [(1,)])
    with pytest.raises(ValueError, match="expected a title, < or >"):
        text_table("stage:6", [])
