"""The one CSV writer of the files people get: hostile cells round-trip through ``csv.reader`` as
one cell each, and a cell a spreadsheet would read as a formula comes back with a leading quote."""

from __future__ import annotations

import csv
import io

from bot.batch.store import Batch, BatchMember
from bot.batch.text import MEMBER_COLUMNS, members_csv
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
        "'=1",
        "'+1",
        "'-1",
        "'@a",
        "'\t1",
        "'\r1",
    ]
    assert [neutral_cell(c) for c in ("a=1", " =1", "'=1", 7, None)] == ["a=1", " =1", "'=1", "7", ""]


DETAIL = '-1+HYPERLINK("https://e","fix"),\nses_fake,accepted'


def test_the_batch_file_writes_the_control_hosts_words_through_the_same_writer() -> None:
    """A refusal's code and message come from the control host: one cell each, never a formula, in
    the batch file's own columns."""
    batch = Batch(
        id="bat_1",
        requester="UALICE",
        channel=None,
        decision="close",
        reason="gone",
        cause_fixed=None,
        source="t1.g1",
        policy="two_person",
        created_at="t",
        expires_at="t",
        content_hash="h",
        excluded=[{"session_id": "ses_b", "why": "@left out\nses_fake,accepted", "rule": "R3.10"}],
        state="executed",
        approved_by="UBOB",
        approved_at="t",
        decided_by=None,
        note=None,
        owner=None,
        stop_requested=0,
        runner=None,
        updated_at="t",
    )
    member = BatchMember(
        batch_id="bat_1",
        ord=0,
        session_id="ses_a",
        revision=5,
        facts={},
        state="failed",
        idem_key="k",
        method="POST",
        path="/p",
        body="{}",
        http_status=409,
        code="=CMD()",
        receipt_id=None,
        detail=DETAIL,
        updated_at="t",
    )
    rows = list(csv.reader(io.StringIO(members_csv(batch, [member]), newline="")))
    assert rows[0] == list(MEMBER_COLUMNS)
    assert [r[1] for r in rows[1:]] == ["ses_a", "ses_b"]  # one row per member and left-out session
    assert rows[1][3:6] == ["refused", "409", "'=CMD()"]
    assert rows[1][8] == "'" + DETAIL
    assert rows[2][3] == "left out" and rows[2][8] == "'@left out\nses_fake,accepted"
    assert not any(cell.startswith(FORMULA_STARTS) for r in rows for cell in r)
