"""The Slack front end: a Bolt app built by a factory over the router, and the servers that run it.

Nothing in the core imports this package; it only turns Slack requests into router calls and the
router's messages into Block Kit.
"""

from __future__ import annotations

from bot.slack.app import COMMAND, SlackBot, build_app, build_bot
from bot.slack.background import BackgroundWork
from bot.slack.server import EVENTS_PATH, HEALTH_PATH, HttpServer, SlackFront, serve
from bot.slack.web import SlackDirectory, SlackOut, make_client

__all__ = [
    "COMMAND",
    "EVENTS_PATH",
    "HEALTH_PATH",
    "BackgroundWork",
    "HttpServer",
    "SlackFront",
    "SlackBot",
    "SlackDirectory",
    "SlackOut",
    "build_app",
    "build_bot",
    "make_client",
    "serve",
]
