"""diagnose with worker logs read from real (exited) worker containers through DockerLogSource."""

from __future__ import annotations

import pytest

from bot.diagnosis import Diagnoser
from bot.dockerops import DockerLogSource

pytestmark = pytest.mark.docker


def docker_diagnoser(env, docker_engine, project: str) -> Diagnoser:
    source = DockerLogSource(installation=project, docker_client_factory=docker_engine.factory())
    diagnoser = env.diagnoser(logs=False)
    diagnoser.log_source = source
    return diagnoser


def test_outcome_unknown_timeline_from_a_worker_container(env, docker_engine, worker_containers):
    workers = worker_containers("unknown_unanswered")
    diagnoser = docker_diagnoser(env, docker_engine, workers.project)
    reply = diagnoser.diagnose("ses_unknown_unanswered", "U_ONCALL")
    step = env.store.steps("ses_unknown_unanswered")[-1]
    facts = step.detail
    assert facts["source.logs"] == "ok"
    assert facts["logs.lines"] == len(workers.expected_lines)
    assert facts["logs.engine_terminal_timeout"] is True and facts["logs.capture_timeout"] is True
    assert facts["logs.late_sdk_interrupt_answered"] is True
    assert facts["logs.control_result_reason_code"] == "deadline_exceeded"
    assert step.outcome == "outcome_unknown"
    text = reply.messages[0].plain_text()
    assert "     5003 ms  engine_terminal  outcome=timeout" in text


def test_permanent_damage_read_from_a_worker_container(env, docker_engine, worker_containers):
    workers = worker_containers("restore_stopped_damage")
    diagnosis = docker_diagnoser(env, docker_engine, workers.project).gather("ses_restore_damaged")
    assert diagnosis.source("logs").state == "ok"
    assert diagnosis.facts["logs.permanent_damage"] is True
    assert diagnosis.evaluation.branch_id == "restore_permanent"


def test_docker_source_for_an_unknown_project_reads_nothing(env, docker_engine):
    diagnosis = docker_diagnoser(env, docker_engine, "recoverbot-no-such-project").gather("ses_restore_damaged")
    # No worker container for the session: an empty read, so the generic stopped branch.
    assert diagnosis.source("logs").state == "ok" and diagnosis.facts["logs.lines"] == 0
    assert diagnosis.evaluation.branch_id == "restore_stopped"
