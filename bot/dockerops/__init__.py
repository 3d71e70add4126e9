"""Docker operations of runbook §1: reconciler dry run, gated real pass, status, preflight, worker logs.

Plain Python, no Slack: every method returns :class:`bot.messages.Reply` data or raises a
:class:`bot.errors.DockerOpsError` with an actionable message. Public names are re-exported here; the
modules behind them are private.
"""

from __future__ import annotations

from bot.dockerops._config import (
    CAUTION_DRY_RUN,
    CAUTION_NOT_REMOVED,
    CAUTION_OVERLAP_SAFE,
    DEFAULT_ARGV,
    ReconcilerConfig,
    WorkerLogConfig,
)
from bot.dockerops._endpoint import DockerEndpoint
from bot.dockerops._engine import DockerClientFactory, HostClientFactory, client_factory, daemon_now, reach
from bot.dockerops._events import WorkerStop, WorkerStopFollower
from bot.dockerops._exec import ExecResult
from bot.dockerops._logsource import DockerLogSource, DockerLogSourceError
from bot.dockerops._ops import DockerOps
from bot.dockerops._reconciler import PassLine, ReconcilerTarget
from bot.dockerops._records import ReconcileRefused
from bot.dockerops._schema import migrations
from bot.dockerops._wording import summarise_output

__all__ = [
    "CAUTION_DRY_RUN",
    "CAUTION_NOT_REMOVED",
    "CAUTION_OVERLAP_SAFE",
    "DEFAULT_ARGV",
    "DockerClientFactory",
    "DockerEndpoint",
    "DockerLogSource",
    "DockerLogSourceError",
    "DockerOps",
    "HostClientFactory",
    "ExecResult",
    "PassLine",
    "ReconcileRefused",
    "ReconcilerConfig",
    "ReconcilerTarget",
    "WorkerLogConfig",
    "WorkerStop",
    "WorkerStopFollower",
    "client_factory",
    "daemon_now",
    "migrations",
    "reach",
    "summarise_output",
]
