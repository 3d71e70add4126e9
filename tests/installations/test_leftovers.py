"""Rows written before an installations file (installation ``default``, in RECOVER_DB itself) are never
left for nothing to serve: a fleet without ``default`` refuses to start, naming them. Real sandboxes
over HTTP, real SQLite, the fleet as `serve` composes it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.app.compose import FrontPorts, compose
from bot.app.fleet_router import FleetRouter
from bot.errors import StartupError
from bot.messages import ListReporter
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from tests.installations.conftest import spec_for, text_of

SESSION = "ses_restore_transient"


def test_a_fleet_without_default_refuses_to_start_over_the_defaults_open_request(
    sandboxes: Callable[..., SandboxHandle], tmp_path: Path
) -> None:
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": tmp_path / "recover.db", "approvers": ("UBOB",)}
    )

    def default() -> object:
        return spec_for("default", sandboxes("default"), channels=("C0DEF",))

    before = compose(settings, [default()], startup=False, ports=FrontPorts()).router  # the bot before the file
    asked = before.handle_text(
        f'/recover decide {SESSION} close --reason "end it"', actor="UALICE", channel="C0DEF", reporter=ListReporter()
    )
    found = re.search(r"\breq_[0-9a-f]+\b", text_of(asked))
    assert found is not None, text_of(asked)
    request_id = found.group(0)

    with pytest.raises(StartupError) as refused:
        compose(settings, [spec_for("eu-1", sandboxes("eu-1"))], startup=False, ports=FrontPorts()).router
    said = str(refused.value)
    assert "\n" not in said
    assert request_id in said and SESSION in said and "`default`" in said and "serves eu-1 only" in said

    # Served again beside eu-1, the default's request is its own again (and nothing is refused).
    both = compose(settings, [default(), spec_for("eu-1", sandboxes("eu-1"))], startup=False, ports=FrontPorts()).router
    assert both.routers["default"].services.decisions.requests.get(request_id) is not None


def test_an_old_untyped_id_is_refused_by_name_not_looked_up_in_another_installation(
    make_fleet: Callable[..., FleetRouter],
) -> None:
    router = make_fleet("eu-1")  # one installation: the channel, or it being the only one, would pick it
    for line in ("/recover approve req_00ff", "/recover history bat_0a1b2c"):
        reply = router.handle_text(line, actor="UBOB", channel="C0EU1", reporter=ListReporter())
        said = text_of(reply)
        assert not reply.ok and "installation `default`'s, from before the installations file" in said, said
    click = router.handle_action("approve", "req_00ff", actor="UBOB", channel="C0EU1", reporter=ListReporter())
    assert not click.ok and "installation `default`'s" in text_of(click)


def test_a_button_of_a_message_from_before_the_installations_file_is_refused_not_routed_by_channel(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., SandboxHandle]
) -> None:
    """The same session id names a session in every installation: a decision button the bot posted
    before the file (untagged, the default's) must not decide on the channel's installation's session."""
    router = make_fleet("eu-1")
    form = {"session_id": SESSION, "decision": "retry_restore", "reason": "store back", "yes": "1"}
    click = router.handle_action(
        "decide", f"{SESSION}|retry_restore", actor="UALICE", channel="C0EU1", reporter=ListReporter(), form=form
    )
    said = text_of(click)
    assert not click.ok and "This button names no installation: it is installation `default`'s" in said, said
    assert [r for r in sandboxes("eu-1").admin.requests() if r.get("method") == "POST"] == []


def test_a_postgresql_store_with_an_installations_file_is_refused_before_anything_opens(
    sandboxes: Callable[..., SandboxHandle], tmp_path: Path
) -> None:
    """One database would hold every installation's rows in one chain: refused in one line, before any
    connection is tried (the URL's port answers nothing here)."""
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": tmp_path / "recover.db", "db_url": SecretStr("postgresql://recover@127.0.0.1:9/recover")}
    )
    specs = [spec_for("eu-1", sandboxes("eu-1")), spec_for("us-1", sandboxes("us-1"))]
    with pytest.raises(StartupError, match="several installations cannot share one PostgreSQL store") as refused:
        compose(settings, specs, startup=False, ports=FrontPorts())
    assert "recover@127.0.0.1" not in str(refused.value)  # the URL (it may carry a password) is never said
    assert not list(tmp_path.glob("recover*.db"))  # nothing opened
