"""The whole Docker path through the router, as the Slack app and the console use it (R1.1–R1.4, R2.6).

Real engine, real containers, the sandbox control host over HTTP: `diagnose` reads the worker's lines
from exited worker containers and the reconciler's last pass; `dryrun` then the "Reviewed" button
runs the real pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.router import Router
from bot.messages import ListReporter, Reply
from bot.settings import load_settings
from tests.fixtures.composing import default_router

pytestmark = pytest.mark.docker


def _text(reply: Reply) -> str:
    """What a person can read, attached full output included."""
    parts = [m.plain_text() for m in reply.messages]
    parts += [m.attachment.text for m in reply.messages if m.attachment is not None]
    return "\n".join(parts)


def _facts(reply: Reply) -> dict[str, str]:
    return {k: v for m in reply.messages for k, v in m.facts}


def test_diagnose_dryrun_and_reviewed_pass_through_the_router(
    docker_engine, reconciler_factory, worker_containers, sandbox, tmp_path: Path
) -> None:
    workers = worker_containers("restore_stopped_transient")
    reconciler = reconciler_factory(project=workers.project)
    settings = load_settings({}, dotenv=None).model_copy(
        update={
            "db_path": tmp_path / "recover.db",
            "compose_project": workers.project,
            "docker_host": docker_engine.host,
        }
    )
    router = default_router(settings, sandbox=sandbox)
    assert isinstance(router, Router)
    services = router.services
    assert services.diagnoser.log_source is not None and services.diagnoser.log_source.name != "file"

    gathered = services.diagnoser.gather(workers.session_id)
    assert gathered.source("logs").state == "ok", gathered.sources
    assert gathered.source("reconciler").state == "ok", gathered.sources
    # R2.6: the transient outage is read from the real worker container's lines.
    assert (gathered.facts["logs.restore_unavailable"] or 0) > 0
    assert gathered.facts["reconciler.last_pass"] == "completed"

    reply = router.handle_text(
        f"/recover diagnose {workers.session_id}", actor="alice", channel=None, reporter=ListReporter()
    )
    assert reply.ok, _text(reply)
    assert "R2.6" in _text(reply)

    dry = router.handle_text("/recover dryrun", actor="alice", channel=None, reporter=ListReporter())
    assert dry.ok, _text(dry)
    button = next(b for m in dry.messages for b in m.buttons if b.action == "reconcile_reviewed")
    assert button.command == f"/recover reconcile --reviewed {button.value}"
    # R1.1: the exec'd process saw the dry-run variable and kept the container's own environment.
    assert "env RECONCILER_DRY_RUN=true" in _text(dry) and "DATABASE_URL=postgres://prod-db" in _text(dry)
    reconciler.wait_for_log("mode=dry-run")

    real = router.handle_action("reconcile_reviewed", button.value, actor="bob", channel=None, reporter=ListReporter())
    assert real.ok, _text(real)
    assert "env RECONCILER_DRY_RUN=false" in _text(real)  # R1.2: the real pass
    # One reviewed dry run allows one real pass: the same click again is refused with the reason.
    again = router.handle_action("reconcile_reviewed", button.value, actor="bob", channel=None, reporter=ListReporter())
    assert not again.ok

    status = router.handle_text("/recover status", actor="alice", channel=None, reporter=ListReporter())
    assert status.ok, _text(status)
    assert "R1.5" in _text(status)
    steps = [s.step for s in services.store.steps()]
    assert {"reconciler_dryrun", "reconciler_reviewed", "reconciler_pass"} <= set(steps)


def test_preflight_through_the_router_fails_on_this_old_daemon(docker_engine, sandbox, tmp_path: Path) -> None:
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": tmp_path / "recover.db", "docker_host": docker_engine.host}
    )
    router = default_router(settings, sandbox=sandbox)
    reply = router.handle_text("/recover preflight", actor="alice", channel=None, reporter=ListReporter())
    assert not reply.ok  # 20.10 < 28 (R1.7)
    text = _text(reply)
    assert "R1.7" in text and "API_IMAGE" in text and text.index("API_IMAGE") < text.index("WORKER_IMAGE")
