"""Outside text is cleaned at the router's entry: lone surrogates, NUL, control characters (every command)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.messages import ListReporter, Reply
from bot.runbook import load_runbooks
from bot.settings import load_settings
from bot.textclean import clean_text
from tests.fixtures.composing import default_router

RUNBOOKS = load_runbooks(Path(__file__).resolve().parents[2] / "runbooks")
DIRT = "\ud83d\x00\x1b[31m\u202e\udfff\r"
SESSION = "ses_unknown_unanswered"


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_clean_text_is_utf8_safe_idempotent_and_control_free(text: str) -> None:
    out = clean_text(text)
    out.encode("utf-8")  # a lone surrogate would raise here
    assert clean_text(out) == out
    assert "\x00" not in out and "\r" not in out
    assert all(c in "\t\n" or not (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F) for c in out)


def test_surrogates_become_visible_replacement_characters() -> None:
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text("x\x00y\r\nz\u202e") == "xy\nz"
    assert clean_text("cafe\u0301") == "caf\u00e9"


def _dirty_lines(example: str) -> list[str]:
    """The runbook's example with dirt in every word, and with dirt only inside the free text."""
    line = example.replace("ses_01J9ZK3", SESSION).replace("turn_42", "turn_uu5")
    words = line.split(" ")
    everywhere = " ".join([words[0], words[1], *(w + DIRT for w in words[2:])])
    inside = line.replace('"', '"' + DIRT, 1) if '"' in line else line + " " + DIRT
    return [everywhere, inside]


@pytest.mark.parametrize("name", sorted(RUNBOOKS.commands))
def test_surrogates_in_every_command_are_handled(name: str, sandbox, clock, tmp_path) -> None:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
    router = default_router(settings, sandbox=sandbox, clock=clock)
    spec = RUNBOOKS.commands[name]
    for line in _dirty_lines(spec.example):
        for actor in ("alice", "bob\ud800"):
            reply = router.handle_text(line, actor=actor, channel=None, reporter=ListReporter())
            assert isinstance(reply, Reply)
            for message in reply.messages:
                text = message.plain_text()
                text.encode("utf-8")
                assert not message.headline.startswith("Unexpected error"), (line, text)
                assert "internal error" not in text.lower(), (line, text)
    # Whatever was stored is valid text without NUL (SQLite would truncate or refuse it).
    with sqlite3.connect(tmp_path / "recover.db") as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for row in db.execute(f'SELECT * FROM "{table}"').fetchall():  # noqa: S608 - our own table names
                for value in row:
                    if isinstance(value, str):
                        value.encode("utf-8")
                        assert "\x00" not in value, (table, value)


def test_a_note_with_surrogates_is_stored_with_replacement_characters(sandbox, clock, tmp_path) -> None:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
    router = default_router(settings, sandbox=sandbox, clock=clock)
    reply = router.handle_text(
        f"/recover note {SESSION} store team\ud800 on it\x00 now", actor="alice", channel=None, reporter=ListReporter()
    )
    assert reply.ok, [m.plain_text() for m in reply.messages]
    (step,) = [s for s in router.services.store.steps(session_id=SESSION) if s.step == "note"]
    assert "store team\ufffd on it now" in str(step.inputs), step.inputs
