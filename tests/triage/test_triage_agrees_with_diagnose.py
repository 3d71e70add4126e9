"""Triage and diagnose share one classification: for every sandbox scenario a triage lists, the
group it puts the session in names the branch and title ``/recover diagnose`` gives that session.

The real router over the sandbox control host with every builtin scenario, over HTTP; the worker
logs are the sandbox's own log file, read by both.
"""

from __future__ import annotations

from pathlib import Path

from bot.app.router import Router
from bot.messages import ListReporter
from bot.sandbox import start_sandbox
from bot.settings import load_settings
from tests.fixtures.composing import default_router


def test_every_scenario_is_classified_alike_by_triage_and_diagnose(tmp_path: Path) -> None:
    with start_sandbox() as sbx:
        settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "agree.db"})
        router = default_router(settings, sandbox=sbx, startup=False)
        assert isinstance(router, Router)
        reply = router.handle_text("/recover triage", actor="alice", channel=None, reporter=ListReporter())
        assert reply.ok
        assert router.services.bulk is not None
        saved = router.services.bulk.batches.triages
        by_session: dict[str, tuple[str, str]] = {}
        n = 1
        while (group := saved.group(f"t1.g{n}")) is not None:
            for member in group.members:
                by_session[member.session_id] = (str(group.data["branch"]), str(group.data["title"]))
            n += 1
        scenarios = {s.session_id for s in sbx.scenarios.values()}
        assert len(by_session) >= 8 and set(by_session) <= scenarios
        disagree = []
        for session_id, (branch, title) in sorted(by_session.items()):
            diagnosis = router.services.diagnoser.gather(session_id)
            said = router.handle_text(
                f"/recover diagnose {session_id}", actor="alice", channel=None, reporter=ListReporter()
            )
            headline = next(m.headline for m in said.messages if m.kind == "diagnosis")
            if diagnosis.evaluation.branch_id != branch or title not in headline:
                disagree.append((session_id, branch, diagnosis.evaluation.branch_id, title, headline))
        assert not disagree, disagree
