"""The console is a channel named `console` for RECOVER_CHANNELS: listed, it may decide; not listed, it may not."""

from __future__ import annotations

import pytest

from bot.console import DEMO_CONSOLE_USERS
from bot.errors import SettingsError
from bot.messages import ListReporter
from bot.settings import load_settings
from tests.fixtures.composing import default_router


def test_recover_channels_accepts_console_next_to_slack_ids() -> None:
    assert load_settings({"RECOVER_CHANNELS": "C0INCIDENT, console"}, dotenv=None).channels == (
        "C0INCIDENT",
        "console",
    )
    with pytest.raises(SettingsError, match="or `console`"):
        load_settings({"RECOVER_CHANNELS": "#console"}, dotenv=None)


@pytest.mark.parametrize(("channels", "allowed"), [("C0INCIDENT", False), ("C0INCIDENT,console", True)])
def test_the_console_decides_only_when_listed(sandbox, tmp_path, channels, allowed) -> None:
    settings = load_settings({"RECOVER_CHANNELS": channels, "RECOVER_DB": str(tmp_path / "c.db")}, dotenv=None)
    router = default_router(settings, sandbox=sandbox, startup=False, console_users_map=DEMO_CONSOLE_USERS)
    reply = router.handle_text(
        'decide ses_restore_transient close --reason "store gone"',
        actor="console:alice",
        channel="console",
        reporter=ListReporter(),
    )
    assert reply.ok is allowed, reply.messages[0].plain_text()
    if not allowed:
        assert "list it there to allow this from a terminal" in reply.messages[0].plain_text()
