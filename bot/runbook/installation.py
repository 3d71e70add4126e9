"""The installation's sections of a runbook: limits, the id pattern, the reconciler, the worker
containers, Docker's requirements and the control host's API paths.

They say where things are and how long to wait, not what to decide; the decisions and branches
(``bot.runbook.model``) refer to them by name.
"""

from __future__ import annotations

from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from bot.controlhost import KNOWN_FIELDS
from bot.runbook.values import Bytes, Duration, Model, Regex, Text


class LimitSpec(Model):
    """One limit: exactly one of a duration, a byte size or a count."""

    duration: Duration | None = None
    bytes: Bytes | None = None
    count: Annotated[int, Field(ge=0)] | None = None
    help: Text
    rules: list[str] = Field(default_factory=list)

    @property
    def value(self) -> float:
        for v in (self.duration, self.bytes, self.count):
            if v is not None:
                return float(v)
        raise ValueError("limit without a value")


class IdsSpec(Model):
    pattern: Regex
    help: str = ""


class ContainerSelector(Model):
    project_label: Text
    service_label: Text
    service: Text
    status: str | None = None
    name_pattern: str | None = None


class PassPatterns(Model):
    completed: Text
    failed: Text


class ReconcilerSpec(Model):
    """How the reconciler is found and run (R1.1–R1.6); durations are names of limits."""

    container: ContainerSelector
    argv: list[Text] = Field(min_length=1)
    env_var: Text
    dry_value: Text
    real_value: Text
    review_window: Text
    exec_timeout: Text
    status_file: Text
    pass_patterns: PassPatterns
    cautions: dict[str, str] = Field(default_factory=dict)
    rules: list[str] = Field(default_factory=list)


class WorkerSpec(Model):
    project_label: Text
    service_label: Text
    service: Text
    session_label: Text


_SESSION_PATH = r"^/[A-Za-z0-9_./{}-]*\{session_id\}[A-Za-z0-9_./{}-]*$"
_PLAIN_PATH = r"^/[A-Za-z0-9_./-]*$"


class ApiSpec(Model):
    """The control host's read paths. docs/control-host-api.md marks them [assumed]: an installation whose API
    differs changes them here, not in code. Decision and resume paths live with each decision."""

    session: Annotated[str, Field(pattern=_SESSION_PATH)] = "/v1/sessions/{session_id}"
    sessions: Annotated[str, Field(pattern=_PLAIN_PATH)] = "/v1/sessions"
    turns: Annotated[str, Field(pattern=_SESSION_PATH)] = "/v1/sessions/{session_id}/turns"
    turn: Annotated[str, Field(pattern=r"^/.*\{session_id\}.*\{turn_id\}.*$|^/.*\{turn_id\}.*\{session_id\}.*$")] = (
        "/v1/sessions/{session_id}/turns/{turn_id}"
    )
    events: Annotated[str, Field(pattern=_SESSION_PATH)] = "/v1/sessions/{session_id}/events"
    #: ``{object: {canonical field: the API's field}}``, only where the installation's names differ.
    fields: dict[str, dict[str, Text]] = Field(default_factory=dict)

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for kind, names in value.items():
            if kind not in KNOWN_FIELDS:
                raise ValueError(f"unknown object {kind!r} (known: {', '.join(KNOWN_FIELDS)})")
            for name in names:
                if name not in KNOWN_FIELDS[kind]:
                    raise ValueError(f"{kind} has no field {name!r} (known: {', '.join(KNOWN_FIELDS[kind])})")
        return value


class DeployStep(Model):
    image: Text
    note: Text


class DockerSpec(Model):
    """Docker daemon requirements for isolation-contract changes (R1.7) and the deploy order (R2.17)."""

    min_daemon_major: Annotated[int, Field(ge=1)]
    deploy_order: list[DeployStep] = Field(default_factory=list)
    drain_advice: list[str] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list)


_CLOCK_TIME = r"^([01]\d|2[0-3]):[0-5]\d$"


class QuietHoursSpec(Model):
    """Posts are held from ``start`` to ``end`` (local times in ``time_zone``; ``end`` before ``start``
    spans midnight) and end with one digest."""

    start: Annotated[str, Field(pattern=_CLOCK_TIME)]
    end: Annotated[str, Field(pattern=_CLOCK_TIME)]
    time_zone: Text

    _zone = field_validator("time_zone")(lambda value: _time_zone(value))


def _time_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r}: use an IANA name, e.g. Europe/Berlin") from None
    return value


class HandoffSpec(Model):
    """Shift changes (local ``HH:MM`` times in ``time_zone``): at each, watch mode posts the hand-off
    digest to the watch channel once, whatever the number of bots or restarts."""

    times: list[Annotated[str, Field(pattern=_CLOCK_TIME)]] = Field(min_length=1)
    time_zone: Text

    _zone = field_validator("time_zone")(lambda value: _time_zone(value))


#: The watch section's values and the kind each must be (``{duration: …}`` or ``{count: …}``).
WATCH_VALUES: dict[str, str] = {
    "poll_interval": "duration",
    "dedup_window": "duration",
    "flap_window": "duration",
    "storm_threshold": "count",
    "storm_window": "duration",
}


class WatchSectionSpec(Model):
    """The watcher (proactive detection): how often the listing is polled, how long a stop's key keeps
        it from being posted again, how long a session that stops again updates its case's thread instead
        of opening one, how many new stops within ``storm_window`` become one triage message, and how long
    a claimed stop stays its process's before a live watcher takes it over (``claim_lease``). Each
        value is written like a limit (``{duration: 30s, help: …}``)."""

    poll_interval: LimitSpec
    dedup_window: LimitSpec
    flap_window: LimitSpec
    storm_threshold: LimitSpec
    storm_window: LimitSpec
    claim_lease: LimitSpec
    quiet_hours: QuietHoursSpec | None = None
    rules: list[str] = Field(default_factory=list)

    def seconds(self, name: str) -> float:
        value: LimitSpec = getattr(self, name)
        return value.value
