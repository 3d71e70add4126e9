"""The API's field names are data too (docs/control-host-api.md marks them [assumed]): a runbook mapping renames
an installation's differently named fields before the tolerant parsers read them."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot.app.services import api_paths
from bot.controlhost import ControlHostClient
from bot.errors import RunbookError
from bot.runbook import load_runbooks
from bot.store import Store
from tests.runbook.helpers import copy_runbooks, edit

# An installation that names a few fields its own way.
SESSION = {
    "id": "ses_x",
    "state": "failed",  # status
    "admission_state": "recovery_required",
    "rev": 7,  # revision
    "attention": {"kind": "OUTCOME_UNKNOWN", "reason": "interrupt_unanswered", "failures": None, "retry_at": None},
    "checkpoint": {"id": "ckpt_1", "covers_turn": "turn_2"},
    "worker": {"state": "gone"},  # execution
}
TURNS = {"turns": [{"id": "turn_3", "status": "outcome_unknown", "why": "interrupt_unanswered"}], "next": None}


@pytest.fixture
def odd_api() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = TURNS if "/turns" in self.path else SESSION
            payload = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


MAPPING = """  events: "/v1/sessions/{session_id}/events"
  fields:
    session: {status: state, revision: rev, execution: worker}
    attention: {code: kind}
    checkpoint: {covers_turn_id: covers_turn}
    turn: {terminal_reason: why}"""


def test_a_runbook_field_mapping_reads_an_api_that_names_fields_differently(odd_api: str, tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    edit(directory, '  events: "/v1/sessions/{session_id}/events"', MAPPING)
    runbooks = load_runbooks(directory)
    assert runbooks.api is not None
    client = ControlHostClient(
        odd_api, "k-test-0000", store=Store(tmp_path / "r.db"), paths=api_paths(runbooks), fields=runbooks.api.fields
    )
    session = client.get_session("ses_x")
    assert (session.status, session.revision) == ("failed", 7)
    assert session.attention is not None and session.attention.code == "OUTCOME_UNKNOWN"
    assert session.execution is not None and session.execution.state == "gone"
    assert session.checkpoint is not None and session.checkpoint.covers_turn_id == "turn_2"
    (turn,) = client.list_turns("ses_x", status="outcome_unknown")
    assert turn.terminal_reason == "interrupt_unanswered"

    # Without the mapping the same answers are read as unknown, never a crash.
    plain = ControlHostClient(odd_api, "k-test-0000", store=Store(tmp_path / "p.db"))
    unmapped = plain.get_session("ses_x")
    assert unmapped.status is None and unmapped.revision is None and unmapped.execution is None


def test_an_unknown_field_in_the_mapping_is_refused_with_file_and_line(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    path, line = edit(
        directory,
        '  events: "/v1/sessions/{session_id}/events"',
        '  events: "/v1/sessions/{session_id}/events"\n  fields:\n    session: {statuss: state}',
    )
    with pytest.raises(RunbookError) as info:
        load_runbooks(directory)
    text = "\n".join(info.value.problems)
    assert re.search(rf"{re.escape(str(path))}:\d+: api\.fields: session has no field 'statuss'", text), text
