"""A hostile control host: answers that dribble a few bytes a second, and 300 MB answers.

The sandbox runs in its own process, so this process's threads and memory are the bot's alone: diagnose
must answer within the runbook's budget, the process's peak RSS must grow by less than 100 MB, and the
thread count must come back to its baseline once the work is over (no stuck work threads).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from bot.app.services import Services
from bot.clock import ManualClock
from bot.controlhost import ControlHostClient, ControlHostError, RequestPendingError, deadline_in
from bot.controlhost._deadline import DeadlineBackend, DeadlineTransport, deadline_transport
from bot.sandbox import SandboxAdmin, SandboxHandle
from bot.settings import Settings
from bot.store import Store
from bot.workpool import snapshot
from tests.fixtures.composing import composed
from tests.fixtures.controlhost import post_decision
from tests.fixtures.waiting import eventually

from .conftest import FAST

KEY = "hostile-test-key"
GETS = "/v1/sessions/*"
MB = 1024 * 1024


@pytest.fixture(scope="module")
def remote() -> Iterator[tuple[str, SandboxAdmin]]:
    """The sandbox control host in a child process (its threads and memory are not ours)."""
    code = f"from bot.sandbox import serve_forever; serve_forever('127.0.0.1', 0, api_key={KEY!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "listening on" in first, first
        url = first.rsplit(" ", 1)[-1].strip()
        admin = SandboxAdmin(url)
        yield url, admin
        admin.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def services(remote: tuple[str, SandboxAdmin], tmp_path: Path) -> Iterator[Services]:
    url, admin = remote
    admin.reset()
    settings = Settings(control_host_url=url, control_host_api_key=KEY, db_path=tmp_path / "hostile.db")
    built = composed(settings, startup=False).core()
    yield built
    built.client.close()
    admin.reset()


class PeakRss:
    """This process's peak resident memory while the block runs (VmHWM reset, plus 5 ms sampling)."""

    def __init__(self) -> None:
        self.baseline = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _field(name: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {name} in /proc/self/status")

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._field("VmRSS"))

    def __enter__(self) -> PeakRss:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self._hwm = True
        except OSError:
            self._hwm = False
        self.baseline = self.peak = self._field("VmRSS")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._hwm:
            self.peak = max(self.peak, self._field("VmHWM"))

    @property
    def growth(self) -> int:
        return self.peak - self.baseline


def _threads_back_to(baseline: int, within: float = 10.0) -> int:
    """The thread count once back to ``baseline``, or after ``within`` s: the caller's assertion names what is left."""
    with contextlib.suppress(pytest.fail.Exception):
        eventually(lambda: threading.active_count() <= baseline, within, f"threads back to {baseline}")
    return threading.active_count()


def _diagnose_all(services: Services, count: int) -> list[tuple[float, str]]:
    """``count`` diagnoses at once, as many commands arriving together; (seconds, text) each."""
    results: list[tuple[float, str]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        started = time.monotonic()
        reply = services.diagnoser.diagnose("ses_healthy", f"user{i}")
        text = "\n".join(m.plain_text() for m in reply.messages)
        with lock:
            results.append((time.monotonic() - started, text))

    workers = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert len(results) == count
    return results


@pytest.mark.subprocess
def test_a_dribbling_host_leaves_diagnose_within_its_budget_and_no_stuck_threads(
    services: Services, remote: tuple[str, SandboxAdmin]
) -> None:
    _, admin = remote
    budget = services.diagnoser.budget_seconds
    assert services.diagnoser.diagnose("ses_healthy", "warm-up")  # healthy first: the host works
    baseline = _threads_back_to(threading.active_count())
    admin.fault("dribble", GETS, method="GET", rate=4, seconds=600, times=None)
    with PeakRss() as rss:
        results = _diagnose_all(services, 20)
    for elapsed, text in results:
        assert elapsed <= budget + 1.0, (elapsed, text)
        assert "slow" in text.lower() or "did not answer" in text.lower(), text
    print(f"dribble: 20 diagnoses, slowest {max(e for e, _ in results):.2f}s, peak RSS +{rss.growth / MB:.1f} MB")
    assert rss.growth < 100 * MB, rss.growth
    pool = next(s for s in snapshot() if s["name"] == "diagnose")
    assert pool["max_workers"] >= pool["threads"]
    admin.clear_faults()
    # Every work thread ends: requests end by their deadline, idle pool workers exit.
    assert _threads_back_to(baseline) <= baseline, [t.name for t in threading.enumerate()]


@pytest.mark.subprocess
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_a_300_mb_answer_is_refused_while_it_streams(
    services: Services, remote: tuple[str, SandboxAdmin], declared: bool
) -> None:
    _, admin = remote
    baseline = _threads_back_to(threading.active_count())
    admin.fault("huge_body", GETS, method="GET", size=300_000_000, length=declared, times=None)
    with PeakRss() as rss:
        results = _diagnose_all(services, 8)  # 24 sources: every pool worker reads a huge answer at once
        started = time.monotonic()
        with pytest.raises(ControlHostError) as info:
            services.client.get_session("ses_healthy")
        assert time.monotonic() - started < 5.0
    assert info.value.code == "ANSWER_TOO_LARGE"
    assert "cap" in info.value.message
    for elapsed, _text in results:
        assert elapsed <= services.diagnoser.budget_seconds
    print(f"300 MB answers: slowest diagnose {max(e for e, _ in results):.2f}s, peak RSS +{rss.growth / MB:.1f} MB")
    assert rss.growth < 100 * MB, rss.growth
    admin.clear_faults()
    assert services.client.get_session("ses_healthy").status == "running"  # the host works again
    assert _threads_back_to(baseline) <= baseline


def test_the_deadline_is_total_not_per_read(sandbox_factory: Any, store: Store, clock: ManualClock) -> None:
    """httpx's read timeout alone never trips on a dribble; the request's total deadline does."""
    sbx: SandboxHandle = sandbox_factory(scenarios=["healthy"])
    sbx.admin.fault("dribble", "/v1/sessions/ses_healthy", rate=8, seconds=600, times=None)
    with ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=FAST, timeout=1.0) as client:
        started = time.monotonic()
        with pytest.raises(ControlHostError) as info:
            client.get_session("ses_healthy")
        # Four attempts of one second each (the retry sleeps are on the manual clock).
        assert 3.5 <= time.monotonic() - started < 6.0
        assert info.value.code == "TIMEOUT"
        started = time.monotonic()
        with deadline_in(1.5), pytest.raises(ControlHostError):
            client.get_session("ses_healthy")  # an outer deadline bounds the whole call
        assert time.monotonic() - started < 2.0


