"""diagnose's first answer covers what was read in time; the rest of the worker log is read on and a
follow-up is posted (console and Slack) only when it adds evidence (R3.2–R3.5 timeline).

Real parts: the sandbox control host over HTTP, the real Docker engine with a worker container whose
log buries the session's interrupt stages among other sessions' lines, real SQLite, the real console
and the Bolt app over HTTP against the Slack stand-in. The runbook copy sets ``log_byte_budget`` to
1 MiB so the first answer stops long before the buried lines, whichever end it reads first.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from bot.app.services import worker_log_config
from bot.console import run_console
from bot.dockerops import DockerLogSource
from bot.settings import Settings
from tests.fixtures.composing import default_router
from tests.fixtures.docker import DockerEngine

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SID = "ses_unknown_unanswered"
FIRST = "this answer covers only what was read"
FOLLOW = "the whole worker log adds evidence the first answer did not have"
MB = 1024 * 1024


def small_budget_runbooks(tmp_path: Path) -> Path:
    folder = tmp_path / "runbooks"
    shutil.copytree(REPO / "runbooks", folder)
    target = folder / "session-recovery.yaml"
    text = target.read_text(encoding="utf-8")
    edited = text.replace("log_byte_budget: {bytes: 64MiB,", "log_byte_budget: {bytes: 1MiB,")
    assert edited != text
    target.write_text(edited, encoding="utf-8")
    return folder


def docker_router(sandbox: Any, tmp_path: Path, engine: DockerEngine, project: str) -> Any:
    settings = Settings(db_path=tmp_path / "recover.db", runbooks_dir=small_budget_runbooks(tmp_path))
    router = default_router(settings, sandbox=sandbox, startup=False)
    services = router.services
    # The worker logs come from the installation's Docker workers (the demo's file source otherwise).
    services.diagnoser.log_source = DockerLogSource(
        installation=project,
        config=worker_log_config(services.runbooks),
        docker_client_factory=engine.factory(),
    )
    return router


def console(router: Any, *commands: str) -> str:
    out = io.StringIO()
    code = run_console(router, users=("alice",), stdin=io.StringIO("".join(c + "\n" for c in commands)), stdout=out)
    text = out.getvalue()
    assert code == 0, text
    return text


def test_buried_stages_are_posted_as_one_follow_up_before_the_console_prompt_returns(
    sandbox, tmp_path, docker_engine, worker_containers
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=0, filler_bytes=10 * MB, trailing_filler_bytes=10 * MB)
    router = docker_router(sandbox, tmp_path, docker_engine, ws.project)
    text = console(router, f"diagnose {SID}", f"history {SID}")

    first, follow, prompt = text.index(FIRST), text.index(FOLLOW), text.index(f"alice> history {SID}")
    # The first answer says what it covered, the follow-up comes before the next command runs.
    assert first < follow < prompt, text
    assert "MB" in text[first - 200 : first + 400]
    assert text.count(FOLLOW) == 1
    followup = text[follow:prompt]
    assert "Worker log read in full" in followup
    for stage in ("control_received", "sdk_interrupt_called", "engine_terminal", "capture_finished"):
        assert stage in followup, followup
    assert "engine_terminal outcome=timeout" in followup  # the R3.5 reading

    steps = router.services.store.steps(SID)
    diagnose = [s for s in steps if s.step == "diagnose"]
    recorded = [s for s in steps if s.step == "diagnose_followup"]
    assert len(diagnose) == 1 and len(recorded) == 1
    # The first answer lacked the stages (its facts say so); the recorded follow-up has them.
    assert diagnose[0].detail["logs.engine_terminal_timeout"] is False
    assert recorded[0].detail["logs.engine_terminal_timeout"] is True
    assert any("sdk_interrupt_called" in item for item in recorded[0].detail["found"])
    assert "diagnose_followup" in text[prompt:]  # history shows the step


def test_no_follow_up_when_the_rest_of_the_log_adds_nothing(
    sandbox, tmp_path, docker_engine, worker_containers
) -> None:
    # The session's lines at both ends: whichever end the first answer reads, the rest repeats them.
    ws = worker_containers("unknown_unanswered", other_sessions=0, trailing_filler_bytes=12 * MB, repeat_at_end=True)
    router = docker_router(sandbox, tmp_path, docker_engine, ws.project)
    text = console(router, f"diagnose {SID}", f"history {SID}")
    assert FIRST in text and "engine_terminal outcome=timeout" in text
    assert FOLLOW not in text
    assert [s.step for s in router.services.store.steps(SID)].count("diagnose_followup") == 0


def test_slack_posts_the_follow_up_in_the_cases_thread_after_the_answer(
    sandbox, tmp_path, docker_engine, worker_containers, slack_harness
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=0, filler_bytes=10 * MB, trailing_filler_bytes=10 * MB)
    router = docker_router(sandbox, tmp_path, docker_engine, ws.project)
    h = slack_harness(router)
    assert h.send.command(f"diagnose {SID}", user="UALICE").status_code == 200
    h.settle(120)
    (root,) = h.api.roots("CINC")
    thread = h.api.thread("CINC", root.ts)
    texts = [m.all_text() for m in thread]
    answer = next(i for i, t in enumerate(texts) if FIRST in t)
    follow = [i for i, t in enumerate(texts) if FOLLOW in t]
    assert len(follow) == 1 and follow[0] > answer, texts
    assert "sdk_interrupt_called" in texts[follow[0]] and "engine_terminal" in texts[follow[0]]
    assert [s.step for s in router.services.store.steps(SID)].count("diagnose_followup") == 1
