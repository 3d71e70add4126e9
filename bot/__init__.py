"""recover-bot: recover stuck control-host sessions from chat, safely and together.

Layout (which package owns what; import-linter checks the layering, pyproject.toml):

- the core: ``runbook``, ``diagnosis``, ``decisions``, ``triage``, ``batch``, ``escalation``, ``watch``,
  ``store``, ``controlhost``, ``dockerops``, ``logs``, ``installations``, ``settings`` and the small
  leaf modules (``messages``, ``vocab``, ``clock``, …). Plain Python; it imports no front and nothing
  of ``bot.app``.
- ``bot.app``: the application layer. ``bot.app.compose.compose`` is the one composition root (every
  installation's core and background parts, and the fleet's router over them); the routers and their
  answers live beside it.
- the fronts: ``bot.slack`` and ``bot.console`` (neither imports the other), each handing what only it
  can do into composition as ``bot.app.compose.FrontPorts``; ``bot.cli`` on top.
- ``bot.sandbox``: a control host for the demo and the tests, knowing nothing of how the bot judges.
"""

__version__ = "0.1.0"
