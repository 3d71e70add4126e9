"""The terminal console: `/recover` commands typed or piped, over the same router as Slack."""

from __future__ import annotations

from bot.console._console import DEMO_USERS, render, run_console
from bot.console._demo import run_demo
from bot.console.routing import RouterProtocol

__all__ = ["DEMO_USERS", "RouterProtocol", "render", "run_console", "run_demo"]
