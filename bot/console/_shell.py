"""What makes the console a shell: line editing, history across runs, tab completion, a log file.

History and the log live in the user's state directory (``$XDG_STATE_HOME/recover-bot``, by default
``~/.local/state/recover-bot``): arrow keys recall earlier commands after a restart, and the log
records of a long wait go to the file named at start instead of flooding the terminal, which shows
only the warnings a person must act on.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from bot.app.routing import Completions
from bot.ids import NAME_TEXT
from bot.messages import Message

HISTORY_LINES = 2000
KEPT_IDS = 200
META_COMMANDS = (":help", ":quit", ":as", ":pass", ":advance", ":release", ":stop", ":incident", ":fix")
# Ids people copy from an answer: requests, batches, dry runs, turns, sessions, triage groups.
# A named installation's group ends in its name (bot/ids.py): ``t1.g2.eu-1``, offered whole.
_IDS = re.compile(
    rf"(?<![\w/])(?:(?:req|bat|dry|turn|ses|sess)_[A-Za-z0-9_.:-]*[A-Za-z0-9]|t\d+\.g\d+(?:\.{NAME_TEXT}\b)?)"
)


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/recover-bot`` (default ``~/.local/state/recover-bot``), created on demand."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    path = Path(base) / "recover-bot"
    path.mkdir(parents=True, exist_ok=True)
    return path


class SeenIds:
    """The ids shown in the last answers, newest first (what Tab offers after a subcommand)."""

    def __init__(self, keep: int = KEPT_IDS) -> None:
        self.keep = keep
        self._ids: list[str] = []

    def note(self, message: Message, text: str) -> None:
        found = [*(i for i in (message.ref, message.session_id) if i), *_IDS.findall(text)]
        for value in found:
            if value in self._ids:
                self._ids.remove(value)
            self._ids.insert(0, value)
        del self._ids[self.keep :]

    def all(self) -> list[str]:
        return list(self._ids)


def candidates(line: str, word: str, words: Completions, seen: Sequence[str]) -> list[str]:
    """What Tab completes ``word`` to, the line before it being ``line`` (subcommands, then their
    flags, decisions and the ids of the last answers)."""
    before = line.split()
    if before and before[0] == "/recover":
        before = before[1:]
    if not before:
        first = sorted({name.split(" ")[0] for name in words.commands})
        return [c for c in [*first, *META_COMMANDS] if c.startswith(word)]
    name = _longest(before, words.commands)
    if name is None:  # between the words of a longer subcommand (dryrun decide, batch decide)
        n = len(before)
        nxt = sorted({w.split(" ")[n] for w in words.commands if w.split(" ")[:n] == before and len(w.split(" ")) > n})
        return [c for c in nxt if c.startswith(word)]
    if word.startswith("-"):
        return [f for f in words.commands[name] if f.startswith(word)]
    pool: list[str] = []
    n_words = len(name.split(" "))
    longer = [w.split(" ")[n_words] for w in words.commands if w.startswith(name + " ")]
    if len(before) == n_words:
        pool.extend(longer)
    if name in words.takes_decision:
        pool.extend(words.decisions)
    pool.extend(seen)
    if name == "help":
        pool = sorted(words.commands)
    out: list[str] = []
    for c in pool:
        if c.startswith(word) and c not in out:
            out.append(c)
    return out


def _longest(before: list[str], commands: Iterable[str]) -> str | None:
    best: str | None = None
    for name in commands:
        parts = name.split(" ")
        if before[: len(parts)] == parts and (best is None or len(parts) > len(best.split(" "))):
            best = name
    return best


class LineEditor:
    """GNU readline for the prompt: editing, history kept in ``history`` across runs, Tab completion."""

    def __init__(self, readline: ModuleType, history: Path, words: Completions, seen: SeenIds) -> None:
        self.readline, self.history, self.words, self.seen = readline, history, words, seen
        self._matches: list[str] = []
        with contextlib.suppress(OSError):  # the first run: no history yet
            readline.read_history_file(str(history))
        readline.set_history_length(HISTORY_LINES)
        readline.set_completer_delims(" \t\n\"'=")
        readline.set_completer(self.complete)
        if "libedit" in (readline.__doc__ or ""):
            readline.parse_and_bind("bind ^I rl_complete")
        else:
            readline.parse_and_bind("tab: complete")

    def complete(self, word: str, state: int) -> str | None:
        if state == 0:
            line = self.readline.get_line_buffer()[: self.readline.get_begidx()]
            self._matches = [m + " " for m in candidates(line, word, self.words, self.seen.all())]
        return self._matches[state] if state < len(self._matches) else None

    def save(self) -> None:
        with contextlib.suppress(OSError):  # a read-only state dir costs the history, never the session
            self.readline.write_history_file(str(self.history))


def line_editor(words: Completions, seen: SeenIds, history: Path) -> LineEditor | None:
    """A :class:`LineEditor` when this Python has readline (None on builds without it)."""
    try:
        import readline
    except ImportError:  # pragma: no cover - CPython on Linux and macOS ships it
        return None
    return LineEditor(readline, history, words, seen)
