"""The escalation ladder of a named installation, composed as `serve` composes it (compose with the
Slack worker's ports, bot/slack/ports.py) over signed Slack HTTP, with one installation and with two: its steps
go into the request's own thread in that installation's channel, never into another installation's or
an older default case's thread, and break-glass is not opened by a ladder whose steps were not said.
The real Bolt app, the Slack Web API stand-in, sandboxes with identical session ids, real SQLite."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.clock import ManualClock
from bot.errors import StartupError
from bot.escalation.runner import LadderRunner
from tests.fixtures.escalation import TIER2, short_ladder_folder
from tests.fixtures.slack import SlackHarness, SlackStandIn
from tests.installations.conftest import spec_for

SESSION = "ses_restore_transient"  # the same id in every sandbox
DECIDE = f'decide {SESSION} close --reason "end it"'
INSTALLS = pytest.mark.parametrize("names", [("eu-1",), ("eu-1", "us-1")], ids=["one", "two"])


def _overrides(tmp_path: Path) -> dict[str, Any]:
    folder = tmp_path / "runbooks"
    return {
        "approvers": ("UBOB",),
        "runbooks_dir": folder if folder.exists() else short_ladder_folder(tmp_path),
    }


def _front(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, names: tuple[str, ...], tmp_path: Path
) -> tuple[SlackHarness, dict[str, LadderRunner]]:
    """The fleet as `serve`'s worker composes it (bot/slack/ports.py: break-glass's loud notice and the
    ladder's Slack voice of each installation), the Slack front over RECOVER_DB (its own tables live
    there, as in `serve`), and each installation's ladder runner."""
    specs = [spec_for(n, sandboxes(n, clock=clock)) for n in names]
    h: SlackHarness = slack_harness.composed(
        specs=specs, clock=clock, db_path=tmp_path / "recover.db", **_overrides(tmp_path)
    )
    runners = dict(h.composed.ladders)
    assert set(runners) == set(names)
    return h, runners


def _request(h: SlackHarness, channel: str) -> tuple[Any, Any, str]:
    """The case's root in ``channel``, the approval request in its thread, the request's id as typed."""
    for root in h.api.roots(channel):
        for message in h.api.thread(channel, root.ts):
            if any(a.startswith("rb:approve:") for a, _ in message.action_ids()):
                found = re.search(r"req_[A-Za-z0-9]+(?:\.[a-z0-9-]+)?", message.all_text())
                assert found is not None
                return root, message, found.group(0)
    raise AssertionError(f"no approval request in {channel}")


def _said(h: SlackHarness, since: int = 0) -> str:
    return "\n".join(json.dumps(b) for _, b in h.api.responses[since:]) + "\n".join(
        m.all_text() for m in h.api.messages.values()
    )


@INSTALLS
def test_ladder_steps_go_into_the_requests_thread_of_its_installation(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path, names: tuple[str, ...]
) -> None:
    h, runners = _front(slack_harness, sandboxes, clock, names, tmp_path)
    if "us-1" in names:  # the same session has a case in us-1 too: its thread is not eu-1's
        h.send.command(DECIDE, user="UALICE", channel="C0US1")
    h.send.command(DECIDE, user="UALICE", channel="C0EU1")
    h.settle()
    root, request, rid = _request(h, "C0EU1")
    assert rid.endswith(".eu-1")
    seen = len(h.api.thread("C0EU1", root.ts))

    for step in (2, 2, 2):
        clock.advance(step)
        runners["eu-1"].run_due()
    new = h.api.thread("C0EU1", root.ts)[seen:]
    texts = [m.all_text() for m in new]
    assert len(new) == 3, texts  # reminder, mention, widening: each said once, in the request's thread
    assert all(m.thread_ts == root.ts for m in new)
    assert "Reminder" in texts[0] and "<@UBOB>" in texts[1] and f"<!subteam^{TIER2}>" in texts[2]
    assert all("[eu-1]" in t for t in texts)  # each step names its installation
    live = h.api.messages[request.ts]
    may = live.all_text().split("may approve now: ", 1)[1].split(" · ", 1)[0]
    assert live.updates >= 1 and "UBOB" in may and "(not UALICE)" in may  # named by the one pending line
    assert all(v.endswith("@eu-1") for _, v in live.action_ids() if v)  # the edit keeps its buttons' tag
    if "us-1" in names:
        (us_root,) = h.api.roots("C0US1")
        assert not [m for m in h.api.thread("C0US1", us_root.ts) if "Reminder" in m.all_text()]


