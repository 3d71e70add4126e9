"""The two-person rule compares people by Slack id (RECOVER_CONSOLE_USERS maps console logins), in the core.

Every path ends in DecisionService.approve: the typed command, the button (Router.handle_action), the
console. Two logins mapped to one id are one person; a Slack user approving from their own mapped login is
the requester; an unmapped login may diagnose and request single-person decisions, never request or approve
a two-person one. The sandbox's POST log is
the ground truth that nothing was sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.console.identity import terminal_login
from bot.decisions import console_actor, person_of, same_person
from bot.messages import ListReporter
from tests.fixtures.decisions import APPROVER, CHANNEL, GROUP, GROUP_MEMBER, REQUESTER, StaticDirectory

MAP = {"alice": REQUESTER, "alice2": REQUESTER, "bob": APPROVER, "gina": GROUP_MEMBER}
ALICE, ALICE2, BOB, GINA = (console_actor(x) for x in ("alice", "alice2", "bob", "gina"))
SVC_ACCOUNT = console_actor("deploy")  # a shared service account: unmapped


def _request_close(env: Any, svc: Any, actor: str, sid: str = "ses_id1") -> str:
    env.restore_failed(sid)
    reply = svc.decide(actor, CHANNEL, sid, "close", reason="store gone for good", reporter=ListReporter())
    assert reply.ok, reply.messages[0].plain_text()
    return str(reply.messages[0].ref)


def test_person_of_and_same_person():
    assert person_of("U1", MAP) == "U1"
    assert person_of(ALICE, MAP) == REQUESTER and person_of(SVC_ACCOUNT, MAP) is None
    assert same_person(ALICE, ALICE2, MAP) and same_person(ALICE, REQUESTER, MAP)
    assert not same_person(ALICE, BOB, MAP) and not same_person(SVC_ACCOUNT, BOB, MAP)
    assert same_person(SVC_ACCOUNT, SVC_ACCOUNT, MAP)


@pytest.mark.parametrize(
    ("requester", "approver", "code"),
    [
        (ALICE, ALICE, "self_approval"),  # one login, two console runs
        (ALICE, ALICE2, "self_approval"),  # two logins mapped to one Slack id
        (REQUESTER, ALICE, "self_approval"),  # a Slack requester from their own mapped login
        (ALICE, REQUESTER, "self_approval"),  # … and the other way round
        (ALICE, SVC_ACCOUNT, "not_approver"),  # unmapped: may request, never approve
    ],
)
def test_one_person_never_approves_their_own_request(decision_env, requester, approver, code):
    env = decision_env
    svc = env.service(console_users=MAP)
    rid = _request_close(env, svc, requester)
    reply = svc.approve(approver, CHANNEL, rid, ListReporter())
    assert not reply.ok, reply.messages[0].plain_text()
    refused = [s for s in env.store.steps(session_id="ses_id1") if s.step == "approve"]
    assert [s.outcome for s in refused] == [code] and refused[0].actor == approver
    assert svc.requests.get(rid).state == "requested"
    assert env.posts("ses_id1") == []


def test_an_unmapped_login_never_requests_a_two_person_decision(decision_env):
    env = decision_env
    svc = env.service(console_users=MAP)
    env.restore_failed("ses_id1")
    reply = svc.decide(SVC_ACCOUNT, CHANNEL, "ses_id1", "close", reason="store gone", reporter=ListReporter())
    assert not reply.ok
    assert reply.messages[0].headline.startswith("console login 'deploy' is not mapped to a Slack user id")
    assert "never request or approve a two-person one" in reply.messages[0].headline
    assert svc.requests.find() == [] and env.posts("ses_id1") == []
    # A mapped login's request is approved by another mapped person, as before.
    rid = _request_close(env, svc, ALICE, sid="ses_id2")
    assert svc.approve(BOB, CHANNEL, rid, ListReporter()).ok
    assert svc.requests.get(rid).approved_by == BOB
    assert len(env.effects("ses_id2")) == 1


def test_a_mapped_login_passes_the_approver_rules_by_its_slack_id(decision_env):
    env = decision_env
    directory = StaticDirectory({GROUP: {GROUP_MEMBER}})
    svc = env.service(console_users=MAP, approvers=(GROUP,), directory=directory)
    rid = _request_close(env, svc, ALICE)
    refused = svc.approve(BOB, CHANNEL, rid, ListReporter())  # bob's id is in no allowed group
    assert not refused.ok and "not an allowed approver" in refused.messages[0].headline
    reply = svc.approve(GINA, CHANNEL, rid, ListReporter())  # gina's id is a member of the group
    assert reply.ok, reply.messages[-1].plain_text()
    assert len(env.effects("ses_id1")) == 1


def test_the_button_path_refuses_the_same_person(sandbox, tmp_path):
    from bot.settings import Settings
    from tests.fixtures.composing import default_router

    router = default_router(Settings(db_path=tmp_path / "b.db"), sandbox=sandbox, startup=False, console_users_map=MAP)
    made = router.handle_text(
        'decide ses_restore_transient close --reason "store gone"',
        actor=REQUESTER,
        channel="console",
        reporter=ListReporter(),
    )
    rid = made.messages[0].ref
    assert rid and rid.startswith("req_")
    clicked = router.handle_action("approve", rid, actor=ALICE2, channel="console", reporter=ListReporter())
    assert not clicked.ok and "cannot approve your own request" in clicked.messages[0].headline
    posts = [r for r in sandbox.admin.requests("ses_restore_transient") if r.get("method") == "POST"]
    assert posts == []


class _Pw:
    def __init__(self, name: str) -> None:
        self.pw_name = name


def test_the_terminal_login_is_the_account_not_the_environment():
    accounts = {0: "root", 1000: "alice", 1001: "bob"}
    by_name = {v: k for k, v in accounts.items()}

    def login(uid: int, **env: str) -> str:
        return terminal_login(
            environ=env,
            getuid=lambda: uid,
            getpwuid=lambda u: _Pw(accounts[u]),
            getpwnam=lambda n: _Pw(n) if n in by_name else (_ for _ in ()).throw(KeyError(n)),
        )

    assert login(1000, USER="bob", LOGNAME="bob") == "alice"
    assert login(1000, SUDO_USER="bob") == "alice"  # only root's SUDO_USER is the invoking user
    assert login(0, SUDO_USER="alice", USER="root") == "alice"
    assert login(0, SUDO_USER="nosuchuser") == "root"
    assert login(0) == "root"
    assert login(4242) == "uid4242"  # a uid without an account (a container's): never a guessable name


@pytest.mark.parametrize("mapping_at_restart", [MAP, {}])
def test_a_forged_approval_by_the_requesters_other_login_is_refused_after_a_restart(decision_env, mapping_at_restart):
    """The restart path re-derives authority from the chain: the Slack ids recorded with the request and
    the approval (and today's mapping) make two logins of one person one person, even if the mapping
    was removed since."""
    env = decision_env
    svc = env.service(console_users=MAP)
    rid = _request_close(env, svc, ALICE)
    req = svc.requests.get(rid)
    # Someone with the database file records an approval by alice's second login and marks the row approved.
    env.store.record_step(
        "ses_id1",
        ALICE2,
        "decision_approved",
        {
            "request_id": rid,
            "content_hash": req.content_hash,
            "channel": CHANNEL,
            "allowed_by": {"kind": "any", "person": REQUESTER, "login": "alice2"},
        },
        "approved",
    )
    with env.store.write() as db:
        assert svc.requests.transition(db, rid, ("requested",), "approved", approved_by=ALICE2)
    env.restart()
    env.service(console_users=mapping_at_restart).recover_after_restart(ListReporter())
    assert env.posts("ses_id1") == [] and env.effects("ses_id1") == []
    assert env.service().requests.get(rid).state != "executed"
