"""recover-bot: recover stuck control-host sessions from chat, safely and together.

The core (runbook, diagnosis, decisions, store, control-host client, Docker operations) is plain
Python; ``bot.slack`` and ``bot.console`` are thin front ends over it.
"""

__version__ = "0.1.0"
