"""The bot's error tree.

Every error a person can see derives from :class:`RecoverError` and carries a message written for an
on-call engineer: what went wrong and what to do next. Lower-level errors (httpx, docker, sqlite) are
translated at the boundary (``raise ... from exc``) and never leak raw. Messages never contain a
secret: build them with :func:`bot.redact.redact` when they quote outside text.

    RecoverError
    ├── SettingsError          configuration problems, one line each
    ├── StartupError           a port, Slack or a store unusable at start (one line, what to fix)
    ├── RunbookError           an invalid runbook file (file:line: problem)
    ├── CommandError           a chat/console command that does not parse (carries usage help)
    ├── ControlHostError       an answer (or no answer) from the control host's API
    │   └── ControlHostAuthError   401: wrong or expired key; 403: no sessions:recover scope (R0.1)
    ├── ApprovalError          the two-person rule refused an action
    ├── DecisionError          a decision refused before it was sent (runbook preconditions)
    ├── DockerOpsError         Docker unreachable, permission denied, container missing…
    └── StoreError             the SQLite step store refused or is inconsistent

    KeyboardInterrupt
    └── Interrupted            Ctrl-C during a wait: what was withdrawn or left uncertain, as a reply
"""

from __future__ import annotations

from typing import Generic, TypeVar

# What an interrupted command says (the core's Reply): a parameter, because this module is the base
# of everything, the sandbox included, and imports nothing of the bot.
R = TypeVar("R")


class RecoverError(Exception):
    """Base of every error the bot shows to a person."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


class SettingsError(RecoverError):
    """One or more settings are missing or invalid."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("Invalid settings:\n" + "\n".join(f"  - {p}" for p in self.problems))


class StartupError(RecoverError):
    """Something the bot needs at start is unusable: a busy port, Slack unreachable, an unreadable store."""


class RunbookError(RecoverError):
    """A runbook file is invalid; ``problems`` are ``file:line: what is wrong`` strings."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("Invalid runbook:\n" + "\n".join(f"  {p}" for p in self.problems))


class CommandError(RecoverError):
    """A command that does not parse; ``usage`` is the help to show instead of a stack trace."""

    def __init__(self, message: str, *, usage: str | None = None) -> None:
        super().__init__(message, hint=usage)
        self.usage = usage


class ControlHostError(RecoverError):
    """An error answer from the control host, or no answer at all.

    ``code`` is the API's error code (NOT_FOUND, REQUEST_STALE, RECOVERY_REQUIRED,
    CHECKPOINT_UNAVAILABLE, BACKEND_UNAVAILABLE, BAD_REQUEST, IDEMPOTENCY_KEY_REUSED), or
    UNAUTHORIZED (401) / FORBIDDEN (403) / UNREACHABLE / TIMEOUT / SERVER_ERROR / BAD_RESPONSE when the API gave none.
    ``status`` is the HTTP status (None when there was no answer).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        retryable: bool = False,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.code = code
        self.status = status
        self.retryable = retryable


class ControlHostAuthError(ControlHostError):
    """401/403: the API key is wrong or lacks the sessions:recover scope (R0.1). Never retried."""


class ApprovalError(RecoverError):
    """The two-person rule refused an approval, rejection or execution."""


class DecisionError(RecoverError):
    """A decision refused by the bot before anything was sent (the runbook says it would fail)."""


class DockerOpsError(RecoverError):
    """A Docker operation failed: engine unreachable, permission denied, container missing…"""


class StoreError(RecoverError):
    """The step store refused a write or found itself inconsistent."""


class Interrupted(KeyboardInterrupt, Generic[R]):
    """Ctrl-C reached the core during a command; ``reply`` says what became of its request.

    A KeyboardInterrupt (not an Exception) so front ends that catch Exception still stop; the
    console shows ``reply`` — withdrawn and never replayed, or uncertain and kept with its key.
    """

    def __init__(self, reply: R) -> None:
        super().__init__("interrupted")
        self.reply = reply
