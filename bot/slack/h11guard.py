"""uvicorn's h11 protocol with a header-read timeout and a connection cap that evicts idle sockets.

Why: uvicorn starts no timer before a request's headers are complete (its keep-alive timer runs only
between requests and is cancelled by the first byte of the next one), so a client that connects and
never finishes its headers holds a socket and a file descriptor forever; thousands of them starve the
process of descriptors, and then real requests and ``/healthz`` cannot even be accepted. Here:

- a connection waiting for headers (new, or a keep-alive one whose next request has started) is
  closed when they are not complete ``header_timeout`` seconds after its first byte or its accept;
- when more than ``max_connections`` are open, the oldest connection still waiting for headers is
  closed to make room, so a flood of half-open sockets can never shut out a real request.

Everything else (h11's limit on an incomplete event, keep-alive, ``limit_concurrency``) is uvicorn's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("recover_bot.slack.front")

HEADER_TIMEOUT = 10.0


def guarded_protocol(*, header_timeout: float = HEADER_TIMEOUT, max_connections: int = 4096) -> type[H11Protocol]:
    """A protocol class for one server (its registry of waiting connections is per class)."""

    waiting: OrderedDict[GuardedH11Protocol, None] = OrderedDict()
    closing: set[GuardedH11Protocol] = set()  # closed by us, connection_lost not yet called
    evicted = [0]

    class GuardedH11Protocol(H11Protocol):
        timeout = header_timeout
        limit = max_connections

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None

        @staticmethod
        def evictions() -> int:
            return evicted[0]

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_headers()
            while len(self.connections) - len(closing) > self.limit:
                oldest = next(iter(waiting), None)
                if oldest is None or oldest is self:
                    # Every other connection is busy with a request: this one waits its turn elsewhere.
                    self._drop()
                    break
                evicted[0] += 1
                oldest._drop()

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_done()
            closing.discard(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._between_requests():
                if self._header_timer is None and not self.transport.is_closing():
                    self._await_headers()
            else:
                self._headers_done()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._between_requests() and not self.transport.is_closing():
                # Idle keep-alive: uvicorn's keep-alive timer applies; evictable meanwhile.
                waiting[self] = None

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _await_headers(self) -> None:
            waiting[self] = None
            waiting.move_to_end(self)
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(self.timeout, self._header_timeout)

        def _headers_done(self) -> None:
            waiting.pop(self, None)
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self._between_requests():
                log.info("closing a connection whose request headers did not arrive within %.0f s", self.timeout)
                self._drop()

        def _drop(self) -> None:
            self._headers_done()
            if not self.transport.is_closing():
                closing.add(self)
                self.transport.close()

    return GuardedH11Protocol
