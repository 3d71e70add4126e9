"""A ladder runner in a process of its own (as each serve worker runs it), for the SIGKILL test.

Reads its settings and lease as JSON on the first stdin line, says ``ready`` and runs until killed.
"""

from __future__ import annotations

import json
import sys

from slack_sdk import WebClient

from bot.app.compose import FrontPorts, compose
from bot.escalation.runner import LadderRunner
from bot.settings import Settings
from bot.slack.ladder import SlackLadderPoster
from bot.slack.state import SlackState, slack_migrations


def main() -> int:
    config = json.loads(sys.stdin.readline())
    settings = Settings(**config["settings"])
    services = compose(settings, ports=FrontPorts(), startup=False).core()
    services.store.migrate([slack_migrations])
    client = WebClient(token="xoxb-test", base_url=settings.slack_api_url, timeout=2, retry_handlers=[])
    runner = LadderRunner(
        services.decisions.ctx, SlackLadderPoster(client, SlackState(services.store)), lease=float(config["lease"])
    )
    print("ready", flush=True)
    runner.run(every=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
