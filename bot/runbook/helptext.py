"""The help of the ``/recover`` commands, generated from the runbook YAML: the overview, one
subcommand in full, the short usage shown with an error, and the two lines for an unknown word."""

from __future__ import annotations

from bot.errors import CommandError
from bot.runbook.model import CommandSpec, RunbookSet
from bot.runbook.usage import decision_command, decision_lines

PREFIX = "/recover"


def excerpt(value: str, size: int = 40) -> str:
    """A quoted excerpt of what someone typed, for an error message."""
    text = value if len(value) <= size else value[: size - 1] + "…"
    return repr(text)


def command_usage(runbooks: RunbookSet, spec: CommandSpec) -> str:
    """The short usage shown with an error: usage line (one per decision: the flags each needs, up
    front), example, and where to read more."""
    lines = [f"Usage: {PREFIX} {spec.usage}"]
    if decision_command(runbooks, spec):
        lines.append("Each decision needs:")
        lines.extend(decision_lines(runbooks, spec, PREFIX))
    lines += [f"Example: {spec.example}", f"More: {PREFIX} help {spec.name}"]
    return "\n".join(lines)


def short_help(runbooks: RunbookSet) -> str:
    """Two lines for a word that is no subcommand: the subcommands' names and where the help is."""
    names = sorted({c.name.split(" ")[0] for c in runbooks.commands.values()})
    return f"Subcommands: {', '.join(names)}\nMore: {PREFIX} help"


def help_text(runbooks: RunbookSet, subcommand: str | None = None) -> str:
    """The help: every subcommand with its one-line help, or one subcommand in full."""
    if subcommand:
        spec = runbooks.commands.get(" ".join(subcommand.lower().split()))
        if spec is None:
            raise CommandError(f"unknown subcommand {excerpt(subcommand)}", usage=short_help(runbooks))
        return _help_one(runbooks, spec)
    width = max((len(c.usage.split(" [--")[0].split(" --")[0]) for c in runbooks.commands.values()), default=0)
    width = min(width, 38)
    lines = [f"{PREFIX} <subcommand> … — recover stuck sessions by the runbook"]
    for spec in runbooks.commands.values():
        short = spec.usage.split(" [--")[0].split(" --")[0]
        lines.append(f"  {short.ljust(width)}  {spec.help.split('. ')[0].rstrip('.')}")
    if runbooks.id_help:
        lines.append(f"Ids: {runbooks.id_help}.")
    lines.append(f"Flags come in any order, as --flag value or --flag=value. {PREFIX} help <subcommand> explains one.")
    return "\n".join(lines)


def _help_one(runbooks: RunbookSet, spec: CommandSpec) -> str:
    lines = [f"{PREFIX} {spec.usage}", spec.help]
    if decision_command(runbooks, spec):
        lines.append("Each decision needs:")
        lines.extend(decision_lines(runbooks, spec, PREFIX))
    if spec.args:
        lines.append("Arguments:")
        for arg in spec.args:
            extra = []
            if arg.choices == "decisions":
                extra.append("one of " + ", ".join(runbooks.decidable))
            if not arg.required:
                extra.append("optional")
            tail = f" ({'; '.join(extra)})" if extra else ""
            lines.append(f"  <{arg.name}>  {arg.help}{tail}")
    if spec.flags:
        lines.append("Flags:")
        for flag in spec.flags:
            need = []
            if flag.required:
                need.append("required")
            if flag.required_for:
                need.append("required for " + ", ".join(flag.required_for))
            tail = f" ({'; '.join(need)})" if need else ""
            shape = f"--{flag.name} <value>" if flag.value else f"--{flag.name}"
            lines.append(f"  {shape}  {flag.help}{tail}")
    if spec.channel_restricted:
        lines.append("Refused outside RECOVER_CHANNELS when it is set.")
    if spec.rules:
        lines.append("Runbook: " + ", ".join(spec.rules))
    lines.append(f"Example: {spec.example}")
    return "\n".join(lines)
