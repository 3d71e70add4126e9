"""Which installation a command is about: the ONE place that decides it (never a silent default).

In order: ``--install <name>``; else the installation the command's own ids belong to (a request,
batch, dry-run or triage-group id of a named installation carries ``.name``, bot/ids.py);
else the installation the channel is bound to; else the only one served. Anything else is refused
with the list of installations and how to choose. An id whose installation contradicts ``--install``
or the channel's binding is refused too: an approval or a button can never cross installations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from bot.errors import RecoverError
from bot.ids import DEFAULT_INSTALLATION, parse_own_id
from bot.installations.spec import InstallationSpec
from bot.messages import ref
from bot.runbook.suggest import closest, did_you_mean


class InstallationRefused(RecoverError):
    """The command names no installation, an unknown one, or two that contradict each other."""


def installation_list(specs: Sequence[InstallationSpec]) -> str:
    """``eu-1 (#C0EU1), us-1 (no channel)``: what a refusal lists."""

    def one(spec: InstallationSpec) -> str:
        bound = ", ".join(ref(c, "#") for c in spec.channels) or "no channel"
        return f"{spec.name} ({bound})"

    return ", ".join(one(s) for s in specs)


def _how(specs: Sequence[InstallationSpec]) -> str:
    example = specs[0].name if specs else "<name>"
    return (
        f"Installations: {installation_list(specs)}. Add `--install {example}` (any installation's name) "
        "or run it in a channel bound to one; `/recover installations` lists them."
    )


def no_such_installation(
    name: str, specs: Sequence[InstallationSpec], line_for: Callable[[str], str] = lambda near: f"--install {near}"
) -> InstallationRefused:
    """The refusal of a name no installation has: the near one as a line to copy (``line_for``), and
    the list of them."""
    near = closest(name, [s.name for s in specs])
    hint = "\n".join([*did_you_mean(line_for(near)), _how(specs)] if near else [_how(specs)])
    return InstallationRefused(f"There is no installation `{name}`.", hint=hint)


def id_installation(value: str) -> str | None:
    """The installation a bot id belongs to (``default`` for one without a suffix: it was made before
    the installations file, or by its ``default`` entry); None when the value is not one of the bot's ids."""
    parsed = parse_own_id(value)
    return None if parsed is None else parsed.installation


#: What ``made_by`` claims name in a refusal (a click's value is not an id people copy).
BUTTON = ""


def _unserved(value: str, owner: str, specs: Sequence[InstallationSpec]) -> InstallationRefused:
    names = ", ".join(s.name for s in specs)
    if owner == DEFAULT_INSTALLATION:
        # Never handed to another installation's core: its rows are not there, and a lookup there
        # must not stand in for the default's (bot/store/leftover.py refuses its open rows at start).
        what = f"`{value[:60]}` has no installation suffix" if value else "This button names no installation"
        return InstallationRefused(
            f"{what}: it is installation `default`'s, from before the installations file, and this bot "
            f"serves {names} only.",
            hint="Use a current message or id (it names its installation), or add an entry named `default`.",
        )
    return InstallationRefused(f"This bot serves no installation `{owner}` (named by the id).", hint=_how(specs))


def channel_installation(specs: Sequence[InstallationSpec], channel: str | None) -> str | None:
    """The installation the channel is bound to (its ``channels``, or its watch channel, where its
    watcher posts); None when unbound or bound to two."""
    if not channel:
        return None
    bound = [s.name for s in specs if channel in s.channels or channel == s.watch_channel]
    return bound[0] if len(bound) == 1 else None


def resolve_installation(
    specs: Sequence[InstallationSpec],
    *,
    flag: str | None,
    channel: str | None,
    ids: Iterable[str] = (),
    made_by: str | None = None,
    what: str = "this command",
    default: str | None = None,
) -> str:
    """The one installation a command or click is about, or :class:`InstallationRefused`.
    ``made_by``: the installation a clicked button was made by (its tag), held like an id's.
    ``default``: the installation a console run was started for (``recover-bot console --install``),
    chosen after the command's own flag, ids and channel, before "which installation?"."""
    names = [s.name for s in specs]
    if flag is not None and flag not in names:
        raise no_such_installation(flag, specs)
    if default is not None and default not in names:
        raise no_such_installation(default, specs)
    owners = {i: n for i, n in ((i, id_installation(i)) for i in ids) if n is not None}
    by_id = set(owners.values())
    if made_by is not None:
        by_id.add(made_by)
    claims = [(n, i) for i, n in owners.items()] + ([(made_by, BUTTON)] if made_by else [])
    unknown = sorted((n, i) for n, i in claims if n not in names)
    if unknown:
        raise _unserved(unknown[0][1], unknown[0][0], specs)
    if len(by_id) > 1:
        raise InstallationRefused(
            f"The ids name two installations ({', '.join(sorted(by_id))}).",
            hint="One command acts on one installation.",
        )
    owner = next(iter(by_id), None)
    bound = channel_installation(specs, channel)
    if owner is not None and flag is not None and owner != flag:
        raise InstallationRefused(
            f"The id belongs to installation `{owner}`, not `{flag}`: refused.",
            hint=f"Use `--install {owner}`, or leave --install out.",
        )
    if owner is not None and bound is not None and owner != bound:
        raise InstallationRefused(
            f"The id belongs to installation `{owner}`, but this channel is bound to `{bound}`: refused.",
            hint=f"Act on `{owner}` in its own channel (`/recover installations` lists them).",
        )
    chosen = flag or owner or bound or default or (names[0] if len(names) == 1 else None)
    if chosen is None:
        raise InstallationRefused(
            f"Which installation? This bot serves {len(names)}, and {what} names none.", hint=_how(specs)
        )
    return chosen


__all__ = [
    "InstallationRefused",
    "channel_installation",
    "id_installation",
    "installation_list",
    "no_such_installation",
    "resolve_installation",
]
