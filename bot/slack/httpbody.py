"""A request's body, read off a blocking socket on the thread that answers it, under one deadline.

Why a deadline for the whole body rather than a timeout per ``recv``: a client dribbling a byte every
few seconds would reset a per-read timeout forever. Here every read waits at most for what is left of
the deadline, and the count of bytes is checked before they are kept (chunked bodies have no length
up front), so no body holds more than the cap in memory.
"""

from __future__ import annotations

import re
import socket
import time

from bot.slack.httpwire import Refused, RequestHead

_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
MAX_TRAILERS = 16 * 1024
READ_SIZE = 64 * 1024


class BodyReader:
    """One request's body after its head; ``consumed`` once it is all off the socket."""

    def __init__(self, sock: socket.socket, head: RequestHead, buffered: bytes) -> None:
        self._sock = sock
        self._head = head
        self._buf = bytearray(buffered)
        self._deadline = 0.0
        self._continued = not head.expects_continue
        self.consumed = not head.chunked and head.length == 0

    def read(self, max_body: int, deadline: float) -> bytes:
        """The whole body; :class:`Refused` 413 over ``max_body``, 408 past ``deadline`` (monotonic)."""
        self._deadline = deadline
        if self._head.chunked:
            body = self._read_chunked(max_body)
        else:
            if self._head.length > max_body:
                raise Refused(413, f"body of {self._head.length} bytes over the {max_body}-byte cap")
            body = self._take(self._head.length)
        self.consumed = True
        return body

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
            self._take(self._head.length)
            self.consumed = True
        except (Refused, OSError):
            pass  # a client that stalls or leaves is answered all the same

    def leftover(self) -> bytes:
        """Bytes read past this request (the start of the next one on a keep-alive connection)."""
        return bytes(self._buf)

    # -- reading ------------------------------------------------------------------------------------

    def _fill(self) -> None:
        """One more read into the buffer, waiting at most until the deadline."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise Refused(408, "body not received in time")
        self._sock.settimeout(remaining)
        try:
            if not self._continued:  # asked for (Expect: 100-continue) and the body is wanted: go on
                self._continued = True
                self._sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            data = self._sock.recv(READ_SIZE)
        except TimeoutError:
            raise Refused(408, "body not received in time") from None
        except OSError:
            raise Refused(400, "client went away before the body was complete") from None
        if not data:
            raise Refused(400, "client went away before the body was complete")
        self._buf += data

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _line(self, limit: int, what: str) -> bytes:
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 2]
                return line
            if len(self._buf) > limit:
                raise Refused(400, f"{what} too long")
            self._fill()

    def _read_chunked(self, max_body: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = self._line(MAX_CHUNK_LINE, "chunk-size line")
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not _CHUNK_SIZE.fullmatch(digits):
                raise Refused(400, "malformed chunk size")
            n = int(digits, 16)
            if n == 0:
                break
            size += n
            if size > max_body:
                raise Refused(413, f"body over the {max_body}-byte cap")
            chunks.append(self._take(n))
            if self._take(2) != b"\r\n":
                raise Refused(400, "chunk not followed by CRLF")
        trailers = 0
        while True:  # trailers, ignored, up to the blank line
            line = self._line(MAX_TRAILERS, "trailer section")
            trailers += len(line) + 2
            if not line:
                return b"".join(chunks)
            if trailers > MAX_TRAILERS:
                raise Refused(431, "trailer section too long")
