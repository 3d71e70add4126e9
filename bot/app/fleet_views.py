"""The fleet's own answers: ``/recover installations`` and ``triage --all`` (one message, grouped by
installation first). Each installation's part is still its own core's answer."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from bot.app.fleet import Fleet
from bot.app.routing import RouterProtocol
from bot.installations import InstallationSpec
from bot.installations.tags import TaggingReporter, tag_reply
from bot.messages import Message, Reply, Reporter, ref


def _binding(spec: InstallationSpec) -> str:
    """Where the installation is and what it is bound to; never its key."""
    channels = ", ".join(ref(c, "#") for c in spec.channels) or "no channel"
    parts = [f"channels {channels}"]
    if spec.watch_channel:
        parts.append(f"watch {ref(spec.watch_channel, '#')}")
    parts.append(f"compose project {spec.compose_project or 'not set'}")
    parts.append(f"host {spec.control_host_url or 'not set'}")
    if spec.docker_host:
        parts.append(f"Docker {spec.docker_host}")
    return "; ".join(parts)


def installations_reply(fleet: Fleet, channel: str | None, current: str | None) -> Reply:
    """``/recover installations``: each installation and its binding; the channel's one is marked."""
    lines = []
    for spec in fleet.specs.values():
        mark = " ← this channel" if spec.name == current else ""
        lines.append(f"{spec.name}: {_binding(spec)}{mark}")
    where = (
        f"This channel resolves to {current}."
        if current is not None
        else "This channel resolves to none: add --install <name> to a command."
    )
    headline = f"This bot serves {len(fleet.specs)} installation(s). {where}"
    return Reply.of(Message(headline=headline, lines=lines, kind="installations"))


def triage_all(
    routers: Mapping[str, RouterProtocol], text: str, *, actor: str, channel: str | None, reporter: Reporter
) -> Reply:
    """``triage --all``: every installation's triage at once (separate clients and pacing: a slow or
    failing one delays none of the others' answers), as ONE message grouped by installation first:
    each installation's lead line, then its groups; its Details button (tagged with the installation)
    holds the rest. One post for the fleet, not one summary per installation."""
    names = list(routers)

    def one(name: str) -> Reply:
        reply = routers[name].handle_text(text, actor=actor, channel=channel, reporter=TaggingReporter(reporter, name))
        return tag_reply(reply, name)

    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="triage-all") as pool:
        replies = dict(zip(names, pool.map(one, names), strict=True))
    failed = [n for n, r in replies.items() if not r.ok]
    headline = f"Triage of {len(names)} installations ({', '.join(names)}), grouped by installation"
    if failed:
        headline += f": {', '.join(failed)} did not answer in full"
    lines: list[str] = []
    buttons = []
    attachments = []
    for name, reply in replies.items():
        if not reply.messages:
            lines.append(f"*{name}* · nothing to show")
            continue
        lead, *rest = reply.messages
        lines.append(f"*{name}* · {lead.headline.removeprefix(f'[{name}] ')}")
        for message in reply.messages:
            body = message.lines if message is lead else [message.headline, *message.lines]
            lines.extend(f"    {line}" for line in body)
            buttons.extend(message.buttons)
            if message.attachment is not None:
                attachments.append(message.attachment)
    out = Reply.of(
        Message(
            headline=headline,
            lines=lines,
            buttons=buttons,
            level="warn" if failed else "info",
            kind="triage_all",
            # One file rides along when one installation has one; with several, each stays one click
            # away behind that installation's Details button.
            attachment=attachments[0] if len(attachments) == 1 else None,
        ),
        ok=not failed,
    )
    for reply in replies.values():
        out.deferred.extend(reply.deferred)
    return out


__all__ = ["installations_reply", "triage_all"]
