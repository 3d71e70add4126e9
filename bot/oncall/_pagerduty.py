"""The PagerDuty on-call source: who is on call for an escalation policy, as Slack user ids.

What it follows of PagerDuty's published REST API v2:

- "List all of the on-calls" (the OpenAPI reference, github.com/PagerDuty/api-schema,
  reference/REST/openapiv3.json, ``GET /oncalls``): ``escalation_policy_ids[]=P…&include[]=users&
  earliest=true``. Without ``since`` and ``until`` both default to now: the on-calls overlapping this
  moment. ``earliest`` keeps one entry per (escalation policy, level, user); ``include[]=users`` puts
  each user's ``email`` in the answer. 401 is a missing or wrong key, 403 a key that may not read
  on-calls (scoped OAuth: ``oncalls.read``), 429 the rate limit.
- Authentication and versioning (the same reference): ``Authorization: Token token=<key>`` and
  ``Accept: application/vnd.pagerduty+json;version=2``.
- Classic pagination (https://developer.pagerduty.com/docs/rest-api-v2/pagination/): ``limit`` and
  ``offset`` in, ``limit``/``offset``/``more`` echoed back; the next page starts at ``offset + limit``
  as echoed (the API may lower a limit), and ``offset + limit`` may not pass 10,000.
- Rate limits (https://support.pagerduty.com/docs/rest-api-rate-limits): on 429 wait what the answer
  says — ``Retry-After`` when present, else ``ratelimit-reset`` (seconds until the limit resets) —
  and otherwise back off, doubling.

The answer is not trusted to honour the filter: each entry's ``escalation_policy.id`` is compared with the
policy asked for, and its ``schedule.id`` with the schedule where one is configured for the tier
(``schedule_ids[]`` is asked for too); other entries are dropped (counted in :attr:`OnCall.dropped` and
logged), and an entry that cannot be checked (no policy id, no user id, wrong types) refuses the whole
answer.

A 5xx answer, a timeout or no connection is retried as a 429 is. Every retry is bounded (``attempts``
and a total ``max_wait``; a told wait past it refuses at once): an approval waits seconds at most, then
is refused with what to fix; never a hot loop, never an allowance. The on-calls are read at every
question (they change during an incident); the email → Slack id mapping (Slack's ``users.lookupByEmail``)
is cached. The key never appears in a message or a log line (it lives in the client's headers only).
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from bot.oncall._directory import OnCall, OnCallDirectory, OnCallUnavailable
from bot.redact import redact

log = logging.getLogger("recover_bot.oncall")

TOKEN_SETTING = "RECOVER_ONCALL_PAGERDUTY_TOKEN"
ACCEPT = "application/vnd.pagerduty+json;version=2"
PAGE_LIMIT = 100
MAX_WINDOW = 10_000  # offset + limit, the API's pagination ceiling


class SlackPeople(Protocol):
    """Maps an email address to a Slack user id (None: no such Slack user); raises when Slack cannot say."""

    def slack_id_for_email(self, email: str) -> str | None: ...


class PagerDutyDirectory(OnCallDirectory):
    """Tiers mapped to escalation policies (``policies``: group id → policy id), read from PagerDuty;
    ``schedules`` (group id → schedule id) narrows a tier to one schedule within its policy."""

    def __init__(
        self,
        *,
        api_url: str,
        token: str,
        policies: Mapping[str, str],
        people: SlackPeople,
        schedules: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        attempts: int = 3,
        max_wait: float = 10.0,
        backoff: float = 0.5,
        email_ttl: float = 3600.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policies = dict(policies)
        self.schedules = dict(schedules or {})  # group id → the schedule within its policy, where configured
        self.people = people
        self.attempts = max(1, attempts)
        self.max_wait = max_wait
        self.backoff = backoff
        self.email_ttl = email_ttl
        self._sleep = sleep
        self._monotonic = monotonic
        self._emails: dict[str, tuple[str, float]] = {}  # email → (Slack id, expiry)
        self._http = httpx.Client(
            base_url=api_url.rstrip("/"),
            timeout=httpx.Timeout(timeout),
            headers={"Authorization": f"Token token={token}", "Accept": ACCEPT},
        )

    def close(self) -> None:
        self._http.close()

    def on_call(self, group_id: str) -> OnCall:
        policy = self.policies.get(group_id)
        if policy is None:
            raise OnCallUnavailable(
                f"{group_id} is not mapped to a PagerDuty escalation policy",
                hint="Add it to RECOVER_ONCALL_PAGERDUTY_POLICIES (e.g. S0ONCALL2:PABC123).",
            )
        schedule = self.schedules.get(group_id)
        slack_ids: set[str] = set()
        unmatched: list[str] = []
        users, dropped = self._users(policy, schedule)
        for user in users:
            slack_id = self._slack_id(user)
            if slack_id is None:
                unmatched.append(_who(user))
            else:
                slack_ids.add(slack_id)
        if unmatched:
            log.warning(
                "PagerDuty policy %s (%s): on call but not matched to a Slack user by email: %s",
                policy, group_id, ", ".join(unmatched),
            )  # fmt: skip
        source = f"PagerDuty escalation policy {policy}" + (f", schedule {schedule}" if schedule else "")
        return OnCall(group_id, source, frozenset(slack_ids), tuple(unmatched), dropped)

    # -- PagerDuty --------------------------------------------------------------------------------

    def _users(self, policy: str, schedule: str | None) -> tuple[list[dict[str, Any]], int]:
        """Every user on call for ``policy`` (and ``schedule`` when one is configured) now, once each, over
        all pages; and how many entries of the answer were dropped as not what was asked for.

        The query asks for ``policy`` (and ``schedule``) only, but the answer is checked entry by entry all
        the same: a proxy, a cache or an API change that loses the filter must not make every on-call of the
        account an approver of what cannot be undone (R5.4: ``close`` waits for a second person the tier
        names, never one a wider answer happens to list).
        """
        users: dict[str, dict[str, Any]] = {}
        dropped: dict[str, int] = {}  # what the entry was instead ("escalation policy PTWO") → entries
        query: tuple[tuple[str, str], ...] = (("escalation_policy_ids[]", policy),)
        if schedule is not None:
            query += (("schedule_ids[]", schedule),)
        offset, limit = 0, PAGE_LIMIT
        while True:
            body = self._get(
                query + (("include[]", "users"), ("earliest", "true"), ("limit", limit), ("offset", offset))
            )  # fmt: skip
            oncalls = body.get("oncalls")
            if not isinstance(oncalls, list):
                raise _bad_answer("no oncalls list")
            for entry in oncalls:
                user, outside = _entry(entry, policy, schedule)
                if outside is not None:
                    dropped[outside] = dropped.get(outside, 0) + 1
                    continue
                users.setdefault(user["id"], user)
            if body.get("more") is not True:
                if dropped:
                    asked = f"escalation policy {policy}" + (f", schedule {schedule}" if schedule else "")
                    log.warning(
                        "PagerDuty answered %d on-call(s) outside what was asked for (%s) when asked for %s: "
                        "dropped, they cannot approve for it",
                        sum(dropped.values()), ", ".join(f"{k}: {n}" for k, n in sorted(dropped.items())), asked,
                    )  # fmt: skip
                return list(users.values()), sum(dropped.values())
            echoed = body.get("limit")
            step = echoed if isinstance(echoed, int) and echoed > 0 else limit
            if not oncalls or offset + step + limit > MAX_WINDOW:
                raise _bad_answer(
                    "more on-calls than PagerDuty's paging reaches (offset + limit over 10,000)"
                    if oncalls
                    else "an empty page said there were more"
                )
            offset += step

    def _get(self, params: tuple[tuple[str, str | int], ...]) -> dict[str, Any]:
        waited = 0.0
        for attempt in range(1, self.attempts + 1):
            backoff = self.backoff * 2 ** (attempt - 1)
            try:
                response = self._http.get("/oncalls", params=params)
            except httpx.TimeoutException:
                problem, wait = f"did not answer within {self._http.timeout.read}s", backoff
            except httpx.HTTPError as exc:
                problem, wait = f"could not be reached ({type(exc).__name__})", backoff
            else:
                status = response.status_code
                if status == 200:
                    return _json(response)
                if status in (401, 403):
                    raise _auth_error(status)
                if status == 429:
                    told = _told_wait(response.headers)
                    problem, wait = "rate limited the bot (429)", told if told is not None and told > 0 else backoff
                elif status >= 500:
                    problem, wait = f"answered {status}", backoff
                else:
                    raise OnCallUnavailable(f"PagerDuty refused the on-call query ({status}: {_message(response)})")
            if attempt == self.attempts or waited + wait > self.max_wait:
                raise OnCallUnavailable(
                    f"PagerDuty {problem}: who is on call is unknown, so on-call approvers are refused for now",
                    hint="Try again shortly, or approve as a user listed by id in RECOVER_APPROVERS.",
                )
            log.warning("PagerDuty %s; asking again in %.1fs (attempt %d of %d)", problem, wait, attempt, self.attempts)
            self._sleep(wait)
            waited += wait
        raise AssertionError("unreachable")  # the loop returns or raises

    # -- Slack ids --------------------------------------------------------------------------------

    def _slack_id(self, user: Mapping[str, Any]) -> str | None:
        address = user.get("email")
        if not isinstance(address, str) or "@" not in address:
            return None
        key = address.strip().lower()
        now = self._monotonic()
        cached = self._emails.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        slack_id = self.people.slack_id_for_email(address.strip())  # raises when Slack cannot say
        if slack_id is not None:
            self._emails[key] = (slack_id, now + self.email_ttl)
        return slack_id  # no match is asked again next time: a fix in Slack counts at once


def _entry(entry: object, policy: str, schedule: str | None) -> tuple[dict[str, Any], str | None]:
    """One on-call entry's user, and what it is instead when it is not of ``policy`` (and ``schedule``,
    when one is configured): ``"escalation policy PTWO"``, ``"schedule PSX"``, ``"no schedule"``.

    Raises (fails closed: no approver from the directory) on an entry that cannot be checked: no user, a
    user id that is not a string, no escalation policy id, or (with a schedule configured) a schedule
    that is neither null nor an object with an id.
    """
    if not isinstance(entry, dict):
        raise _bad_answer("an on-call that is not an object")
    user = entry.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        raise _bad_answer("an on-call without a user id")
    found = _ref_id(entry.get("escalation_policy"))
    if not found:
        raise _bad_answer("an on-call without an escalation policy id, so it cannot be checked against the one asked")
    if found != policy:
        return user, f"escalation policy {found}"
    if schedule is None:
        return user, None
    on = entry.get("schedule")
    if on is None:
        return user, "no schedule"  # a user the policy targets directly, not through the schedule asked for
    scheduled = _ref_id(on)
    if not scheduled:
        raise _bad_answer("an on-call whose schedule has no id, so it cannot be checked against the one asked")
    return user, None if scheduled == schedule else f"schedule {scheduled}"


def _ref_id(ref: object) -> str | None:
    """A PagerDuty reference's id (``{"id": "P…", "type": …}``); None when it has none or is mistyped."""
    if not isinstance(ref, dict):
        return None
    value = ref.get("id")
    return value if isinstance(value, str) and value else None


