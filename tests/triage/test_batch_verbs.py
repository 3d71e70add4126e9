"""The requester's verbs on a batch: ``confirm bat_…`` sends a single-person batch, ``withdraw bat_…``
(and the Withdraw button) takes it back; ``approve``/``reject`` keep their meaning for a second person.
``pending`` lists what waits, requests and batches, with who may act on each now.

Real parts: the sandbox control host over HTTP (effects counted there), real SQLite files.
"""

from __future__ import annotations

from pathlib import Path

from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle
from bot.vocab import Action
from tests.fixtures.triage import bulk_router, make_incident


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _run(router: object, line: str, actor: str = "alice") -> Reply:
    reply: Reply = router.handle_text(line, actor=actor, channel="C1", reporter=ListReporter())  # type: ignore[attr-defined]
    return reply


def _batch(router: object, sessions: list[str], decision: str = "start_fresh") -> str:
    reply = _run(router, f'/recover batch decide --sessions {",".join(sessions)} {decision} --reason "repo back"')
    for m in reply.messages:
        if m.kind == "batch_request" and m.ref:
            return m.ref
    raise AssertionError(_text(reply))


def test_confirm_sends_a_single_person_batch_once(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    batch_id = _batch(router, made)
    request = _run(router, "/recover pending")
    assert batch_id in _text(request) and "confirm" in _text(request)
    other = _run(router, f"/recover confirm {batch_id}", actor="bob")
    assert not other.ok and not incident_sandbox.admin.effect_counts()  # only its requester confirms
    done = _run(router, f"/recover confirm {batch_id}")
    assert done.ok and "2/2 accepted" in _text(done), _text(done)
    again = _run(router, f"/recover confirm {batch_id}")
    assert not again.ok and len(incident_sandbox.admin.effects()) == 2  # executed once
    assert batch_id not in _text(_run(router, "/recover pending"))


def test_withdraw_takes_a_batch_back_and_only_its_requester_may(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    batch_id = _batch(router, made)
    by_bob = _run(router, f"/recover withdraw {batch_id}", actor="bob")
    assert not by_bob.ok and "only @alice" in _text(by_bob) and f"/recover reject {batch_id}" in _text(by_bob)
    assert router.services.bulk.batches.batches.get(batch_id).state == "requested"
    gone = _run(router, f"/recover withdraw {batch_id}")
    assert gone.ok and "withdrawn" in _text(gone)
    assert not incident_sandbox.admin.effect_counts()


def test_the_batch_buttons_run_confirm_and_withdraw(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    reply = _run(router, f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "repo back"')
    buttons = {b.label: b for m in reply.messages for b in m.buttons}
    assert buttons["Withdraw"].action == Action.WITHDRAW
    assert buttons["Withdraw"].command == f"/recover withdraw {buttons['Withdraw'].value}"
    assert buttons["Confirm"].command == f"/recover confirm {buttons['Confirm'].value}"
    clicked = router.handle_action(
        Action.WITHDRAW, buttons["Withdraw"].value, actor="alice", channel="C1", reporter=ListReporter()
    )
    assert clicked.ok and "withdrawn" in _text(clicked)


def test_confirm_is_not_a_second_persons_approval(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    batch_id = _batch(router, made, "close")
    for actor in ("alice", "bob"):
        refused = _run(router, f"/recover confirm {batch_id}", actor=actor)
        assert not refused.ok and f"/recover approve {batch_id}" in _text(refused)
    pending = _text(_run(router, "/recover pending"))
    assert "a second person (anyone; not @alice)" in pending and f"/recover approve {batch_id}" in pending
    assert not incident_sandbox.admin.effect_counts()


def test_the_requester_under_their_other_name_withdraws_and_does_not_reject(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    """A console login and its mapped Slack id are one person: their reject of their own batch is a
    withdrawal (recorded as such), never a second person's rejection."""
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path, console_users={"root": "U0ALICE01"})
    reply = router.handle_text(
        f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "repo back"',
        actor="console:root",
        channel="console",
        reporter=ListReporter(),
    )
    batch_id = next(m.ref for m in reply.messages if m.kind == "batch_request" and m.ref)
    by_slack = _run(router, f"/recover withdraw {batch_id}", actor="U0ALICE01")
    assert by_slack.ok, _text(by_slack)
    assert router.services.bulk.batches.batches.get(batch_id).state == "withdrawn"
    assert not incident_sandbox.admin.effect_counts()


def test_the_requester_confirms_under_their_other_name_and_the_gate_sends_it(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    """One identity function on every path: a single-person request (and batch) made from a mapped
    console login is confirmed by the same person's Slack id, and the gate's proof agrees and sends."""
    made = make_incident(incident_sandbox, {"startup_stopped": 3})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path, console_users={"root": "U0ALICE01"})
    asked = router.handle_text(
        f'/recover decide {made[0]} start_fresh --reason "repo back"',
        actor="console:root",
        channel="console",
        reporter=ListReporter(),
    )
    request_id = next(m.ref for m in asked.messages if m.ref and m.ref.startswith("req_"))
    confirmed = _run(router, f"/recover confirm {request_id}", actor="U0ALICE01")
    assert confirmed.ok, _text(confirmed)
    assert router.services.decisions.requests.get(request_id).state == "executed", _text(confirmed)
    reply = router.handle_text(
        f'/recover batch decide --sessions {",".join(made[1:])} start_fresh --reason "repo back"',
        actor="console:root",
        channel="console",
        reporter=ListReporter(),
    )
    batch_id = next(m.ref for m in reply.messages if m.kind == "batch_request" and m.ref)
    done = _run(router, f"/recover confirm {batch_id}", actor="U0ALICE01")
    assert done.ok and "2/2 accepted" in _text(done), _text(done)
    assert len(incident_sandbox.admin.effects()) == 3
