"""The one writer of the CSV files the bot hands to people (triage, batch members and outcomes).

Cells hold text the control host chose (attention reasons, refusal details), so a file is built only
here, by the standard ``csv`` module: a newline, comma or quote inside a cell is quoted, never a new
row or column, and a cell that a spreadsheet would read as a formula (it begins with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return) is prefixed with a single quote, as the OWASP guidance on
CSV injection says, so it is shown as text and never evaluated.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

#: A cell beginning with one of these is a formula (or starts one) in Excel, LibreOffice and Sheets.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: What is put before such a cell: spreadsheets show a leading quote's cell as text.
NEUTRAL_PREFIX = "'"

Cell = str | int | float | None


def neutral_cell(value: Cell) -> str:
    """``value`` as one CSV cell's text: None is empty, a number as written (it is no formula), a
    text beginning like a formula prefixed with a single quote."""
    if value is None:
        return ""
    if not isinstance(value, str):  # bool is an int: the bot never writes one, and it would be safe
        return str(value)
    return NEUTRAL_PREFIX + value if value.startswith(FORMULA_STARTS) else value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Cell]]) -> str:
    """The header and every row as CSV text, each cell through :func:`neutral_cell`: RFC 4180 rows
    (``\\r\\n`` ended), so the writer quotes a cell holding either a ``\\r`` or a ``\\n`` (with a
    ``\\n`` terminator, Python's writer leaves a lone ``\\r`` bare, and a reader splits the row there)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([neutral_cell(h) for h in header])
    for row in rows:
        writer.writerow([neutral_cell(cell) for cell in row])
    return out.getvalue()
