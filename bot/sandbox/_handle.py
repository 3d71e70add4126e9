"""Starting and stopping the sandbox control host."""

from __future__ import annotations

import secrets
import sys
import threading
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from bot.clock import Clock, ManualClock, SystemClock
from bot.sandbox._admin import SandboxAdmin
from bot.sandbox._app import RECOVER_SCOPE, SandboxApp
from bot.sandbox._lifecycle import KEEP_ATTENTION, STOPPED_TTL_SECONDS
from bot.sandbox._scenarios import Scenario, builtin_scenarios_dir, load_scenarios
from bot.sandbox._server import SandboxHTTPServer
from bot.sandbox._state import SandboxState
from bot.sandbox._traffic import Traffic

ScenarioSpec = str | Path | list[Any] | None


class AdjustableClock:
    """Another clock plus an offset, so the admin API can move time forward on a real clock too."""

    def __init__(self, base: Clock) -> None:
        self._base = base
        self._offset = timedelta()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._base.now() + self._offset

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._offset += timedelta(seconds=seconds)
        return self.now()

    def sleep(self, seconds: float) -> None:
        self._base.sleep(seconds)


def _resolve_scenarios(spec: ScenarioSpec) -> list[Scenario]:
    if spec is None:
        return []
    if isinstance(spec, str) and spec == "builtin":
        return load_scenarios(builtin_scenarios_dir())
    if isinstance(spec, str | Path):
        return load_scenarios(spec)
    builtin: dict[str, Scenario] | None = None
    result: list[Scenario] = []
    for item in spec:
        if isinstance(item, Scenario):
            result.append(item)
        elif isinstance(item, Path) or (isinstance(item, str) and Path(item).exists()):
            result.extend(load_scenarios(item))
        elif isinstance(item, str):
            # A builtin scenario id.
            if builtin is None:
                builtin = {s.id: s for s in load_scenarios(builtin_scenarios_dir())}
            if item not in builtin:
                raise ValueError(f"no builtin scenario {item!r}; known: {sorted(builtin)}")
            result.append(builtin[item])
        else:
            raise TypeError(f"scenario entries are Scenario, Path, file path or builtin id, not {type(item)!r}")
    return result


class SandboxHandle:
    """A running sandbox control host. Use as a context manager or call :meth:`stop`."""

    def __init__(
        self,
        server: SandboxHTTPServer,
        thread: threading.Thread,
        state: SandboxState,
        clock: Clock,
        api_key: str,
    ) -> None:
        self._server = server
        self._thread = thread
        self.state = state
        self.clock = clock
        self.api_key = api_key
        host, port = str(server.server_address[0]), int(server.server_address[1])
        self.url = f"http://{host}:{port}"
        self.admin = SandboxAdmin(self.url)
        self._stopped = False

    @property
    def scenarios(self) -> dict[str, Scenario]:
        return dict(self.state.scenarios)

    def stop(self) -> None:
        """Stop serving, close open connections (idle keep-alives too) and release the port."""
        if self._stopped:
            return
        self._stopped = True
        self.admin.close()
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> SandboxHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_sandbox(
    *,
    scenarios: ScenarioSpec = "builtin",
    clock: Clock | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    api_keys: Mapping[str, set[str]] | None = None,
    request_timeout: float = 30.0,
    latency: float = 0.0,
    rate_limit: float | None = None,
    rate_burst: float | None = None,
    incident: int | None = None,
    outage_seconds: float = 600.0,
    stopped_ttl: float = STOPPED_TTL_SECONDS,
    ready_behaviour: str = KEEP_ATTENTION,
    ready_names_checkpoint: bool = True,
) -> SandboxHandle:
    """Start the sandbox control host in a background thread and return its handle.

    ``scenarios``: "builtin", a scenario file or folder, a list (Scenario objects, paths, builtin ids)
    or None for an empty sandbox. ``clock`` defaults to a fresh ManualClock (time moves only through
    the admin API or the clock itself). ``api_keys`` maps a key to its scopes; by default one random
    key with ``sessions:read`` and ``sessions:recover`` is made. ``handle.api_key`` is a key that has
    ``sessions:recover``. ``request_timeout`` is the socket timeout of each connection (a stalled or
    idle client is disconnected after it). ``latency`` (seconds, real time) is added to every public
    call; ``rate_limit`` (requests a second per client, bursts up to ``rate_burst``) answers 429 with
    Retry-After past it. ``incident`` creates a mass incident of that many sessions whose outage ends
    ``outage_seconds`` from now (see docs/sandbox.md). ``stopped_ttl``: seconds after which a stopped
    session's workspace volume expires (R4.1). ``ready_behaviour``: ``keep_attention`` (the default,
    the seed's reading: a retry_restore / start_fresh answer keeps the attention until the next worker
    reports ready), ``clear_attention`` (the answer shows no attention), ``never_ready`` (workers
    never report ready) or ``ready_at_once`` (a worker a decision launches reports ready before the
    next request is answered) — so the bot's verification can be tested against each (R5.1).
    ``ready_names_checkpoint``: False for a host whose ``worker_ready`` events do not name the
    checkpoint the worker restored (R5.2 cannot then be read from the host).
    """
    clock = clock if clock is not None else ManualClock()
    state_clock: Any = clock if callable(getattr(clock, "advance", None)) else AdjustableClock(clock)
    if api_keys is None:
        api_keys = {f"sbx_{secrets.token_urlsafe(24)}": {"sessions:read", RECOVER_SCOPE}}
    recover_keys = [k for k, scopes in api_keys.items() if RECOVER_SCOPE in scopes]
    if not recover_keys:
        raise ValueError(f"api_keys needs at least one key with the {RECOVER_SCOPE} scope")
    state = SandboxState(
        state_clock,
        stopped_ttl=stopped_ttl,
        ready_behaviour=ready_behaviour,
        ready_names_checkpoint=ready_names_checkpoint,
    )
    state.add_scenarios(_resolve_scenarios(scenarios))
    if incident:
        state.create_incident(incident, outage_seconds=outage_seconds)
    traffic = Traffic(latency=latency, rate=rate_limit, burst=rate_burst)
    app = SandboxApp(state, api_keys, lambda seconds: state_clock.advance(seconds), traffic)
    server = SandboxHTTPServer((host, port), app, request_timeout=request_timeout)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="sandbox-control-host", daemon=True
    )
    thread.start()
    return SandboxHandle(server, thread, state, clock, recover_keys[0])


