"""A sandbox control host: docs/control-host-api.md's acceptance table and the runbook's state machine over real HTTP.

Started only by ``recover-bot sandbox`` / ``recover-bot demo`` and by tests (in-process, 127.0.0.1:0),
never as a silent fallback. It imports nothing from the bot's diagnosis, decision, runbook or router
code (a test pins this), so a misreading of the runbook cannot hide in both sides. See docs/sandbox.md.
"""

from __future__ import annotations

from bot.sandbox._admin import SandboxAdmin, SandboxAdminError
from bot.sandbox._handle import AdjustableClock, SandboxHandle, serve_forever, start_sandbox
from bot.sandbox._lifecycle import CLEAR_ATTENTION, KEEP_ATTENTION, NEVER_READY, READY_AT_ONCE, READY_BEHAVIOURS
from bot.sandbox._scenarios import (
    Scenario,
    ScenarioError,
    WorkerLogLine,
    builtin_scenarios_dir,
    load_scenarios,
    worker_log_lines,
)
from bot.sandbox._several import (
    SandboxSet,
    installation_key,
    serve_installations_forever,
    start_installations,
)

__all__ = [
    "CLEAR_ATTENTION",
    "KEEP_ATTENTION",
    "NEVER_READY",
    "READY_AT_ONCE",
    "READY_BEHAVIOURS",
    "AdjustableClock",
    "SandboxAdmin",
    "SandboxAdminError",
    "SandboxHandle",
    "SandboxSet",
    "Scenario",
    "ScenarioError",
    "WorkerLogLine",
    "builtin_scenarios_dir",
    "installation_key",
    "load_scenarios",
    "serve_forever",
    "serve_installations_forever",
    "start_installations",
    "start_sandbox",
    "worker_log_lines",
]
