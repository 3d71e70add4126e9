"""A request's body, read off a blocking socket on the thread that answers it, under one deadline.

h11 frames the body (a length, or chunks with their trailers) and sends ``100 Continue`` when the
client waits for it; what it leaves to its user is here. Why a deadline for the whole body rather than
a timeout per ``recv``: a client dribbling a byte every few seconds would reset a per-read timeout
forever. Every read waits at most for what is left of the deadline, and the count of bytes is checked
as h11 hands them over (chunked bodies have no length up front), so no body holds more than the cap
in memory.
"""

from __future__ import annotations

import socket
import time

import h11

from bot.slack.httpwire import Refused, RequestHead

READ_SIZE = 64 * 1024


class BodyReader:
    """One request's body after its head; ``consumed`` once it is all off the socket."""

    def __init__(self, sock: socket.socket, wire: h11.Connection, head: RequestHead) -> None:
        self._sock = sock
        self._wire = wire
        self._head = head
        self._deadline = 0.0
        self.consumed = False
        if not head.chunked and head.length == 0:
            self._next()  # h11 marks the end of an empty body without a read

    def read(self, max_body: int, deadline: float) -> bytes:
        """The whole body; :class:`Refused` 413 over ``max_body``, 408 past ``deadline`` (monotonic)."""
        if self._head.length > max_body:
            raise Refused(413, f"body of {self._head.length} bytes over the {max_body}-byte cap")
        self._deadline = deadline
        chunks: list[bytes] = []
        size = 0
        while not self.consumed:
            data = self._next()
            size += len(data)
            if size > max_body:
                raise Refused(413, f"body over the {max_body}-byte cap")
            chunks.append(data)
        return b"".join(chunks)

    def drain(self, limit: int, seconds: float) -> None:
        """Take a small declared body off the socket before a refusal is answered.

        Closing a socket with unread bytes makes the kernel send a reset, which can reach the client
        before the answer does: a forged request would see "connection reset" instead of its 401.
        Only a declared length up to ``limit`` is drained; anything larger or chunked stays unread.
        """
        if self.consumed or self._head.chunked or self._head.length > limit:
            return
        self._deadline = time.monotonic() + seconds
        try:
            while not self.consumed:
                self._next()
        except Refused:
            pass  # a client that stalls or leaves is answered all the same

    # -- reading ------------------------------------------------------------------------------------

    def _next(self) -> bytes:
        """The next piece of the body (b"" at its end, then ``consumed``), reading when h11 needs more."""
        while True:
            try:
                event = self._wire.next_event()
            except h11.RemoteProtocolError as error:
                raise Refused.of(error, too_long="a chunk-size line or the trailer section too long") from None
            if isinstance(event, h11.Data):
                return bytes(event.data)
            if isinstance(event, h11.EndOfMessage):
                self.consumed = True
                return b""
            if event is not h11.NEED_DATA:  # nothing else can follow a request's head
                raise Refused(400, "unexpected data in the request body")
            self._fill()

    def _fill(self) -> None:
        """One more read into h11, waiting at most until the deadline."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise Refused(408, "body not received in time")
        self._sock.settimeout(remaining)
        try:
            if self._wire.they_are_waiting_for_100_continue:  # the body is wanted: go on
                self._sock.sendall(
                    self._wire.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")) or b""
                )
            data = self._sock.recv(READ_SIZE)
        except TimeoutError:
            raise Refused(408, "body not received in time") from None
        except OSError:
            raise Refused(400, "client went away before the body was complete") from None
        if not data:
            raise Refused(400, "client went away before the body was complete")
        self._wire.receive_data(data)