def _who(user: Mapping[str, Any]) -> str:
    name = user.get("name") or user.get("summary") or "?"
    return f"{name} ({user.get('id')})" if user.get("email") else f"{name} ({user.get('id')}, no email in PagerDuty)"


def _told_wait(headers: httpx.Headers) -> float | None:
    """Seconds PagerDuty asked us to wait: Retry-After (seconds or an HTTP date), else ratelimit-reset."""
    value = headers.get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                return max(0.0, (when - datetime.now(UTC)).total_seconds())
    reset = headers.get("ratelimit-reset")
    try:
        return max(0.0, float(reset)) if reset else None
    except ValueError:
        return None


def _auth_error(status: int) -> OnCallUnavailable:
    if status == 401:
        return OnCallUnavailable(
            f"PagerDuty refused {TOKEN_SETTING} (401): on-call approvers are refused until it is fixed",
            hint=f"Set {TOKEN_SETTING} (or its _FILE form) to a valid PagerDuty REST API key.",
        )
    return OnCallUnavailable(
        f"PagerDuty's key in {TOKEN_SETTING} may not read on-calls (403): on-call approvers are refused",
        hint="Give the key read access to on-calls (scoped OAuth: oncalls.read).",
    )


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise _bad_answer("not JSON") from None
    if not isinstance(body, dict):
        raise _bad_answer("not a JSON object")
    return body


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return "no details"
    error = body.get("error") if isinstance(body, dict) else None
    text = error.get("message") if isinstance(error, dict) else None
    return redact(str(text))[:200] if text else "no details"


def _bad_answer(what: str) -> OnCallUnavailable:
    return OnCallUnavailable(
        f"PagerDuty's on-call answer was unusable ({what}): on-call approvers are refused",
        hint="Check RECOVER_ONCALL_PAGERDUTY_URL points at PagerDuty's REST API.",
    )
