"""The two-person rule's checks, as pure functions (no I/O but the approver directory).

They live in the core so that no front end can skip them: the Slack button, the typed
``/recover approve`` and the console all end in :meth:`DecisionService.approve`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from bot.channels import CONSOLE_CHANNEL as _CONSOLE_CHANNEL
from bot.errors import RecoverError
from bot.ids import HOST_ID
from bot.redact import redact

ID_RE = HOST_ID  # session and turn ids as the control host spells them (bot/ids.py)

# The facts whose change voids an approval: what the second person looked at when approving
# (attention code/reason/failures, the turn's status, the checkpoint). The revision is not one of
# them: it also moves when the scheduler confirms a worker gone, which is what abandon waits for.
DECISIVE_FACTS = (
    "attention.code",
    "attention.reason",
    "attention.failures",
    "turn.status",
    "unknown_turn.id",
    "checkpoint.id",
    "checkpoint.covers_turn_id",
)


class ApproverDirectory(Protocol):
    """Resolves a user group (S…) to its members; the Slack app uses usergroups.users.list."""

    def members(self, group_id: str) -> set[str]: ...


# A console actor is ``console:<login>``: the step log records the login and that it came from the
# console; a Slack actor is the Slack user id. Who is *one person* is decided by Slack id (below).
CONSOLE_PREFIX = "console:"
CONSOLE_CHANNEL = _CONSOLE_CHANNEL  # the channel rule's own (bot/channels.py)


def console_actor(login: str) -> str:
    """The actor a console login acts as (recorded in every step it makes)."""
    return CONSOLE_PREFIX + login


def console_login(actor: str) -> str | None:
    """The login of a console actor; None for a Slack actor."""
    return actor[len(CONSOLE_PREFIX) :] if actor.startswith(CONSOLE_PREFIX) else None


def person_of(actor: str, console_users: Mapping[str, str]) -> str | None:
    """The Slack id that stands for the person behind ``actor`` (RECOVER_CONSOLE_USERS maps logins).

    A Slack actor is its own id; a console login is the id it is mapped to, or None when unmapped
    (a shared service account, a container's uid: nobody can say who is typing).
    """
    login = console_login(actor)
    if login is None:
        return actor
    return console_users.get(login)


def same_person(a: str, b: str, console_users: Mapping[str, str]) -> bool:
    """True when ``a`` and ``b`` are (or may be shown to be) one person: the same actor, or two actors
    mapped to one Slack id — two logins of one person, or a Slack user and their own login."""
    if a == b:
        return True
    pa, pb = person_of(a, console_users), person_of(b, console_users)
    return pa is not None and pa == pb


def identity_refusal(actor: str, requester: str, console_users: Mapping[str, str]) -> tuple[str, str, list[str]] | None:
    """The two-person rule's identity checks for approving ``requester``'s request as ``actor``.

    Returns None when ``actor`` is a second, identifiable person, else (code, headline, lines). People
    are compared by Slack id, so no path — button, typed command, console, retry or restart — lets one
    person approve their own request under a second name; an unmapped console login never approves.
    RECOVER_APPROVERS is checked after this, on the Slack id.
    """
    if same_person(actor, requester, console_users):
        return (
            "self_approval",
            "you cannot approve your own request: a second person must approve it",
            ["Ask another on-call engineer to run `/recover approve <request_id>`."],
        )
    if person_of(actor, console_users) is None:
        login = console_login(actor)
        return (
            "not_approver",
            f"console login {login!r} is not mapped to a Slack user id (RECOVER_CONSOLE_USERS): "
            "it may request and diagnose, never approve",
            [f"Map it in RECOVER_CONSOLE_USERS (e.g. {login}:U012ABCDEF) or approve in Slack."],
        )
    return None


def requester_refusal(actor: str, policy: str, console_users: Mapping[str, str]) -> tuple[str, str] | None:
    """An unmapped console login may diagnose and request single-person decisions, never a two-person
    one: nobody could tell its approver from its requester. (headline, what to do) or None."""
    if policy != "two_person" or person_of(actor, console_users) is not None:
        return None
    login = console_login(actor)
    return (
        f"console login {login!r} is not mapped to a Slack user id (RECOVER_CONSOLE_USERS): it may diagnose and "
        "request single-person decisions, never request or approve a two-person one",
        f"Map it in RECOVER_CONSOLE_USERS (e.g. {login}:U012ABCDEF) or make the request in Slack.",
    )


def _directory_failure(exc: Exception) -> str:
    """A source's own account (what failed, what to fix) when it gives one; else only the error's kind."""
    if isinstance(exc, RecoverError):
        return redact(exc.message + (f" ({exc.hint})" if exc.hint else ""))
    return type(exc).__name__


def approver_evidence(
    actor: str, approvers: Sequence[str], directory: ApproverDirectory | None, widened: Sequence[str] = ()
) -> tuple[dict[str, Any] | None, str | None]:
    """THE approver rule (RECOVER_APPROVERS, widened by the escalation ladder): what allows ``actor``.

    Returns (evidence, None) or (None, problem-or-None). Evidence kinds: ``any`` (no list is set: any
    second person), ``user`` (listed by id), ``group`` (a member of a listed user group, as read now),
    ``widened`` (a ``U…`` id, or a member of an ``S…`` group, that a due ``widen`` step of the request's
    ladder named: ``widened`` is exactly those ids, the caller derives them from the chain). Widening
    adds only the people it names, and never the requester: the identity checks (:func:`same_person`)
    run before this rule on every path.
    """
    if not approvers:
        return {"kind": "any"}, None
    if actor in approvers:
        return {"kind": "user", "id": actor}, None
    problem: str | None = None
    for kind, ident in [("group", a) for a in approvers if a.startswith("S")] + [("widened", w) for w in widened]:
        if ident == actor and kind == "widened":
            return {"kind": kind, "id": ident, "member": actor}, None
        if not ident.startswith("S"):
            continue
        if directory is None:
            problem = f"user group {ident} cannot be resolved (no directory configured)"
            continue
        try:
            if actor in directory.members(ident):
                return {"kind": kind, "id": ident, "member": actor}, None
        except Exception as exc:  # noqa: BLE001 - any directory failure refuses, never allows
            problem = f"user group {ident} could not be read: {_directory_failure(exc)}"
    return None, problem


def approver_allowed(
    actor: str, approvers: Sequence[str], directory: ApproverDirectory | None, widened: Sequence[str] = ()
) -> tuple[bool, str | None]:
    """:func:`approver_evidence` as a yes/no: (allowed, problem) where problem explains a group that
    could not be resolved."""
    evidence, problem = approver_evidence(actor, approvers, directory, widened)
    return evidence is not None, problem


# Whether each object exists: kept beside the snapshot so a cleared attention reads "none" (not
# "unknown") when a voided approval lists what changed. Not compared (the values above say it).
PRESENCE_FACTS = ("attention.present", "checkpoint.present", "unknown_turn.present")


def settled_reason(facts: Mapping[str, Any]) -> str | None:
    """Why the session needs no operator — closed, or running/idle with nothing to recover — else None.

    A case closes on it (with a recorded step) after a diagnosis or a verification (R5.1).
    """
    status, admission = facts.get("session.status"), facts.get("session.admission_state")
    if status == "closed" or admission == "closed":
        return "the session is closed"
    if (
        status in ("running", "idle")
        and admission == "open"
        and not facts.get("attention.present")
        and not facts.get("unknown_turn.present")
        and facts.get("logs.outage_ongoing") is not True  # R2.6: a store outage in progress is not settled
    ):
        return f"the session is {status} and needs no operator"
    return None


def decisive_facts(facts: Mapping[str, Any], turn_status: str | None) -> dict[str, Any]:
    """The snapshot an approval binds (see :data:`DECISIVE_FACTS`)."""
    snapshot = {name: facts.get(name) for name in DECISIVE_FACTS if name != "turn.status"}
    snapshot["turn.status"] = turn_status
    snapshot.update({name: facts.get(name) for name in PRESENCE_FACTS})
    return snapshot


def changed_facts(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Human-readable list of every decisive fact that differs: ``name: old → new``."""
    out = []
    for name in DECISIVE_FACTS:
        if before.get(name) != after.get(name):
            out.append(f"{name}: {_show(name, before)} → {_show(name, after)}")
    return out


def _show(name: str, snapshot: Mapping[str, Any]) -> str:
    """None is "none" when the snapshot says the object is absent (no attention, no checkpoint, no
    outcome_unknown turn), "unknown" when it could not be read."""
    value = snapshot.get(name)
    if value is not None:
        return str(value)
    head = name.partition(".")[0]
    return "none" if snapshot.get(f"{head}.present") is False else "unknown"