@INSTALLS
def test_break_glass_is_refused_while_the_ladders_steps_were_not_posted(
    slack_harness: Any,
    slack_api: SlackStandIn,
    sandboxes: Callable[..., Any],
    clock: ManualClock,
    tmp_path: Path,
    names: tuple[str, ...],
) -> None:
    h, runners = _front(slack_harness, sandboxes, clock, names, tmp_path)
    h.send.command(DECIDE, user="UALICE", channel="C0EU1")
    h.settle()
    root, _request_msg, rid = _request(h, "C0EU1")
    seen = len(h.api.thread("C0EU1", root.ts))
    h.api.fail("chat.postMessage", "internal_error", times=3)  # Slack takes none of the ladder's three steps
    for step in (2, 2, 3):
        clock.advance(step)
        runners["eu-1"].run_due()
    assert h.api.thread("C0EU1", root.ts)[seen:] == []  # nobody was told

    before = len(h.api.responses)
    h.send.command(f'break-glass {rid} --incident INC-1 --reason "nobody answers"', user="UALICE", channel="C0EU1")
    h.settle()
    said = _said(h, before)
    assert "Allowed because" not in said and f"/recover confirm {rid}" not in said, said[-3000:]
    assert "break-glass refused" in said and "not posted" in said, said[-3000:]

    before = len(h.api.responses)
    h.send.command("pending", user="UBOB", channel="C0EU1")
    h.settle()
    assert "not posted in Slack yet: remind, mention, widen" in _said(h, before)


def test_after_moving_to_an_installations_file_steps_never_go_to_the_old_default_thread(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path
) -> None:
    old = sandboxes("default", clock=clock)
    h_old = slack_harness.composed(
        clock=clock,
        db_path=tmp_path / "recover.db",
        control_host_url=old.url,
        control_host_api_key=SecretStr(old.api_key),
        **_overrides(tmp_path),
    )
    h_old.send.command(DECIDE, user="UALICE", channel="C0OLD")  # a default case's thread, RECOVER_DB's rows
    h_old.settle()
    (old_root,) = h_old.api.roots("C0OLD")
    old_seen = len(h_old.api.thread("C0OLD", old_root.ts))

    # The same RECOVER_DB, now with a file: without `default` its open request would be served by
    # nothing, so that start is refused by name; served beside us-1, its thread stays its own.
    with pytest.raises(StartupError, match=r"installation `default`'s open work .*1 open request"):
        _front(slack_harness, sandboxes, clock, ("us-1",), tmp_path)
    specs = [spec_for("default", old, channels=("C0OLD",)), spec_for("us-1", sandboxes("us-1", clock=clock))]
    h = slack_harness.composed(specs=specs, clock=clock, db_path=tmp_path / "recover.db", **_overrides(tmp_path))
    runners = dict(h.composed.ladders)
    h.send.command(DECIDE, user="UALICE", channel="C0US1")
    h.settle()
    root, _request_msg, rid = _request(h, "C0US1")
    assert rid.endswith(".us-1")
    seen = len(h.api.thread("C0US1", root.ts))
    clock.advance(2)
    runners["us-1"].run_due()
    (remind,) = h.api.thread("C0US1", root.ts)[seen:]
    assert "Reminder" in remind.all_text() and "[us-1]" in remind.all_text()
    assert len(h.api.thread("C0OLD", old_root.ts)) == old_seen  # nothing of us-1's in the old thread
