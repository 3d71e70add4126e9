"""The terminal console: `/recover` commands typed or piped, over the same router as Slack."""

from __future__ import annotations

from bot.app.routing import RouterProtocol
from bot.console._console import DEMO_CONSOLE_USERS, DEMO_USERS, render, run_console
from bot.console._demo import DemoClock, compose_demo, run_demo, run_real_console
from bot.console.identity import terminal_login

__all__ = [
    "DEMO_CONSOLE_USERS",
    "DEMO_USERS",
    "DemoClock",
    "compose_demo",
    "RouterProtocol",
    "render",
    "run_console",
    "run_demo",
    "run_real_console",
    "terminal_login",
]
