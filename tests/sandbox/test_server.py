"""The server itself: loopback port 0, request timeouts, clean shutdown, injectable clock, the CLI entry."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest

from bot.clock import ManualClock, SystemClock, isoformat
from bot.sandbox import AdjustableClock, SandboxHandle, start_sandbox
from tests.fixtures.sandbox import SandboxApi


def _port(handle: SandboxHandle) -> int:
    return int(handle.url.rsplit(":", 1)[1])


def _read_response(sock: socket.socket) -> bytes:
    """Read one whole HTTP response (headers and a Content-Length body) from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_listens_on_loopback_with_a_free_port(sandbox: SandboxHandle) -> None:
    assert sandbox.url.startswith("http://127.0.0.1:") and not sandbox.url.endswith("/")
    assert _port(sandbox) > 0


def test_stop_releases_the_port_and_closes_idle_keep_alive_connections(
    sandbox_factory: Callable[..., SandboxHandle],
) -> None:
    handle = sandbox_factory(scenarios=["healthy"])
    port = _port(handle)
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)
    request = (
        f"GET /v1/sessions/ses_healthy HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {handle.api_key}\r\n\r\n"
    ).encode()
    idle.sendall(request)
    answer = _read_response(idle)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"}")
    started = time.monotonic()
    handle.stop()
    handle.stop()  # idempotent
    assert time.monotonic() - started < 3
    idle.settimeout(3)
    assert idle.recv(1024) == b""  # the server closed the idle keep-alive connection
    idle.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_stalled_request_is_dropped_after_the_request_timeout(
    sandbox_factory: Callable[..., SandboxHandle],
) -> None:
    handle = sandbox_factory(scenarios=["healthy"], request_timeout=0.5)
    stalled = socket.create_connection(("127.0.0.1", _port(handle)), timeout=5)
    stalled.sendall(b"GET /v1/sessions/ses_healthy HTTP/1.1\r\nHost: x\r\n")  # never finishes the headers
    started = time.monotonic()
    assert stalled.recv(1024) == b""
    assert 0.3 < time.monotonic() - started < 4
    stalled.close()
    api = SandboxApi(handle.url, handle.api_key)
    try:
        assert api.get("/v1/sessions/ses_healthy").status_code == 200  # the server is still fine
    finally:
        api.close()


def test_oversized_body_is_refused(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    response = sandbox_api.client.post(
        "/v1/sessions/ses_healthy/resume",
        content=b"x" * ((1 << 20) + 1),
        headers={"Idempotency-Key": "big", "Content-Type": "application/json"},
    )
    assert response.status_code == 413


def test_context_manager_stops(clock: ManualClock) -> None:
    with start_sandbox(scenarios=None, clock=clock) as handle:
        port = _port(handle)
        assert handle.clock is clock
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_injected_manual_clock_drives_the_state_machine(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, clock: ManualClock
) -> None:
    """Moving the test's clock directly (not through the admin API) is what the sandbox sees."""
    assert sandbox.clock is clock
    clock.advance(20)
    assert sandbox.admin.now() == clock.now()
    assert "ses_restore_backoff" in sandbox.admin.scheduler_pass()["launched"]
    launched = sandbox_api.get("/v1/sessions/ses_restore_backoff/events").json()["events"][-1]
    assert launched["name"] == "generation_launched" and launched["at"] == isoformat(clock.now())


def test_a_clock_without_advance_is_wrapped_so_admin_can_move_time(
    sandbox_factory: Callable[..., SandboxHandle],
) -> None:
    handle = sandbox_factory(clock=SystemClock(), scenarios=["restore_backoff"])
    before = handle.admin.now()
    after = handle.admin.advance(3600)
    assert after - before >= timedelta(seconds=3600)
    assert "ses_restore_backoff" in handle.admin.scheduler_pass()["launched"]
    wrapped = AdjustableClock(ManualClock())
    start = wrapped.now()
    wrapped.advance(5)
    assert wrapped.now() - start == timedelta(seconds=5)


@pytest.mark.subprocess
def test_serve_forever_prints_url_never_the_key_and_stops_on_sigint() -> None:
    code = (
        "from bot.sandbox import serve_forever\n"
        "serve_forever('127.0.0.1', 0, api_key='demo-public-key-123', scenarios=['healthy'])\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("Sandbox control host listening on http://127.0.0.1:"), first
        url = first.split(" on ", 1)[1].strip()
        key_line = proc.stdout.readline()
        assert f"CONTROL_HOST_URL={url}" in key_line and "demo-public-key-123" not in key_line
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer demo-public-key-123"}) as client:
            assert client.get("/v1/sessions/ses_healthy").json()["status"] == "running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        rest = proc.stdout.read() + (proc.stderr.read() if proc.stderr else "")
        assert "demo-public-key-123" not in rest  # never echoed, start to finish
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
