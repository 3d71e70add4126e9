"""The listing of sessions needing an operator, read once per walk: each session once, repeats counted
and logged. Against the sandbox over HTTP (its ``repeat_sessions`` fault), and against a small HTTP
stand-in whose pages overlap (a page boundary that moved while the listing changed)."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from bot.clock import ManualClock
from bot.controlhost import ControlHostClient
from bot.sandbox import SandboxHandle
from bot.store import Store
from tests.fixtures.localhttp import LocalJsonServer

from ._specs import running
from .conftest import FAST


def test_a_page_naming_each_session_twice_yields_each_once(
    sbx: SandboxHandle, client: ControlHostClient, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [f"ses_l{i}" for i in range(5)]
    for sid in ids:
        sbx.admin.create_session(running(sid))
        sbx.admin.stop(sid)
    sbx.admin.fault("repeat_sessions", "/v1/sessions", method="GET", times=None)
    raw = client.list_sessions_needing_operator(limit=2)
    assert [s.id for s in raw.sessions] == [ids[0], ids[0], ids[1], ids[1]]  # the host repeats
    listing = client.listing(limit=2)
    with caplog.at_level(logging.WARNING, logger="recover_bot.controlhost"):
        pages = [[s.id for s in sessions] for sessions in listing]
    assert pages == [ids[0:2], ids[2:4], ids[4:5]]
    assert (listing.pages, listing.repeated) == (3, 5)
    assert "page 1 repeated 2 session(s) already listed ('ses_l0', 'ses_l1'); each is counted once" in caplog.text
    assert [s.id for s in client.iter_sessions_needing_operator()] == ids


@pytest.fixture
def overlapping() -> Iterator[LocalJsonServer]:
    """Two pages: the second starts again with the first page's last session."""
    pages = {
        None: {"sessions": [{"id": "ses_a"}, {"id": "ses_b"}], "next": "p2"},
        "p2": {"sessions": [{"id": "ses_b"}, {"id": "ses_c"}], "next": None},
    }

    def route(path: str, headers: Any, raw: bytes) -> tuple[int, dict[str, str], Any]:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(path).query))
        return 200, {}, pages[query.get("cursor")]

    server = LocalJsonServer(route)
    yield server
    server.stop()


def test_a_session_repeated_on_a_later_page_is_counted_once(
    overlapping: LocalJsonServer, store: Store, clock: ManualClock
) -> None:
    with ControlHostClient(f"http://127.0.0.1:{overlapping.port}", "k-test", store=store, clock=clock,
                           retry=FAST, timeout=5.0) as client:  # fmt: skip
        listing = client.listing()
        assert [[s.id for s in sessions] for sessions in listing] == [["ses_a", "ses_b"], ["ses_c"]]
        assert listing.repeated == 1 and listing.cursor == "p2"
