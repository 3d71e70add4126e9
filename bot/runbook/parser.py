"""The ``/recover`` command parser (its help text: bot.runbook.helptext), one for Slack and the console
(docs/commands.md).

Every subcommand, argument pattern and flag comes from the runbook YAML; Python only knows the
grammar: an optional leading ``/recover``, flags in any order as ``--flag value`` or ``--flag=value``,
straight or curly quotes, and Slack's escapes decoded first. Anything that does not parse raises
:class:`CommandError` carrying usage help generated from the YAML — never another exception, whatever
the input (a hypothesis test feeds it arbitrary text). Ids are checked against the runbook's pattern
here, before they can reach a URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bot.errors import CommandError
from bot.ids import NAME_PATTERN
from bot.runbook.helptext import PREFIX, command_usage, help_text, short_help
from bot.runbook.helptext import excerpt as _short
from bot.runbook.model import ArgSpec, CommandSpec, FlagSpec, RunbookSet
from bot.runbook.suggest import closest, did_you_mean
from bot.runbook.usage import empty_value, value_pattern
from bot.runbook.values import IDS_PLACEHOLDER
from bot.vocab import StepKind

MAX_LIMIT = "command_max_chars"
_ENTITY = re.compile(r"<([^<>\n]*)>")
_DOUBLE_OPEN = '"“”„'
_DOUBLE_CLOSE = '"”“'
_SINGLE_OPEN = "'‘"
_SINGLE_CLOSE = "'’‘"
#: ``--install <name>`` is accepted on every subcommand: which installation it is about (resolved by
#: bot/installations/resolve.py, the one owner; a bot of one installation needs it never).
INSTALL_FLAG = FlagSpec(name="install", pattern=NAME_PATTERN.pattern, help="the installation (its name)")
# Phones and macOS turn "--" into a dash; accept what people's keyboards produce.
_DASHES = ("--", "—", "–")


@dataclass(frozen=True)
class ParsedCommand:
    """A parsed command: its subcommand (name and step kind), arguments and flags, all validated."""

    name: str
    kind: StepKind
    args: dict[str, str] = field(default_factory=dict)
    flags: dict[str, str | bool] = field(default_factory=dict)
    spec: CommandSpec | None = None
    text: str = ""

    @property
    def channel_restricted(self) -> bool:
        return bool(self.spec and self.spec.channel_restricted)

    def arg(self, name: str) -> str | None:
        return self.args.get(name)

    def flag(self, name: str) -> str | bool | None:
        return self.flags.get(name)

    def flag_text(self, name: str) -> str | None:
        value = self.flags.get(name)
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class _Token:
    value: str
    quoted: bool = False
    flag_with_quoted_value: bool = False
    start: int = 0  # where the token's raw text starts in the decoded line (a correction replaces it)
    end: int = 0


class _Typo(CommandError):
    """A word that is one of the runbook's own, mistyped: ``text[start:end]`` should read ``replacement``."""

    def __init__(self, message: str, start: int, end: int, replacement: str) -> None:
        super().__init__(message)
        self.start, self.end, self.replacement = start, end, replacement


class _Brief(CommandError):
    """An error whose message already lists the choices: shown with the usage line only, not the page."""


MAX_CORRECTIONS = 5


def decode_slack(text: str) -> str:
    """Decode Slack's message formatting: ``<@U1|name>`` → ``@name``, ``<#C1|chan>`` → ``#chan``,
    ``<https://x|label>`` → ``label`` (what the person typed), ``<https://x>`` → the URL, then the three
    HTML escapes Slack uses (``&lt;`` ``&gt;`` ``&amp;``, the last one last so nothing decodes twice)."""

    def entity(match: re.Match[str]) -> str:
        body = match.group(1)
        target, _, label = body.partition("|")
        if target.startswith("@"):
            return "@" + label if label else target
        if target.startswith("#"):
            return "#" + label if label else target
        if target.startswith("!"):
            if label:
                return label
            word = target[1:].split("^", 1)[0]
            return "@" + word if word else target
        return label or target

    decoded = _ENTITY.sub(entity, text)
    return decoded.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _find_close(text: str, start: int, closers: str) -> int:
    """Index of the closing quote: a closer followed by whitespace or the end (so "don’t" stays whole)."""
    n = len(text)
    i = start
    while i < n:
        j = min((p for p in (text.find(c, i) for c in closers) if p != -1), default=-1)
        if j == -1:
            return -1
        if j + 1 == n or text[j + 1].isspace():
            return j
        i = j + 1
    return -1


