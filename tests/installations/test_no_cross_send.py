"""Property: three sandbox installations with the same session ids; random commands with random
``--install`` and channel choices. Every POST a sandbox received belongs to a request recorded by that
installation's own store (and no other's), and every command that names no installation is refused."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.app.fleet_router import FleetRouter
from bot.messages import ListReporter
from tests.installations.conftest import CHANNELS, posts, text_of

NAMES = ("eu-1", "us-1", "ap-1")
LINES = (
    "diagnose ses_restore_transient",
    'decide ses_restore_transient retry_restore --reason "store back" --yes',
    'decide ses_incompatible start_fresh --reason "drop the old context" --yes',
    "resume ses_stopped_resumable",
    'decide ses_unknown_ckpt_unavailable abandon --turn turn_uc3 --effects "none outside" --reason "gone"',
    "cases",
    "pending",
)
command = st.tuples(
    st.sampled_from(LINES + ("approve",)),
    st.sampled_from((None, *NAMES, "xx-9")),  # --install
    st.sampled_from((None, "C0NONE", *CHANNELS.values())),  # the channel typed in
    st.sampled_from(("UALICE", "UBOB")),
)


def _keys(router: FleetRouter, name: str) -> set[str]:
    path = router.fleet.core(name).store.path
    with sqlite3.connect(path) as db:
        return {k for (k,) in db.execute("SELECT idempotency_key FROM steps WHERE idempotency_key IS NOT NULL")}


def test_no_send_reaches_another_installation_and_ambiguity_is_always_refused(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., Any]
) -> None:
    router = make_fleet(*NAMES)
    requests: list[str] = []
    bound = {channel: name for name, channel in CHANNELS.items()}

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.lists(command, min_size=1, max_size=5))
    def run(commands: list[tuple[str | None, str | None, str | None, str]]) -> None:
        for line, install, channel, actor in commands:
            if line == "approve":
                if not requests:
                    continue
                line = f"approve {requests[-1]}"
            text = f"/recover {line}" + (f" --install {install}" if install else "")
            reply = router.handle_text(text, actor=actor, channel=channel, reporter=ListReporter())
            requests.extend(m.ref for m in reply.messages if m.kind == "approval_request" and m.ref)
            said = text_of(reply)
            # A request id names its installation (`req_….ap-1`): the resolution's second source.
            named = line.split()[1].rpartition(".")[2] if line.startswith("approve ") else None
            against = [n for n in (install, bound.get(channel or "")) if n is not None]
            if install == "xx-9":
                assert not reply.ok and "no installation `xx-9`" in said
            elif named is not None and any(n != named for n in against):
                assert not reply.ok and "refused" in said, said  # the id contradicts --install or the channel
            elif install is None and named is None and channel not in bound:
                assert not reply.ok and "Which installation?" in said, said
            else:
                assert reply.messages[0].headline.startswith(f"[{install or named or bound[channel]}] "), said
        for name in NAMES:
            own = _keys(router, name)
            others = set().union(*(_keys(router, n) for n in NAMES if n != name))
            for post in posts(sandboxes(name)):
                key = post.get("idempotency_key") or (post.get("headers") or {}).get("Idempotency-Key")
                assert key in own and key not in others, (name, post.get("path"))

    run()
    assert sum(len(posts(sandboxes(n))) for n in NAMES) > 0  # the property was exercised by real sends
