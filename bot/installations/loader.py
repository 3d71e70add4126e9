"""The installations file (``RECOVER_INSTALLATIONS_FILE``): several installations from one bot.

Read with the runbooks' safe, line-tracking YAML loader (bot/runbook/yamlio.py), so every problem
points at ``FILE:LINE`` and all of them are named in one run. Besides each entry's own checks
(:mod:`bot.installations._entry`), the file as a whole must keep installations apart: a name, a
control host, a channel or a compose project on one Docker engine belongs to one installation only,
otherwise a command could reach the wrong one (the console's channel, ``console``, excepted: it is one
terminal, which names its installation with ``--install``). With ``RECOVER_CHANNELS`` set beside the
file, every installation's channel must be one of them: an installation's ``channels`` narrow
RECOVER_CHANNELS and never widen it (bot/channels.py), so a list that would widen it is refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bot.channels import CONSOLE_CHANNEL
from bot.errors import RecoverError
from bot.installations._entry import check_entry
from bot.installations.spec import InstallationSpec
from bot.runbook.yamlio import LineMap, read_yaml_file

EXAMPLE = """\
installations:
  - name: eu-1
    control_host_url: https://control.eu-1.example.internal
    api_key_file: /run/secrets/eu-1-key
    channels: [C0EU1INCD]"""


class InstallationsError(RecoverError):
    """The installations file is invalid; ``problems`` are ``FILE:LINE: what is wrong`` strings."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("Invalid installations file:\n" + "\n".join(f"  {p}" for p in self.problems))


def _text(entry: object, key: str) -> str | None:
    value = entry.get(key) if isinstance(entry, dict) else None
    return value.strip().rstrip("/") if isinstance(value, str) and value.strip() else None


def _shared(entries: list[object], lines: LineMap) -> list[str]:
    """What two installations may not share: a name, a control host, a channel, a compose project
    on one Docker engine (one would act on the other's containers). Judged on the raw entries, so a
    clash is reported even beside an entry's other problems."""
    problems: list[str] = []
    names: dict[str, str] = {}
    urls: dict[str, str] = {}
    channels: dict[str, str] = {}
    projects: dict[tuple[str | None, str], str] = {}
    for index, entry in enumerate(entries):
        here = ("installations", index)
        name = _text(entry, "name") or f"entry {index + 1}"
        if name in names:
            problems.append(f"{lines.where((*here, 'name'))}: name {name!r} is already used ({names[name]})")
        names.setdefault(name, lines.where((*here, "name")))
        url = _text(entry, "control_host_url")
        if url is not None and url in urls:
            problems.append(
                f"{lines.where((*here, 'control_host_url'))}: control_host_url is also {urls[url]}'s: "
                "two installations cannot be one control host"
            )
        if url is not None:
            urls.setdefault(url, name)
        bound = entry.get("channels") if isinstance(entry, dict) else None
        for position, channel in enumerate(bound if isinstance(bound, list) else []):
            if not isinstance(channel, str) or channel == CONSOLE_CHANNEL:
                continue
            if channels.get(channel, name) != name:
                problems.append(
                    f"{lines.where((*here, 'channels', position))}: channel {channel} is already bound to "
                    f"{channels[channel]}: a channel belongs to one installation"
                )
            channels.setdefault(channel, name)
        project = _text(entry, "compose_project")
        if project is not None:
            engine = (_text(entry, "docker_host"), project)
            if engine in projects:
                problems.append(
                    f"{lines.where((*here, 'compose_project'))}: compose_project {project!r} on this "
                    f"Docker engine is already {projects[engine]}'s"
                )
            projects.setdefault(engine, name)
    return problems


def _outside(entries: list[object], lines: LineMap, recover_channels: Sequence[str]) -> list[str]:
    """Each installation channel RECOVER_CHANNELS does not list (none when it is unset): the file
    would widen the recovery channels, and which of the two settings to believe is not guessed."""
    if not recover_channels:
        return []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        bound = entry.get("channels") if isinstance(entry, dict) else None
        for position, channel in enumerate(bound if isinstance(bound, list) else []):
            if isinstance(channel, str) and channel not in recover_channels:
                problems.append(
                    f"{lines.where(('installations', index, 'channels', position))}: channel {channel} is not in "
                    f"RECOVER_CHANNELS ({', '.join(recover_channels)}): an installation's channels narrow "
                    "RECOVER_CHANNELS, never widen it; add it to RECOVER_CHANNELS or remove it here"
                )
    return problems


def _line(problem: str) -> int:
    head = problem.split(": ", 1)[0]
    number = head.rsplit(":", 1)[-1]
    return int(number) if number.isdigit() else 0


def check_installations(path: Path, recover_channels: Sequence[str] = ()) -> tuple[list[InstallationSpec], list[str]]:
    """Every installation of the file and every problem found (the file is usable when none).
    ``recover_channels``: the process's RECOVER_CHANNELS, which every installation channel must be in."""
    data, lines, problems = read_yaml_file(path)
    if problems:
        return [], problems
    if not isinstance(data, dict) or "installations" not in data:
        return [], [f"{lines.where(())}: expected a mapping with an installations: list, e.g.\n{EXAMPLE}"]
    for key in data:
        if key != "installations":
            problems.append(f"{lines.where((str(key),))}: unknown key {key!r} (the file has one key: installations)")
    entries = data["installations"]
    if not isinstance(entries, list) or not entries:
        return [], [*problems, f"{lines.where(('installations',))}: installations must be a non-empty list"]
    specs: list[InstallationSpec] = []
    for index, entry in enumerate(entries):
        spec, found = check_entry(entry, index, lines, path.parent)
        problems.extend(found)
        if spec is not None:
            specs.append(spec)
    problems.extend(_shared(entries, lines))
    problems.extend(_outside(entries, lines, recover_channels))
    # In the file's order, as an editor walks it (a stable sort keeps one line's problems in order).
    return specs, sorted(problems, key=_line)


def load_installations(path: Path | str, recover_channels: Sequence[str] = ()) -> list[InstallationSpec]:
    """The installations of the file, in its order; raises :class:`InstallationsError` naming every problem."""
    specs, problems = check_installations(Path(path), recover_channels)
    if problems:
        raise InstallationsError(problems)
    return specs