def tokenize(text: str) -> list[_Token]:
    """Split on whitespace; a quote opens only at the start of a word (or after ``--flag=``)."""
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        prefix, start = "", i
        if text[i] not in _DOUBLE_OPEN + _SINGLE_OPEN:
            j = i
            while j < n and not text[j].isspace():
                j += 1
                if text[j - 1] == "=" and j < n and text[j] in _DOUBLE_OPEN + _SINGLE_OPEN and _is_flag(text[i:j]):
                    break
            word = text[i:j]
            if j >= n or text[j].isspace():
                tokens.append(_Token(word, start=i, end=j))
                i = j
                continue
            prefix, start, i = word, i, j
        quote = text[i]
        closers = _DOUBLE_CLOSE if quote in _DOUBLE_OPEN else _SINGLE_CLOSE
        end = _find_close(text, i + 1, closers)
        if end == -1:
            if quote in _SINGLE_OPEN:  # an apostrophe, not a quote: keep the word as typed
                j = i
                while j < n and not text[j].isspace():
                    j += 1
                tokens.append(_Token(prefix + text[i:j], start=start, end=j))
                i = j
                continue
            closer = '"' if quote in _DOUBLE_OPEN else "'"
            raise _Typo(
                f"unterminated quote: the {quote} at character {i + 1} ({_short(text[i:], 24)}) has no closing quote",
                len(text.rstrip()),
                len(text.rstrip()),
                closer,
            )
        tokens.append(
            _Token(
                prefix + text[i + 1 : end], quoted=True, flag_with_quoted_value=bool(prefix), start=start, end=end + 1
            )
        )
        i = end + 1
    return tokens


def _is_flag(word: str) -> bool:
    return any(word.startswith(d) and len(word) > len(d) and word[len(d)] != "-" for d in _DASHES)


def _flag_name(word: str) -> str:
    for dash in _DASHES:
        if word.startswith(dash):
            return word[len(dash) :]
    return word


def _match_command(runbooks: RunbookSet, tokens: list[_Token]) -> tuple[CommandSpec, int] | None:
    best: tuple[CommandSpec, int] | None = None
    for spec in runbooks.commands.values():
        words = spec.name.split(" ")
        if len(words) > len(tokens):
            continue
        if all(not t.quoted and t.value.lower() == w for t, w in zip(tokens, words, strict=False)) and (
            best is None or len(words) > best[1]
        ):
            best = (spec, len(words))
    return best


def parse_command(text: str, runbooks: RunbookSet) -> ParsedCommand:
    """Parse one ``/recover`` line (Slack or console). Raises :class:`CommandError` with usage help."""
    if not isinstance(text, str):
        raise CommandError("a command is text", usage=help_text(runbooks))
    limit = runbooks.limits.get(MAX_LIMIT)
    if limit is not None and len(text) > limit.value:
        raise CommandError(
            f"the command is too long ({len(text)} characters, at most {int(limit.value)})",
            usage=help_text(runbooks),
        )
    decoded = decode_slack(text)
    first: _Typo | None = None
    try:
        return _parse_once(runbooks, decoded)
    except _Typo as exc:
        first = exc
    # Did you mean: correct up to a few typos with the runbook's own words, then show the line to copy.
    line = decoded
    then: str | None = None
    typo: _Typo = first
    for _ in range(MAX_CORRECTIONS):
        line = line[: typo.start] + typo.replacement + line[typo.end :]
        try:
            _parse_once(runbooks, line)
            break
        except _Typo as again:
            typo = again
        except CommandError as other:
            then = other.message
            break
    else:
        then = typo.message
    words = line.split()
    corrected = line.strip() if words and words[0].lower() == PREFIX else f"{PREFIX} {line.strip()}"
    usage = did_you_mean(corrected)
    if then:
        usage.append(f"(then still: {then})")
    raise CommandError(first.message, usage="\n".join(usage)) from None