def serve_forever(
    host: str,
    port: int,
    *,
    api_key: str,
    scenarios: ScenarioSpec = "builtin",
    incident: int | None = None,
    outage_seconds: float = 600.0,
    stop_every: float | None = None,
    show_key: bool = False,
) -> None:
    """Run the sandbox in the foreground until interrupted (``recover-bot sandbox`` / ``demo``).
    ``stop_every`` (seconds): the next session in turn stops this often (``POST /_sandbox/schedule``
    ``{"every": …}``), so watch mode has something to post.

    Prints the URL and how to point the bot at it; the key itself only with ``show_key`` (the
    command's documented default, a line to paste as it is), never one the person chose with
    ``--api-key``. The clock is the real clock, movable forward through
    ``POST /_sandbox/clock/advance``.
    """
    handle = start_sandbox(
        scenarios=scenarios,
        clock=AdjustableClock(SystemClock()),
        host=host,
        port=port,
        api_keys={api_key: {"sessions:read", RECOVER_SCOPE}},
        incident=incident,
        outage_seconds=outage_seconds,
    )
    stop = threading.Event()
    try:
        # Inside the try: an interrupt at any moment after start still stops the server cleanly.
        print(f"Sandbox control host listening on {handle.url}", flush=True)
        key = api_key if show_key else "<the --api-key value>"
        print(f"  point the bot at it: CONTROL_HOST_URL={handle.url} CONTROL_HOST_API_KEY={key}", flush=True)
        print(f"  admin API: {handle.url}/_sandbox/  (see docs/sandbox.md)", flush=True)
        print(f"  scenarios: {', '.join(sorted(handle.state.scenarios)) or '(none)'}", flush=True)
        if handle.state.incident is not None:
            info = handle.state.incident.to_json(handle.clock.now())
            causes = ", ".join(f"{k} {v}" for k, v in info["by_cause"].items())
            print(
                f"  incident: {info['sessions']} sessions ({causes}); the outage ends at {info['outage_until']}",
                flush=True,
            )
        if stop_every is not None:
            with handle.state.lock:
                handle.state.schedule.add(handle.state, {"every": stop_every}, handle.state.now())
            every = handle.state.schedule.recurring
            assert every is not None
            print(
                f"  stops: every {stop_every:g} s the next of {len(every.sessions)} sessions in turn "
                "(settled instead when it still is); GET /_sandbox/schedule shows what is planned",
                flush=True,
            )
        while not stop.wait(0.5):
            if handle.state.schedule.recurring is not None or handle.state.schedule.planned:
                with handle.state.lock:  # due stops happen on time even while nobody asks
                    handle.state.tick()
    except KeyboardInterrupt:
        print("Stopping the sandbox control host.", file=sys.stderr, flush=True)
    finally:
        handle.stop()
