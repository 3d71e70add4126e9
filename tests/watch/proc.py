"""A watcher in a process of its own (as serve's worker runs it), for the SIGKILL test.

Reads its settings as JSON on the first stdin line, says ``ready`` and polls until killed.
"""

from __future__ import annotations

import json
import sys

from bot.app.compose import FrontPorts, compose
from bot.settings import Settings
from bot.slack import make_client
from bot.slack.watching import SlackWatchPoster
from bot.slack.web import SlackOut


def main() -> int:
    settings = Settings(**json.loads(sys.stdin.readline()))
    poster = SlackWatchPoster(SlackOut(make_client(settings)))
    ports = FrontPorts(watch_poster=lambda installation, named: poster)
    watcher = compose(settings, ports=ports, startup=False).watchers["default"]
    print("ready", flush=True)
    watcher.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