def _parse_once(runbooks: RunbookSet, decoded: str) -> ParsedCommand:
    try:
        tokens = tokenize(decoded)
    except _Typo:
        raise
    except CommandError as exc:
        raise CommandError(exc.message, usage=help_text(runbooks)) from None
    if tokens and not tokens[0].quoted and tokens[0].value.lower() == PREFIX:
        tokens = tokens[1:]
    if not tokens:
        helper = next((c for c in runbooks.commands.values() if c.kind == StepKind.HELP), None)
        if helper is None:
            raise CommandError("no subcommand given", usage=help_text(runbooks))
        return ParsedCommand(helper.name, helper.kind, spec=helper, text=decoded)
    matched = _match_command(runbooks, tokens)
    if matched is None:
        _suggest_word(tokens[0], _words_at(runbooks, []), "subcommand")
        raise CommandError(f"unknown subcommand {_short(tokens[0].value)}", usage=short_help(runbooks))
    spec, used = matched
    _longer_command(runbooks, spec, tokens, used)
    try:
        args, flags = _parse_rest(runbooks, spec, tokens[used:])
    except _Typo:
        raise
    except _Brief as exc:
        brief = f"Usage: {PREFIX} {spec.usage}\nMore: {PREFIX} help {spec.name}"
        raise CommandError(exc.message, usage=brief) from None
    except CommandError as exc:
        raise CommandError(exc.message, usage=command_usage(runbooks, spec)) from None
    return ParsedCommand(spec.name, spec.kind, args, flags, spec, decoded)


def _words_at(runbooks: RunbookSet, before: list[str]) -> list[str]:
    """The words a subcommand name may have after ``before`` (its first words when empty)."""
    n = len(before)
    names = (c.name.split(" ") for c in runbooks.commands.values())
    return sorted({w[n] for w in names if len(w) > n and w[:n] == before})


def _suggest_word(token: _Token, choices: list[str], what: str) -> None:
    """Raise a :class:`_Typo` when ``token`` is one edit or so away from one of ``choices``."""
    if token.quoted:
        return
    near = closest(token.value, choices)
    if near is not None and near != token.value.lower():
        raise _Typo(f"unknown {what} {_short(token.value)}", token.start, token.end, near)


def _longer_command(runbooks: RunbookSet, spec: CommandSpec, tokens: list[_Token], used: int) -> None:
    """``dryrun decied`` matched ``dryrun``: the next word is a typo of a longer subcommand's."""
    if used >= len(tokens):
        return
    longer = _words_at(runbooks, spec.name.split(" "))
    if longer and tokens[used].value.lower() not in longer and not spec.args:
        _suggest_word(tokens[used], longer, "subcommand")


