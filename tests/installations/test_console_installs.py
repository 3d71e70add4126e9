"""The console over a fleet: the same parser takes --install, an unnamed installation is refused with
the list, and with several installations every answer says which one answered."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from bot.app.fleet_router import FleetRouter
from bot.console import run_console

SESSION = "ses_restore_transient"


def _run(router: FleetRouter, script: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_console(router, stdin=io.StringIO(script), stdout=out)
    return code, out.getvalue()


def test_install_flag_at_the_console_and_the_answer_names_the_installation(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., Any]
) -> None:
    router = make_fleet("eu-1", "us-1")
    code, out = _run(router, f"/recover diagnose {SESSION} --install us-1\n/recover installations\n")
    assert code == 0, out
    assert "[us-1]" in out and "[eu-1]" not in out
    assert any(SESSION in r["path"] for r in sandboxes("us-1").admin.requests())
    assert not sandboxes("eu-1").admin.requests()
    assert "--install" in router.completions().commands["diagnose"]


def test_the_console_channel_names_no_installation_so_it_is_refused_with_the_list(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., Any]
) -> None:
    router = make_fleet("eu-1", "us-1")
    code, out = _run(router, f"/recover diagnose {SESSION}\n")
    assert code == 1
    assert "Which installation?" in out and "eu-1" in out and "us-1" in out and "--install" in out
    assert not sandboxes("eu-1").admin.requests() and not sandboxes("us-1").admin.requests()
