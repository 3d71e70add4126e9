"""The control host's read paths are data (docs/control-host-api.md marks them [assumed]): a YAML edit moves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import RunbookError
from bot.runbook import load_runbooks
from bot.settings import load_settings
from tests.fixtures.composing import composed
from tests.runbook.helpers import copy_runbooks, edit

SESSION = "ses_restore_transient"


def test_an_edited_events_path_is_the_one_requested(sandbox, tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    edit(directory, 'events: "/v1/sessions/{session_id}/events"', 'events: "/v1/sessions/{session_id}/event-log"')
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": tmp_path / "recover.db", "runbooks_dir": directory}
    )
    services = composed(settings, sandbox=sandbox, startup=False).core()
    diagnosis = services.diagnoser.gather(SESSION)
    paths = [r["path"] for r in sandbox.admin.requests(SESSION)]
    assert f"/v1/sessions/{SESSION}/event-log" in paths
    assert f"/v1/sessions/{SESSION}/events" not in paths
    # The sandbox has no such path: the events source is named unreachable, the others still decide.
    assert diagnosis.source("events").state == "unreachable"
    assert diagnosis.source("session").state == "ok"
    assert diagnosis.facts["attention.code"] == "RESTORE_FAILED"


def test_a_turn_path_without_its_turn_id_is_refused_with_file_and_line(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    path, line = edit(
        directory, 'turn: "/v1/sessions/{session_id}/turns/{turn_id}"', 'turn: "/v1/sessions/{session_id}/turns"'
    )
    with pytest.raises(RunbookError) as info:
        load_runbooks(directory)
    assert any(p.startswith(f"{path}:{line}:") and "api" in p for p in info.value.problems), info.value.problems
