"""Batches, the hand-off and pending where they meet installations: with one installation and with two,
over signed Slack HTTP through the real Bolt app, composed as `serve`'s worker composes the fleet. Sandboxes with
identical session ids (so an answer that reached the wrong host would look right), real SQLite, the
sandboxes' request logs as the ground truth for what was sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.clock import ManualClock
from bot.slack.unsaid import unsaid_look
from tests.fixtures.slack import Posted, SlackHarness
from tests.installations.conftest import posts, spec_for

INSTALLS = pytest.mark.parametrize("names", [("eu-1",), ("eu-1", "us-1")], ids=["one", "two"])
MEMBERS = ("ses_restore_damaged", "ses_context_gap")  # in every sandbox's builtin scenarios
BATCH = f'batch decide --sessions {",".join(MEMBERS)} close --reason "the repositories are gone"'
ALONE = 'decide ses_startup_stopped close --reason "the customer ended it"'


def _front(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path, names: tuple[str, ...]
) -> SlackHarness:
    """The fleet as `serve`'s worker composes it (bot/slack/ports.py), the Bolt app over its router."""
    specs = [spec_for(n, sandboxes(n, clock=clock)) for n in names]
    harness: SlackHarness = slack_harness.composed(
        specs=specs, clock=clock, db_path=tmp_path / "recover.db", approvers=("UBOB", "UCAROL")
    )
    return harness


def _said(h: SlackHarness, since: int = 0) -> str:
    """What the command's replies said since ``since`` (response_url bodies), as a person reads them."""
    return "\n".join(json.dumps(body) for _, body in h.api.responses[since:])


def _say(h: SlackHarness, text: str, *, user: str, channel: str) -> str:
    before = len(h.api.responses)
    assert h.send.command(text, user=user, channel=channel).status_code == 200
    h.settle()
    return _said(h, before) + "\n".join(m.all_text() for m in h.api.messages.values())


def _batch_message(h: SlackHarness, channel: str) -> tuple[Posted, str]:
    for message in h.api.messages.values():
        found = re.search(r"bat_[A-Za-z0-9]+(?:\.[a-z0-9-]+)?", message.all_text())
        if message.channel == channel and found and re.search(r"Batch \S+: `close`", message.text):
            return message, found.group(0)
    raise AssertionError(f"no batch message in {channel}: {[m.text[:80] for m in h.api.messages.values()]}")


def _open_work(h: SlackHarness, names: tuple[str, ...]) -> SlackHarness:
    """eu-1: a request and a batch waiting for approval; us-1 (when served): a request of its own by
    another person, on a session id eu-1 has too."""
    _say(h, ALONE, user="UALICE", channel="C0EU1")
    _say(h, BATCH, user="UALICE", channel="C0EU1")
    if "us-1" in names:
        _say(h, ALONE, user="UDAVE", channel="C0US1")
    return h


def _keys(requests: list[dict[str, Any]]) -> list[str]:
    return [str(r.get("idempotency_key") or (r.get("headers") or {}).get("Idempotency-Key")) for r in requests]


@INSTALLS
def test_a_batch_is_asked_approved_and_sent_in_its_own_installation_only(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path, names: tuple[str, ...]
) -> None:
    h = _front(slack_harness, sandboxes, clock, tmp_path, names)
    _say(h, BATCH, user="UALICE", channel="C0EU1")
    message, batch_id = _batch_message(h, "C0EU1")
    assert batch_id.endswith(".eu-1")  # the id names its installation, with one as with two
    assert all(v.endswith("@eu-1") for _, v in message.action_ids() if v)  # and so do its buttons
    assert posts(sandboxes("eu-1")) == []  # two-person: nothing sent before the approval
    root = h.api.messages[message.thread_ts or message.ts]
    assert f"[eu-1] Batch `{batch_id}`" in root.text and "@" not in root.text.split("started by")[0]  # no inner key

    if "us-1" in names:  # approved from another installation's channel: a contradiction, nothing sent
        refused = _say(h, f"approve {batch_id}", user="UBOB", channel="C0US1")
        assert "eu-1" in refused and "us-1" in refused, refused[-2000:]
        assert posts(sandboxes("eu-1")) == [] and posts(sandboxes("us-1")) == []
    self_approval = _say(h, f"approve {batch_id}", user="UALICE", channel="C0EU1")
    assert "cannot approve your own" in self_approval.lower() or "own request" in self_approval, self_approval[-2000:]
    assert posts(sandboxes("eu-1")) == []

    _say(h, f"approve {batch_id}", user="UBOB", channel="C0EU1")
    sent = posts(sandboxes("eu-1"))
    decided = [r for r in sent if "recovery-decisions" in str(r.get("path"))]
    assert sorted({s for r in decided for s in MEMBERS if s in str(r.get("path"))}) == sorted(MEMBERS), sent
    assert len(set(_keys(decided))) == len(decided)  # one key each
    if "us-1" in names:
        assert posts(sandboxes("us-1")) == []  # the same session ids on us-1's host: untouched
    thread = h.api.thread("C0EU1", message.thread_ts or message.ts)
    progress = [m for m in thread if "finished" in m.text and batch_id in m.text]
    settled = [m for m in thread if "settled" in m.text and batch_id in m.text]
    assert len(progress) == 1, [m.text[:90] for m in thread]  # one message for the run, never one per member
    assert len(settled) == 1 and "2/2" in settled[0].text, [m.text[:90] for m in thread]  # one final word
    if "us-1" in names:
        assert "[eu-1]" in progress[0].text
        assert not any(batch_id in m.all_text() for m in h.api.messages.values() if m.channel == "C0US1")


