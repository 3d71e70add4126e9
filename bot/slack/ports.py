"""What only the Slack front can do for the core, handed INTO composition (:class:`bot.app.compose.FrontPorts`).

Break-glass's loud notice, the approver directory read through Slack, and, in the process that runs
them (serve's worker), the escalation ladder's and watch mode's voices per installation. Every
installation's core gets them as it is built (:func:`bot.app.compose.compose`), never afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from slack_sdk import WebClient

from bot.app.compose import Composed, FrontPorts, compose
from bot.clock import Clock
from bot.installations import InstallationSpec
from bot.sandbox import SandboxHandle
from bot.settings import Settings
from bot.slack.ladder import SlackLadderPoster
from bot.slack.notice import SlackNotice
from bot.slack.state import SlackState
from bot.slack.watching import SlackChannelMembers, SlackWatchPoster
from bot.slack.web import SlackOut, approver_directory


def slack_ports(
    settings: Settings, client: WebClient, *, out: SlackOut | None = None, state: SlackState | None = None
) -> FrontPorts:
    """The Slack front's ports over ``client``. Without ``state`` (the acking process, which runs no
    watcher and no ladder): the notice and the approver directory only."""
    out = out or SlackOut(client)
    ports = FrontPorts(notice=SlackNotice(out), directory=approver_directory(settings, client))
    if state is None:
        return ports
    threads = state  # bound for the closures below (mypy keeps the narrowing)

    def ladder_poster(installation: str, named: bool) -> SlackLadderPoster:
        return SlackLadderPoster.beside(out, threads, installation, named=named)

    def watch_poster(installation: str, named: bool) -> SlackWatchPoster:
        # The case-thread memory is the default installation's only: a named installation's session id
        # may be another's too, and its cases live in its own store.
        return SlackWatchPoster(out, None if named else threads, installation if named else None)

    return dataclasses.replace(
        ports, ladder_poster=ladder_poster, watch_poster=watch_poster, members=SlackChannelMembers(client)
    )


def slack_compose(
    settings: Settings,
    client: WebClient,
    *,
    out: SlackOut | None = None,
    state: SlackState | None = None,
    clock: Clock | None = None,
    specs: Sequence[InstallationSpec] | None = None,
    sandboxes: Mapping[str, SandboxHandle] | None = None,
) -> Composed:
    """The core as the Slack front composes it: one core per installation (today's settings: the one
    installation ``default``), the front's ports handed in as each is built. Start-up work is the
    caller's to run in the background (``router.startup``): a resumed wait must not delay readiness."""
    ports = slack_ports(settings, client, out=out, state=state)
    return compose(settings, specs, ports=ports, sandboxes=sandboxes, clock=clock, startup=False)


__all__ = ["slack_compose", "slack_ports"]
