"""Every command the bot prints for a person to paste is accepted when pasted back, placeholders filled.

The real router over the sandbox control host (HTTP), typed as the console types. A session whose
restore was refused for permanent damage needs ``--cause-fixed`` for ``retry_restore`` (R2.8, R5.3):
diagnose and triage say so, and every line printed for it carries it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bot.messages import ListReporter
from tests.fixtures.decisions import reply_text, say

DAMAGED = "ses_restore_damaged"
FILLED = {
    "cause-fixed": "the checkpoint was re-uploaded",
    "effects": "pushed nothing",
    "evidence": "ticket-9",
    "reason": "pasted back",
}


@pytest.fixture
def console_router(sandbox: Any, tmp_path: Path) -> Any:
    """The console's router over the builtin sandbox, its login mapped (a two-person request is allowed)."""
    from bot.settings import Settings
    from tests.fixtures.composing import default_router

    settings = Settings(db_path=tmp_path / "console.db", console_users={"alice": "U0ALICE01", "bob": "U0BOB0001"})
    return default_router(settings, sandbox=sandbox, startup=False)


def _fill(line: str) -> str:
    """The placeholders a printed line leaves for the person, filled as a person would."""
    return re.sub(r'--([a-z-]+) "…"', lambda m: f'--{m.group(1)} "{FILLED[m.group(1)]}"', line)


def _refused(reply: Any) -> bool:
    return not reply.ok or any(m.level == "error" for m in reply.messages)


def _printed(reply: Any, start: str) -> list[str]:
    """The typed lines of a reply that start with ``start``: in its text and behind its buttons."""
    text = reply_text(reply)
    lines = [m.group(1).rstrip(" .;") for m in re.finditer(rf"({re.escape(start)}[^\n;`]*)", text)]
    lines += [b.command for m in reply.messages for b in m.buttons if b.command and b.command.startswith(start)]
    return lines


def test_diagnose_names_what_a_valid_decision_needs_and_its_lines_are_accepted(console_router: Any) -> None:
    reply = say(console_router, f"diagnose {DAMAGED}")
    valid = next(line for line in reply_text(reply).splitlines() if line.startswith("Valid now:"))
    assert "retry_restore (needs --cause-fixed" in valid and "R2.8" in valid
    buttons = {b.label: b.command for m in reply.messages for b in m.buttons if b.command}
    assert "--cause-fixed" in buttons["retry_restore"]
    # The retry's line, pasted with its placeholders filled, is accepted: a confirmation, not a refusal.
    pasted = say(console_router, _fill(buttons["retry_restore"]))
    assert not _refused(pasted), reply_text(pasted)
    assert "Confirm `retry_restore`" in reply_text(pasted)

    # An unknown turn's decisions: --turn filled from the facts, what is left named.
    covered = say(console_router, "diagnose ses_unknown_covered")
    valid = next(line for line in reply_text(covered).splitlines() if line.startswith("Valid now:"))
    assert "abandon (needs --effects)" in valid
    for command in [b.command for m in covered.messages for b in m.buttons if b.command]:
        assert "--turn turn_" in command or " close " in command, command
        pasted = say(console_router, _fill(command))
        assert not _refused(pasted), (command, reply_text(pasted))


def test_the_confirmation_line_keeps_cause_fixed_and_is_accepted_when_pasted(console_router: Any) -> None:
    made = say(console_router, f'decide {DAMAGED} retry_restore --cause-fixed "runtime pinned back" --reason "fixed"')
    assert not _refused(made), reply_text(made)
    lines = _printed(made, f"/recover decide {DAMAGED}")
    assert lines and all('--cause-fixed "runtime pinned back"' in line for line in lines), lines
    pasted = say(console_router, lines[0])
    assert not _refused(pasted), reply_text(pasted)
    assert "needs --cause-fixed" not in reply_text(pasted)