@INSTALLS
def test_pending_lists_its_own_installations_requests_and_all_groups_them(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path, names: tuple[str, ...]
) -> None:
    h = _open_work(_front(slack_harness, sandboxes, clock, tmp_path, names), names)
    before = len(h.api.responses)
    h.send.command("pending", user="UBOB", channel="C0EU1")
    h.settle()
    own = _said(h, before)
    assert ".eu-1" in own and "bat_" in own and "ses_startup_stopped" in own, own[-2000:]
    assert ".us-1" not in own and "UDAVE" not in own  # us-1's request is not eu-1's

    before = len(h.api.responses)
    h.send.command("pending --all", user="UBOB", channel="C0EU1")
    h.settle()
    every = _said(h, before)
    assert ".eu-1" in every, every[-2000:]
    if "us-1" in names:
        assert ".us-1" in every and every.index("[eu-1]") < every.index("[us-1]"), every[-2000:]


@INSTALLS
def test_the_handoff_names_each_installations_open_requests_under_it(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path, names: tuple[str, ...]
) -> None:
    h = _open_work(_front(slack_harness, sandboxes, clock, tmp_path, names), names)
    before = len(h.api.responses)
    h.send.command("handoff", user="UBOB", channel="C0EU1")
    h.settle()
    digest = _said(h, before) + "\n".join(
        m.all_text() for m in h.api.messages.values() if m.text.startswith(("Hand-off", "[eu-1] Hand-off"))
    )
    assert "ses_startup_stopped" in digest and "bat_" in digest, digest[-3000:]
    eu_ids = set(re.findall(r"(?:req|bat)_[A-Za-z0-9]+\.eu-1", digest))
    assert eu_ids, digest[-3000:]  # the digest's lines carry ids that name their installation
    if "us-1" in names:
        assert re.search(r"req_[A-Za-z0-9]+\.us-1", digest), digest[-3000:]
        assert digest.index("[eu-1]") < digest.index("[us-1]")  # grouped by installation, in file order


def _asks(h: SlackHarness) -> list[Posted]:
    return [m for m in h.api.messages.values() if any(a.startswith("rb:approve:") for a, _ in m.action_ids())]


@INSTALLS
def test_what_slack_refused_is_said_once_by_the_workers_look_in_its_own_installations_thread(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path, names: tuple[str, ...]
) -> None:
    """bot/slack/unsaid.py with one installation and with two: an approval request and a result that
    Slack refused are said by the look `serve`'s worker runs (built by the worker's own function), once
    between two workers' looks, in the installation's own thread and named by it; nothing in another's."""
    h = _front(slack_harness, sandboxes, clock, tmp_path, names)
    looks = [unsaid_look(h.bot, h.composed), unsaid_look(h.bot, h.composed)]  # two workers
    grace = 2 * h.bot.settings.worker_stale_seconds + 1
    for method in ("chat.postMessage", "chat.update"):
        h.api.fail(method, "internal_error", times=1, when="rb:approve:")
    _say(h, ALONE, user="UALICE", channel="C0EU1")
    assert _asks(h) == [] and sum(look.look() for look in looks) == 0  # refused, and not yet due
    clock.advance(grace)
    assert sum(look.look() for look in looks) == 2  # each worker offers it once; one says it
    h.settle()
    (ask,) = _asks(h)
    assert ask.channel == "C0EU1" and ask.thread_ts is not None
    assert all(v.endswith("@eu-1") for _, v in ask.action_ids() if v)
    found = re.search(r"req_[A-Za-z0-9]+(?:\.[a-z0-9-]+)?", ask.all_text())
    assert found is not None

    h.api.fail("chat.postMessage", "internal_error", times=1, when="Verified")
    _say(h, f"approve {found.group(0)}", user="UBOB", channel="C0EU1")
    thread = h.api.thread("C0EU1", ask.thread_ts)
    assert not [m for m in thread if "Verified" in m.all_text()]
    clock.advance(grace)
    assert sum(look.look() for look in looks) == 2
    h.settle()
    said = [m for m in h.api.thread("C0EU1", ask.thread_ts) if "Verified" in m.all_text()]
    assert len(said) == 1 and "ses_startup_stopped" in said[0].all_text()
    assert sum(look.look() for look in looks) == 0  # looked at: nothing offered again
    assert len([r for r in posts(sandboxes("eu-1")) if "recovery-decisions" in str(r.get("path"))]) == 1
    if "us-1" in names:
        assert "[eu-1]" in said[0].all_text()
        assert not any(m.channel == "C0US1" for m in h.api.messages.values())
        assert posts(sandboxes("us-1")) == []