def _parse_rest(
    runbooks: RunbookSet, spec: CommandSpec, tokens: list[_Token]
) -> tuple[dict[str, str], dict[str, str | bool]]:
    positional: list[_Token] = []
    flags: dict[str, str | bool] = {}
    takes_rest = bool(spec.args) and spec.args[-1].rest
    flags_done = not spec.flags and takes_rest  # a note's text may contain "--" freely
    i = 0
    if flags_done and len(tokens) >= 2 and not tokens[0].quoted and _flag_name(tokens[0].value) == INSTALL_FLAG.name:
        flags[INSTALL_FLAG.name] = _check_value(runbooks, "--install", tokens[1].value, INSTALL_FLAG)
        i = 2  # `note --install eu-1 <session> <text…>`: only first, the text keeps every "--"
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not flags_done and not token.quoted and token.value == "--":
            flags_done = True
            continue
        as_flag = not token.quoted or token.flag_with_quoted_value
        if flags_done or not as_flag or not _is_flag(token.value):
            positional.append(token)
            continue
        body = _flag_name(token.value)
        name, eq, inline = body.partition("=")
        flag = spec.flag(name) or (INSTALL_FLAG if name == INSTALL_FLAG.name else None)
        if flag is None:
            near = closest(name, [f.name for f in spec.flags])
            if near is not None:
                at = token.start + len(token.value) - len(body)
                raise _Typo(f"unknown flag --{_short(name, 30)[1:-1]} for {spec.name}", at, at + len(name), near)
            known = ", ".join(f"--{f.name}" for f in spec.flags) or "none"
            raise _Brief(f"unknown flag --{_short(name, 30)[1:-1]} for {spec.name} (flags: {known})")
        if name in flags:
            raise CommandError(f"--{name} given twice")
        if not flag.value:
            if eq:
                raise CommandError(f"--{name} takes no value")
            flags[name] = True
            continue
        if eq:
            value = inline
        else:
            if i >= len(tokens) or (not tokens[i].quoted and _is_flag(tokens[i].value)):
                raise CommandError(f"--{name} needs a value")
            value = tokens[i].value
            i += 1
        flags[name] = _check_value(runbooks, f"--{name}", value, flag)
    args = _assign(runbooks, spec, positional)
    decision = next((args[a.name] for a in spec.args if a.choices == "decisions" and a.name in args), None)
    for flag in spec.flags:
        if flag.name in flags:
            continue
        if flag.required:
            raise CommandError(f"--{flag.name} is required")
        if decision is not None and decision in flag.required_for:
            raise CommandError(f"--{flag.name} is required for {decision}")
    return args, flags


def _check_value(runbooks: RunbookSet, label: str, value: str, spec: ArgSpec | FlagSpec) -> str:
    if spec.pattern is not None and not value_pattern(runbooks, spec.pattern).fullmatch(value):
        if not value.strip() and label.startswith("--"):  # `--reason ""`: what it is for, not a regex
            raise CommandError(empty_value(label[2:], spec.help))
        what = f" ({spec.help})" if spec.help else ""
        if spec.pattern == IDS_PLACEHOLDER:
            rule = runbooks.id_help or (runbooks.id_pattern.pattern if runbooks.id_pattern else "an id")
            raise CommandError(f"{label}{what}: {_short(value)} is not a valid id ({rule})")
        raise CommandError(f"{label}{what}: {_short(value)} is not valid (must match {spec.pattern})")
    return value


def _assign(runbooks: RunbookSet, spec: CommandSpec, positional: list[_Token]) -> dict[str, str]:
    args: dict[str, str] = {}
    for index, arg in enumerate(spec.args):
        token: _Token | None = None
        if arg.rest:
            words = positional[index:]
            positional = positional[:index]
            value = " ".join(t.value for t in words)
            token = words[0] if len(words) == 1 else None
        elif index < len(positional):
            token = positional[index]
            value = token.value
        else:
            value = ""
        if not value:
            if arg.required:
                raise CommandError(f"missing <{arg.name}>" + (f": {arg.help}" if arg.help else ""))
            continue
        if arg.choices == "decisions":
            value = value.lower()
            if value not in runbooks.decidable:
                if token is not None:
                    _suggest_word(token, list(runbooks.decidable), "decision")
                raise _Brief(f"unknown decision {_short(value)} (decisions: {', '.join(runbooks.decidable)})")
        elif arg.choices == "commands":
            value = " ".join(value.lower().split())
            if value not in runbooks.commands:
                if token is not None:
                    _suggest_word(token, list(runbooks.commands), "subcommand")
                raise CommandError(f"unknown subcommand {_short(value)} (subcommands: {', '.join(runbooks.commands)})")
        args[arg.name] = _check_value(runbooks, f"<{arg.name}>", value, arg)
    extra = positional[len(spec.args) :]
    if extra:
        raise CommandError(f"unexpected argument {_short(extra[0].value)} for {spec.name}")
    return args
