"""A watcher in a process of its own (as serve's worker runs it), for the SIGKILL test.

Reads its settings as JSON on the first stdin line, says ``ready`` and polls until killed.
"""

from __future__ import annotations

import json
import sys

from bot.app.handoff import watch_handoff
from bot.app.services import build_services, build_watcher
from bot.settings import Settings
from bot.slack import make_client
from bot.slack.watching import SlackWatchPoster
from bot.slack.web import SlackOut


def main() -> int:
    settings = Settings(**json.loads(sys.stdin.readline()))
    services = build_services(settings)
    watcher = build_watcher(
        services, SlackWatchPoster(SlackOut(make_client(settings))), handoff=watch_handoff(services)
    )
    assert watcher is not None
    print("ready", flush=True)
    watcher.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