def test_a_refusal_names_the_line_that_is_accepted(console_router: Any) -> None:
    refused = say(console_router, f'decide {DAMAGED} retry_restore --reason "try again"')
    assert _refused(refused) and "needs --cause-fixed" in reply_text(refused)
    (line,) = _printed(refused, f"/recover decide {DAMAGED} retry_restore")
    pasted = say(console_router, _fill(line))
    assert not _refused(pasted), reply_text(pasted)


def test_did_you_mean_and_handoff_lines_are_accepted(console_router: Any) -> None:
    typo = say(console_router, f"diagnoes {DAMAGED}")
    (line,) = set(_printed(typo, "/recover diagnose"))
    assert not _refused(say(console_router, line))

    say(console_router, f'decide {DAMAGED} retry_restore --cause-fixed "runtime pinned back" --reason "fixed"')
    handoff = say(console_router, "handoff")
    printed = set(re.findall(r"`(/recover [^`]+)`", reply_text(handoff)))
    assert any(line.startswith("/recover confirm req_") for line in printed), reply_text(handoff)
    assert f"/recover history {DAMAGED}" in printed  # a case with no thread yet: its history, named
    for line in sorted(printed, key=lambda c: "confirm" in c):  # the confirm last: it sends
        pasted = say(console_router, line)
        assert not _refused(pasted), (line, reply_text(pasted))


def test_triage_names_cause_fixed_where_a_retry_cannot_cure(console_router: Any) -> None:
    text = reply_text(say(console_router, "triage"))
    permanent = next(i for i, line in enumerate(text.splitlines()) if "[restore_permanent]" in line)
    valid = text.splitlines()[permanent + 1]
    assert "retry_restore (needs --cause-fixed)" in valid, valid
    transient = next(i for i, line in enumerate(text.splitlines()) if "[restore_transient]" in line)
    assert "retry_restore (needs" not in text.splitlines()[transient + 1]
    per_session = [line for line in text.splitlines() if "valid for every member:" in line and "abandon (" in line]
    assert per_session and all("abandon (per session, each with its --turn)" in line for line in per_session)


def test_an_approval_requests_lines_are_accepted_from_the_second_person(console_router: Any) -> None:
    def bob(line: str) -> Any:
        return console_router.handle_text(line, actor="console:bob", channel="console", reporter=ListReporter())

    for session, verb in (("ses_restore_transient", "approve"), ("ses_restore_gone", "reject")):
        asked = say(console_router, f'decide {session} close --reason "end it"')
        assert "Approval needed" in reply_text(asked), reply_text(asked)
        lines = _printed(asked, f"/recover {verb} req_")
        assert lines, reply_text(asked)
        line = max(lines, key=len)  # the printed line with its flags (the button's is its prefix)
        pasted = bob(_fill(line))
        assert not _refused(pasted), (line, reply_text(pasted))
        assert ("executed" if verb == "approve" else "rejected") in reply_text(pasted).lower(), reply_text(pasted)


TYPED = re.compile(r'/recover [a-z-]+(?: (?!--)[A-Za-z0-9_.:-]+)*(?: --[a-z-]+(?: (?:"[^"]*"|(?!--)[^\s"`;]+))?)*')


def test_next_steps_and_pending_lines_are_accepted(console_router: Any) -> None:
    diag = say(console_router, "diagnose ses_unknown_covered")
    text = reply_text(diag)
    steps = text[text.index("Next:") :]
    lines = [m.group(0) for m in TYPED.finditer(steps)]
    assert any(line.startswith("/recover decide ses_unknown_covered abandon --turn turn_") for line in lines), steps
    for line in lines:
        pasted = say(console_router, _fill(line))
        assert not _refused(pasted), (line, reply_text(pasted))
    pending = say(console_router, "pending")
    printed = set(re.findall(r"`(/recover [^`]+)`", reply_text(pending)))
    assert printed, reply_text(pending)
    for line in sorted(printed):
        pasted = say(console_router, _fill(line))
        # The requester's own two-person request: the only refusal is the one pending names (not yours).
        assert not _refused(pasted) or "cannot approve" in reply_text(pasted), (line, reply_text(pasted))
