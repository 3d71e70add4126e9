"""Several sandbox control hosts in one process: one per installation, each on its own port with its
own key and state, all loaded from the same scenarios, so every one has the SAME session ids.

That sameness is the point: a session id alone cannot say which installation it belongs to, so a test
can prove a decision meant for ``eu-1`` never reaches ``us-1`` (``us-1``'s request log and effects stay
empty). Time is one clock for all of them (one process, one time); moving it through any admin API
moves it for every installation.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from bot.clock import Clock, ManualClock, SystemClock
from bot.sandbox._app import RECOVER_SCOPE
from bot.sandbox._handle import AdjustableClock, SandboxHandle, ScenarioSpec, start_sandbox


class SandboxSet(Mapping[str, SandboxHandle]):
    """Running sandbox control hosts by installation name, in the order they were named."""

    def __init__(self, handles: dict[str, SandboxHandle], clock: Clock) -> None:
        self._handles = handles
        self.clock = clock

    def __getitem__(self, name: str) -> SandboxHandle:
        return self._handles[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)

    def stop(self) -> None:
        for handle in self._handles.values():
            handle.stop()

    def __enter__(self) -> SandboxSet:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def installation_key(api_key: str, name: str) -> str:
    """Each installation's own key, from the one ``--api-key``: a key that works on one host is
    refused by the others (as real installations' keys are)."""
    return f"{api_key}-{name}"


def start_installations(
    names: Sequence[str],
    *,
    scenarios: ScenarioSpec = "builtin",
    clock: Clock | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    **options: Any,
) -> SandboxSet:
    """One sandbox per name (``start_sandbox``'s other ``options`` apply to each). ``port`` 0: any free
    port each; another number: the first installation's, the next ones on the following ports.
    ``api_key`` None: a random key per installation; else :func:`installation_key` of it."""
    if not names or len(set(names)) != len(names):
        raise ValueError(f"installations: name each once, e.g. eu-1,us-1 (got {', '.join(names) or 'none'})")
    shared: Clock = clock if clock is not None else ManualClock()
    handles: dict[str, SandboxHandle] = {}
    try:
        for offset, name in enumerate(names):
            keys = None if api_key is None else {installation_key(api_key, name): {"sessions:read", RECOVER_SCOPE}}
            handles[name] = start_sandbox(
                scenarios=scenarios,
                clock=shared,
                host=host,
                port=port + offset if port else 0,
                api_keys=keys,
                **options,
            )
    except BaseException:
        for handle in handles.values():
            handle.stop()
        raise
    return SandboxSet(handles, shared)


def serve_installations_forever(
    names: Sequence[str],
    host: str,
    port: int,
    *,
    api_key: str,
    scenarios: ScenarioSpec = "builtin",
    incident: int | None = None,
    outage_seconds: float = 600.0,
    announce: Callable[[SandboxSet], None] | None = None,
) -> None:
    """``recover-bot sandbox --installations …`` in the foreground until interrupted; ``announce`` tells
    the person how to point the bot at them (the caller prints or writes the installations file)."""
    hosts = start_installations(
        names,
        scenarios=scenarios,
        clock=AdjustableClock(SystemClock()),
        host=host,
        port=port,
        api_key=api_key,
        incident=incident,
        outage_seconds=outage_seconds,
    )
    stop = threading.Event()
    try:
        for name, handle in hosts.items():
            print(f"Sandbox control host {name} listening on {handle.url}", flush=True)
        first = next(iter(hosts.values()))
        print(
            f"  the same scenarios on each: {', '.join(sorted(first.state.scenarios)) or '(none)'}",
            flush=True,
        )
        print("  admin API: <url>/_sandbox/ of each (see docs/sandbox.md)", flush=True)
        if announce is not None:
            announce(hosts)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("Stopping the sandbox control hosts.", file=sys.stderr, flush=True)
    finally:
        hosts.stop()
