"""Ctrl-C at the console: a request of this run still waiting for approval is withdrawn (recorded, said on
screen, never sent); one an earlier run made is left alone; a script stops with exit status 130."""

from __future__ import annotations

import io
import re

from bot.console import DEMO_CONSOLE_USERS, run_console
from bot.settings import Settings
from tests.fixtures.composing import default_router


class CtrlCAfter(io.StringIO):
    """Standard input that delivers its lines, then Ctrl-C where the next line would be read."""

    def readline(self, *args: object) -> str:  # type: ignore[override]
        line = super().readline()
        if not line:
            raise KeyboardInterrupt
        return line


def test_ctrl_c_withdraws_this_runs_pending_request_only(sandbox, tmp_path) -> None:
    settings = Settings(db_path=tmp_path / "c.db")

    def router():
        return default_router(settings, sandbox=sandbox, startup=False, console_users_map=DEMO_CONSOLE_USERS)

    earlier = io.StringIO()
    assert (
        run_console(router(), stdin=io.StringIO('decide ses_restore_transient close --reason "old"\n'), stdout=earlier)
        == 0
    )
    (old_rid,) = set(re.findall(r"req_[0-9a-f]{16}", earlier.getvalue()))

    sandbox.admin.advance(1)  # the second run starts later
    out = io.StringIO()
    code = run_console(router(), stdin=CtrlCAfter('decide ses_incompatible close --reason "new"\n'), stdout=out)
    text = out.getvalue()
    assert code == 130, text
    (new_rid,) = set(re.findall(r"req_[0-9a-f]{16}", text)) - {old_rid}
    assert f"Request {new_rid}" in text and "withdrawn: interrupted (Ctrl-C)" in text

    requests = router().services.decisions.requests
    assert requests.get(new_rid).state == "withdrawn"
    assert requests.get(old_rid).state == "requested"
    steps = router().services.store.steps()
    assert any(s.step == "decision_withdrawn" and s.inputs.get("request_id") == new_rid for s in steps)
    assert [r for r in sandbox.admin.requests() if r.get("method") == "POST"] == []
