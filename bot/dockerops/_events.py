"""Following the engine's event stream for one installation's worker containers (``die``/``stop``).

Watch mode polls the session listing at an interval; a worker container dying is the earliest sign a
session stopped, so each such event makes the watcher poll at once. The listing stays the truth (an
event only says *when* to look), which is why a break in the stream costs nothing but speed: the
follower reconnects with backoff, says so once per outage (and counts every failed attempt through
``on_failure``), and asks for a poll when it is back, since events of the gap are not replayed.

The one Docker call is ``GET /events`` with server-side filters (type=container, event=die/stop,
the compose project and service labels); names are checked again here (``<project>-worker-…``).
A stream is renewed every ``renew_after`` seconds: a remote engine that vanished without a word
(no FIN, no RST) would otherwise leave the read waiting forever.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker.errors
import requests

from bot.dockerops._config import PROJECT_NAME, WorkerLogConfig
from bot.dockerops._engine import DockerClientFactory, client_host, close_quietly, connect, translate
from bot.errors import DockerOpsError
from bot.redact import redact

log = logging.getLogger(__name__)

EVENTS = ("die", "stop")


@dataclass(frozen=True)
class WorkerStop:
    """One ``die``/``stop`` of a worker container, as the engine reported it."""

    name: str
    action: str
    session_id: str | None
    exit_code: str | None
    time_nano: int | None


class WorkerStopFollower:
    """``start`` follows on a daemon thread until ``stop``; ``follow_once`` is one connection."""

    def __init__(
        self,
        docker_client_factory: DockerClientFactory,
        installation: str,
        *,
        on_stop: Callable[[WorkerStop], None],
        on_failure: Callable[[str], None] | None = None,
        on_reconnect: Callable[[], None] | None = None,
        config: WorkerLogConfig | None = None,
        backoff: tuple[float, float] = (0.5, 30.0),
        renew_after: float = 600.0,
    ) -> None:
        if not PROJECT_NAME.match(installation):
            raise ValueError(f"{installation!r} is not a compose project name")
        self.factory = docker_client_factory
        self.installation = installation
        self.config = config or WorkerLogConfig()
        self.on_stop = on_stop
        self.on_failure = on_failure
        self.on_reconnect = on_reconnect
        self.backoff = backoff
        self.renew_after = renew_after
        self.name_regex = re.compile(f"^{re.escape(installation)}-{re.escape(self.config.service)}-[0-9]+$")
        self.failures = 0  # failed attempts in a row (0 while connected)
        self.connected = threading.Event()  # set while a stream is open (tests and /recover watch)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._stream: Any = None
        self._renewed = False
        self._thread: threading.Thread | None = None

    def filters(self) -> dict[str, list[str]]:
        project, service = self.config.project_label, self.config.service_label
        return {
            "type": ["container"],
            "event": list(EVENTS),
            "label": [f"{project}={self.installation}", f"{service}={self.config.service}"],
        }

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"docker-events-{self.installation}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop: close the open stream (its read returns at once) and wait for the thread."""
        self._stopping.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            close_quietly(stream)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = self.backoff[0]
        while not self._stopping.is_set():
            try:
                if self.follow_once():
                    delay = self.backoff[0]  # renewed (or stopping): reconnect at once
                    continue
                error = "the engine closed the event stream"
            except DockerOpsError as exc:
                error = exc.message
            except Exception as exc:  # noqa: BLE001 - the follower must never silently stop
                error = redact(str(exc)) or type(exc).__name__
            if self._stopping.is_set():
                return
            self.failures += 1
            if self.failures == 1:  # once per outage; each attempt is counted by on_failure
                log.warning("docker events: cannot follow the engine (%s); retrying with backoff", error)
            if self.on_failure is not None:
                self.on_failure(error)
            self._stopping.wait(delay)
            delay = min(delay * 2, self.backoff[1])

    def follow_once(self) -> bool:
        """One connection: read events until the stream ends (False), is renewed or :meth:`stop` is
        called (True). Raises :class:`DockerOpsError` when the engine cannot be reached or refuses."""
        self._renewed = False
        client = connect(self.factory)
        host = client_host(client, self.factory)
        renew: threading.Timer | None = None
        try:
            with translate("Following the Docker engine's events", host):
                stream = client.api.events(filters=self.filters(), decode=True)
            with self._lock:
                self._stream = stream
            if self._stopping.is_set():
                return True
            renew = threading.Timer(self.renew_after, self._renew, args=(stream,))
            renew.daemon = True
            renew.start()
            self._connected()
            seen = False
            with translate("Reading the Docker engine's events", host):
                for event in stream:
                    if self._stopping.is_set():
                        return True
                    seen = True
                    stop = self._worker_stop(event)
                    if stop is not None:
                        self.on_stop(stop)
            if self._renewed or self._stopping.is_set():
                return True
            if not seen:
                self._why_closed(client, host)
            return False
        finally:
            if renew is not None:
                renew.cancel()
            self.connected.clear()
            with self._lock:
                stream, self._stream = self._stream, None
            if stream is not None:
                close_quietly(stream)
            close_quietly(client)

    @staticmethod
    def _why_closed(client: Any, host: str) -> None:
        """A stream that ends before its first event may be a refusal: the SDK's stream swallows the
        error (an HTTP error is an OSError to it). One bounded ``GET /events`` (since = until = the
        epoch, answered at once) says what the engine or its proxy answered."""
        url = f"{client.api.base_url}/v{client.api.api_version}/events"
        with translate("Following the Docker engine's events", host):
            response = client.api.get(url, params={"since": 1, "until": 1}, timeout=10)
            try:
                response.raise_for_status()
            except requests.exceptions.HTTPError as exc:
                raise docker.errors.create_api_error_from_http_exception(exc) from exc
            finally:
                response.close()

    def _renew(self, stream: object) -> None:
        self._renewed = True
        close_quietly(stream)

    def _connected(self) -> None:
        was_failing = self.failures > 0
        self.failures = 0
        self.connected.set()
        if was_failing:
            log.info("docker events: following the engine again")
        if self.on_reconnect is not None:
            self.on_reconnect()  # events of the gap are not replayed: one poll covers them

    def _worker_stop(self, event: object) -> WorkerStop | None:
        if not isinstance(event, dict) or event.get("Type") != "container":
            return None
        action = str(event.get("Action") or event.get("status") or "")
        if action not in EVENTS:
            return None
        actor = event.get("Actor")
        attributes: dict[str, Any] = {}
        if isinstance(actor, dict) and isinstance(actor.get("Attributes"), dict):
            attributes = actor["Attributes"]
        name = str(attributes.get("name") or "")
        if not self.name_regex.match(name):
            return None
        if attributes.get(self.config.project_label) != self.installation:
            return None
        session = attributes.get(self.config.session_label)
        exit_code = attributes.get("exitCode")
        nano = event.get("timeNano")
        return WorkerStop(
            name=name,
            action=action,
            session_id=str(session) if session else None,
            exit_code=str(exit_code) if exit_code is not None else None,
            time_nano=int(nano) if isinstance(nano, int) else None,
        )
