"""The HTTP/1.1 server under ``recover-bot serve``: one reactor thread for waiting, one thread per request.

Why this shape (measured with bench/ack_latency.py): a Bolt app answers fastest when one thread reads
a request, dispatches it and writes the answer, with no hop in between — the standard library's
threading server's model. An event loop that parses every request and hands each to an executor and
back (uvicorn + an ASGI adapter) added a 40–70 ms tail under a burst of 20 commands. But a thread per
*connection* would let thousands of half-open sockets hold thousands of threads. So:

- the **reactor** (one thread, a selector) accepts, waits for request heads and idle keep-alive
  connections, enforces every limit on them, and never blocks on a client;
- h11 (:mod:`bot.slack.httpwire`) frames every request on a connection: where its head ends, its
  body, ``Expect: 100-continue``, whether the connection stays and what is left for the next request;
- once a head is complete, a **request thread** (a bounded :class:`bot.workpool.WorkPool`) reads the
  body under its deadline, calls the handler (the checks, then Bolt) and writes the answer itself;
  a keep-alive connection then goes back to the reactor.

Limits on what one client can hold:
- a head over ``max_header_bytes`` → 431; a head not complete ``header_timeout`` seconds after the
  accept or the next request's first byte → closed; an idle keep-alive connection → closed after
  ``keep_alive`` seconds;
- more than ``max_connections`` open → the oldest one waiting for a head (or idle) is closed to make
  room, so a flood of half-open sockets never shuts out a real request;
- more than ``max_in_flight`` requests being read or answered → 503 at once.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Protocol

import h11

from bot.slack.httpbody import BodyReader
from bot.slack.httpwire import (
    Refused,
    RequestHead,
    Response,
    connection,
    refusal,
    request_head,
    response_bytes,
)
from bot.workpool import PoolBusy, WorkPool

log = logging.getLogger("recover_bot.slack.front")

HEADER_TIMEOUT = 10.0
KEEP_ALIVE = 5.0
MAX_HEADER_BYTES = 16 * 1024
MAX_IN_FLIGHT = 256
WRITE_TIMEOUT = 10.0
DRAIN_LIMIT = 64 * 1024  # an unread declared body up to this is taken off the socket before answering
DRAIN_SECONDS = 1.0
_READ_SIZE = 64 * 1024


@dataclass
class Request:
    """One request as a handler sees it: the head, who sent it, and its body still on the socket."""

    head: RequestHead
    client: str
    body: BodyReader


class Handler(Protocol):
    def handle(self, request: Request) -> Response: ...


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    client: str
    wire: h11.Connection
    head: bytearray = field(default_factory=bytearray)  # the next head's bytes so far, as received
    deadline: float = 0.0
    idle: bool = False  # between requests (keep-alive), not yet sent a byte of the next one
    closed: bool = False


class Reactor:
    """The selector loop: accepts, head reads, deadlines, the connection cap; hands heads on."""

    def __init__(
        self,
        listener: socket.socket,
        handler: Handler,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        keep_alive: float = KEEP_ALIVE,
        max_header_bytes: int = MAX_HEADER_BYTES,
        max_connections: int = 4096,
        max_in_flight: int = MAX_IN_FLIGHT,
        accept_batch: int = 128,
    ) -> None:
        self.listener = listener
        self.handler = handler
        self.header_timeout = header_timeout
        self.keep_alive = keep_alive
        self.max_header_bytes = max_header_bytes
        self.max_connections = max_connections
        self.accept_batch = accept_batch
        self.pool = WorkPool("http", workers=max_in_flight, queue=0, idle_seconds=30.0)
        self.evictions = 0
        self.open = 0  # connections open, the reactor's and the request threads'
        self._selector = selectors.DefaultSelector()
        self._waiting: OrderedDict[_Conn, None] = OrderedDict()  # the oldest waiting first: evicted first
        self._deadlines: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._returned: deque[_Conn] = deque()
        self._lock = threading.Lock()  # guards ``open`` and ``_returned`` (request threads touch them)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._closed = False
        self._accept_paused_until = 0.0
        self.running = False  # True once the loop is waiting for connections

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until :meth:`stop` (or an exception in the caller's thread, e.g. SIGTERM's)."""
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.running = True
        try:
            while not self._stopping:
                for key, _ in self._selector.select(self._timeout()):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._take_returned()
                    elif not key.data.closed:  # evicted earlier in this same batch of events
                        self._readable(key.data)
                self._expire()
                if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
                    self._accept_paused_until = 0.0
                    self._selector.register(self.listener, selectors.EVENT_READ, "accept")
        finally:
            self.running = False
            self._close_all()

    def stop(self) -> None:
        self._stopping = True
        self._wake()

    def _timeout(self) -> float:
        """Until the next head deadline or the end of an accept pause, at most 1 s."""
        now = time.monotonic()
        wake = now + 1.0
        if self._deadlines:
            wake = min(wake, self._deadlines[0][0])
        if self._accept_paused_until:
            wake = min(wake, self._accept_paused_until)
        return max(0.0, wake - now)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is already pending
            self._wake_w.send(b"x")

    # -- connections --------------------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(self.accept_batch):
            try:
                sock, address = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._out_of_descriptors()
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "?"
            conn = _Conn(sock, client, connection(self.max_header_bytes))
            with self._lock:
                self.open += 1
            self._wait_for_head(conn, idle=False)
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._enforce_cap(conn)

    def _out_of_descriptors(self) -> None:
        """Accept failed for want of descriptors: free the oldest waiting one, or pause accepting."""
        oldest = next(iter(self._waiting), None)
        if oldest is not None:
            self.evictions += 1
            self._close(oldest)
            return
        log.warning("out of file descriptors with every connection busy: accepting paused for 0.1 s")
        self._selector.unregister(self.listener)
        self._accept_paused_until = time.monotonic() + 0.1

    def _enforce_cap(self, newest: _Conn) -> None:
        while self.open > self.max_connections:
            oldest = next(iter(self._waiting), None)
            if oldest is None or oldest is newest:
                self._close(newest)  # every other connection is busy with a request
                return
            self.evictions += 1
            self._close(oldest)

    def _wait_for_head(self, conn: _Conn, *, idle: bool) -> None:
        conn.idle = idle
        conn.deadline = time.monotonic() + (self.keep_alive if idle else self.header_timeout)
        self._waiting[conn] = None
        self._waiting.move_to_end(conn)
        heapq.heappush(self._deadlines, (conn.deadline, next(self._seq), conn))

    def _expire(self) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, conn = heapq.heappop(self._deadlines)
            if conn in self._waiting and conn.deadline == deadline:
                if not conn.idle:
                    log.info(
                        "closing a connection whose request head did not arrive within %.0f s", self.header_timeout
                    )
                self._close(conn)

    def _close(self, conn: _Conn) -> None:
        """Close once: a connection evicted while its own event waits in the same batch is not counted twice."""
        if conn.closed:
            return
        conn.closed = True
        self._waiting.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        with self._lock:
            self.open -= 1

    def _close_all(self) -> None:
        with self._lock:
            self._closed = True  # a request thread finishing from now on closes its connection itself
            returned, self._returned = list(self._returned), deque()
        for conn in [*self._waiting, *returned]:
            self._close(conn)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self.listener)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- heads --------------------------------------------------------------------------------------

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        if conn.idle:  # the next request's first byte: its head has header_timeout from now
            self._wait_for_head(conn, idle=False)
        conn.head += data
        conn.wire.receive_data(data)
        self._try_head(conn)

    def _try_head(self, conn: _Conn) -> None:
        """Hand a complete head on; a bug here costs one connection, never the loop every client needs."""
        try:
            self._take_head(conn)
        except Exception:
            log.exception("closing a connection from %s: its request head could not be handled", conn.client)
            self._close(conn)

    def _take_head(self, conn: _Conn) -> None:
        try:
            event = conn.wire.next_event()  # h11 refuses an unfinished head over max_header_bytes (431)
        except h11.RemoteProtocolError as error:
            self._refuse(conn, Refused.of(error, too_long=f"request head over {self.max_header_bytes} bytes"))
            return
        if not isinstance(event, h11.Request):
            return  # NEED_DATA: the head is not complete yet
        raw = bytes(conn.head[: len(conn.head) - len(conn.wire.trailing_data[0])])
        conn.head = bytearray()
        self._waiting.pop(conn, None)
        self._selector.unregister(conn.sock)
        if len(raw) > self.max_header_bytes + 4:  # complete in one read, but too long all the same
            self._refuse(conn, Refused(431, f"request head over {self.max_header_bytes} bytes"))
            return
        try:
            head = request_head(event, raw)
        except Refused as refused:
            self._refuse(conn, refused)
            return
        try:
            self.pool.submit(lambda: self._answer(conn, head))
        except PoolBusy:
            log.warning("refused a request from %s: %d already in flight", conn.client, self.pool.max_workers)
            self._refuse_now(conn, refusal(503, "busy"))

    def _refuse(self, conn: _Conn, refused: Refused) -> None:
        log.warning("refused a request from %s: %s", conn.client, refused.reason)
        self._refuse_now(conn, refusal(refused.status, refused.reason))

    def _refuse_now(self, conn: _Conn, response: Response) -> None:
        """Answer from the reactor (never blocking: a few hundred bytes fit any send buffer) and close."""
        with contextlib.suppress(OSError, h11.LocalProtocolError):
            conn.sock.send(response_bytes(conn.wire, response))
        self._close(conn)

    # -- request threads ----------------------------------------------------------------------------

    def _answer(self, conn: _Conn, head: RequestHead) -> None:
        """On a request thread: answer, then hand the connection back or close it (whatever fails)."""
        try:
            kept = self._respond(conn, head)
        except Exception:  # a bug must cost this connection, never leak it
            log.exception("closing a connection from %s after %s %s failed", conn.client, head.method, head.path)
            kept = False
        with self._lock:
            handed_back = kept and not self._closed  # closed: the reactor has stopped
            if handed_back:
                self._returned.append(conn)
            else:
                self.open -= 1
        if handed_back:
            self._wake()
            return
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        conn.sock.close()

    def _respond(self, conn: _Conn, head: RequestHead) -> bool:
        """The handler's answer written; True when h11 says the connection stays for the next request."""
        conn.sock.setblocking(True)
        body = BodyReader(conn.sock, conn.wire, head)
        try:
            response = self.handler.handle(Request(head, conn.client, body))
        except Exception:
            log.exception("the HTTP handler failed on %s %s", head.method, head.path)
            response = refusal(500, "internal error")
        if not body.consumed:
            body.drain(DRAIN_LIMIT, DRAIN_SECONDS)
        response.close = response.close or not body.consumed or self._stopping
        try:
            conn.sock.settimeout(WRITE_TIMEOUT)
            conn.sock.sendall(response_bytes(conn.wire, response, head_only=head.method == "HEAD"))
        except OSError:
            return False
        if conn.wire.states != {h11.CLIENT: h11.DONE, h11.SERVER: h11.DONE}:
            return False  # HTTP/1.0, ``Connection: close`` either way, or a body left unread
        conn.wire.start_next_cycle()
        conn.head = bytearray(conn.wire.trailing_data[0])  # a pipelined request read with this one
        conn.sock.setblocking(False)
        return True

    def _take_returned(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        while True:
            with self._lock:
                if not self._returned:
                    return
                conn = self._returned.popleft()
            if self._stopping:
                self._close(conn)
                continue
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
            self._wait_for_head(conn, idle=not conn.head)
            if conn.head:
                self._try_head(conn)  # a pipelined request was read with the last one