def test_a_huge_answer_to_a_post_keeps_the_request_pending_with_its_key(
    sandbox_factory: Any, store: Store, clock: ManualClock
) -> None:
    """The decision may have been applied: the outcome is uncertain, the same key is re-sent (R0.3)."""
    sbx: SandboxHandle = sandbox_factory(scenarios=["healthy"])
    sbx.admin.fault("huge_body", "/v1/sessions/*/recovery-decisions", size=50 * MB, times=1)
    with ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=FAST) as client:
        receipt = post_decision(
            client,
            "ses_healthy",
            {
                "decision": "close",
                "reason": "hostile test",
                "expected_revision": sbx.admin.session("ses_healthy")["revision"],
            },
        )
    assert receipt.status == "accepted"
    posts = [r for r in sbx.admin.requests("ses_healthy") if r["method"] == "POST"]
    assert len(posts) == 2 and posts[0]["idempotency_key"] == posts[1]["idempotency_key"]
    assert sbx.admin.effect_count("ses_healthy") == 1


def test_a_huge_answer_every_time_ends_pending_not_refused(
    sandbox_factory: Any, store: Store, clock: ManualClock
) -> None:
    sbx: SandboxHandle = sandbox_factory(scenarios=["healthy"])
    sbx.admin.fault("huge_body", "/v1/sessions/*/recovery-decisions", size=20 * MB, times=None)
    with ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=FAST) as client:
        with pytest.raises(RequestPendingError) as info:
            post_decision(
                client,
                "ses_healthy",
                {
                    "decision": "close",
                    "reason": "hostile test",
                    "expected_revision": sbx.admin.session("ses_healthy")["revision"],
                },
            )
        assert info.value.code == "ANSWER_TOO_LARGE"
        record = store.get_request(info.value.idempotency_key)
        assert record is not None and record.pending


def test_the_transport_gives_its_connections_the_deadline_backend() -> None:
    """The transport is built here, on an httpcore pool given the deadline backend as an argument
    (no dependency's private attribute is touched: tests/core/test_private_attributes.py)."""
    transport = deadline_transport("http://127.0.0.1:9")
    assert isinstance(transport, DeadlineTransport) and isinstance(transport.network_backend, DeadlineBackend)
    assert type(transport.pool) is httpcore.ConnectionPool
    transport.close()


def test_a_refused_connection_is_an_httpx_error_the_client_reads(store: Store) -> None:
    """httpcore's errors come out as httpx's, so the client's reading of them is unchanged."""
    with pytest.raises(httpx.ConnectError):
        httpx.Client(transport=deadline_transport("http://127.0.0.1:9")).get("http://127.0.0.1:9/v1/x")
    with (
        ControlHostClient("http://127.0.0.1:9", "k", store=store, retry=FAST) as client,
        pytest.raises(ControlHostError) as info,
    ):
        client.get_session("ses_healthy")
    assert info.value.code == "UNREACHABLE" and "ConnectError" in info.value.message, info.value.message


def test_the_environment_proxy_is_still_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passing our own transport turns off httpx's proxy lookup; the transport does it instead, with
    the standard library's reading of NO_PROXY."""
    from bot.controlhost._deadline import env_proxy

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "direct.internal, .corp")
    assert env_proxy("https://control.example.internal") == "http://proxy.internal:3128"
    assert env_proxy("https://direct.internal") is None
    assert env_proxy("https://api.corp") is None and env_proxy("https://notcorp") is not None
    assert env_proxy("http://control.example.internal") is None  # no HTTP_PROXY set
    transport = deadline_transport("https://control.example.internal")
    assert isinstance(transport.pool, httpcore.HTTPProxy) and isinstance(transport.network_backend, DeadlineBackend)
    monkeypatch.setenv("NO_PROXY", "*")
    assert env_proxy("https://control.example.internal") is None
