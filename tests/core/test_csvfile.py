"""The one CSV writer of the files people get: hostile cells round-trip through ``csv.reader`` as
one cell each, and a cell a spreadsheet would read as a formula comes back with a leading quote."""

from __future__ import annotations

import csv
import io

from bot.csvfile import FORMULA_STARTS, csv_text, neutral_cell

HOSTILE = [
    'x\nses_fake,close,=HYPERLINK("https://e","fix")',
    '=HYPERLINK("https://evil.example","fix")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(A1:A9)",
    "\t=1+1",
    "\r=1+1",
    'plain, with "quotes" and, commas',
    "two\r\nlines",
    "safe = later",
    "",
]


def test_hostile_cells_come_back_as_one_cell_each_neutralised_where_formula_like() -> None:
    text = csv_text(["name", "value", "n"], [[f"row{i}", v, i] for i, v in enumerate(HOSTILE)] + [["none", None, -5]])
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == ["name", "value", "n"]
    assert len(rows) == 1 + len(HOSTILE) + 1  # one row per row written: no cell added a row
    for i, value in enumerate(HOSTILE):
        name, cell, n = rows[1 + i]
        assert (name, n) == (f"row{i}", str(i))
        if value.startswith(FORMULA_STARTS):
            assert cell == "'" + value  # shown as text, never evaluated
        else:
            assert cell == value
        assert not cell.startswith(FORMULA_STARTS)
    assert rows[-1] == ["none", "", "-5"]  # None is empty; a number is written as it is


def test_neutral_cell_prefixes_only_what_begins_like_a_formula() -> None:
    assert [neutral_cell(c) for c in ("=1", "+1", "-1", "@a", "\t1", "\r1")] == [
        "'=1", "'+1", "'-1", "'@a", "'\t1", "'\r1",
    ]
    assert [neutral_cell(c) for c in ("a=1", " =1", "'=1", 7, None)] == ["a=1", " =1", "'=1", "7", ""]
