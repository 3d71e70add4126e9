"""The daemon preflight (R1.7, R2.17) and the engine being unreachable, unconfigured or forbidden."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.dockerops import DockerLogSource, DockerLogSourceError, DockerOps, client_factory
from bot.errors import DockerOpsError
from bot.store import Store
from tests.fixtures.docker import DockerEngine

ADVICE = [
    "Deploy order (R2.17): first the control-host image (API_IMAGE, shared by api and scheduler), then WORKER_IMAGE.",
]


def ops_for(store: Store, clock: ManualClock, factory, installation: str | None = "rbtx") -> DockerOps:  # type: ignore[no-untyped-def]
    return DockerOps(store, installation=installation, docker_client_factory=factory, clock=clock)


@pytest.mark.docker
def test_this_machines_daemon_fails_a_preflight_for_28_with_the_advice(
    docker_engine: DockerEngine, store: Store, clock: ManualClock
) -> None:
    version = docker_engine.client.version()["Version"]
    major = int(version.split(".")[0])
    assert major < 28, "this test expects the machine's Debian dockerd (20.10)"
    reply = ops_for(store, clock, docker_engine.factory()).preflight(28, ADVICE)
    msg = reply.messages[0]
    assert not reply.ok and msg.level == "error"
    assert msg.headline == f"Preflight failed: Docker daemon {version} is older than 28"
    assert dict(msg.facts)["Docker daemon"] == version
    assert dict(msg.facts)["API version"] == docker_engine.client.version()["ApiVersion"]
    text = "\n".join(msg.lines)
    assert "Upgrade the Docker daemon to 28 or newer first (R1.7)" in text
    assert "even existing workers cannot be replaced" in text
    assert ADVICE[0] in msg.lines
    assert msg.rules == ["R1.7", "R2.17"]


@pytest.mark.docker
def test_a_runbook_minimum_of_20_passes_on_this_daemon(
    docker_engine: DockerEngine, store: Store, clock: ManualClock
) -> None:
    reply = ops_for(store, clock, docker_engine.factory()).preflight(20, ADVICE)
    msg = reply.messages[0]
    assert reply.ok and msg.level == "ok"
    assert msg.headline.startswith("Preflight passed: Docker daemon 20.")
    assert ADVICE[0] in msg.lines


@pytest.fixture
def dead_socket(tmp_path: Path) -> Iterator[str]:
    """A socket file nobody listens on any more: what a stopped daemon leaves behind."""
    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    yield f"unix://{path}"


def test_a_stopped_daemon_gives_a_clear_error(store: Store, clock: ManualClock, dead_socket: str) -> None:
    ops = ops_for(store, clock, client_factory(dead_socket))
    for call in (lambda: ops.preflight(28, ADVICE), lambda: ops.dryrun("U_ALICE"), ops.status):
        with pytest.raises(DockerOpsError) as err:
            call()
        assert str(err.value).startswith(f"Cannot reach the Docker engine at {dead_socket}")
        assert "Connection refused" in str(err.value)
        assert "DOCKER_HOST" in (err.value.hint or "")
    # Nothing was recorded as a dry run: it never started.
    with store.read() as db:
        assert db.execute("SELECT count(*) FROM dryruns").fetchone() == (0,)


def test_a_missing_socket_gives_a_clear_error(store: Store, clock: ManualClock, tmp_path: Path) -> None:
    host = f"unix://{tmp_path}/nothing-here.sock"
    ops = ops_for(store, clock, client_factory(host))
    with pytest.raises(DockerOpsError, match=f"Cannot reach the Docker engine at {host}"):
        ops.status()


def test_docker_not_configured_as_in_the_demo(
    store: Store, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr("bot.dockerops._engine.DEFAULT_SOCKET", str(tmp_path / "docker.sock"))
    monkeypatch.setattr("docker.utils.utils.DEFAULT_UNIX_SOCKET", f"http+unix://{tmp_path}/docker.sock")
    ops = DockerOps(store, installation="rbtx", clock=clock)  # the default factory: docker.from_env
    with pytest.raises(DockerOpsError, match="Docker is not configured for this bot: DOCKER_HOST is not set"):
        ops.preflight(28, ADVICE)
    source = DockerLogSource(installation="rbtx")
    with pytest.raises(DockerLogSourceError, match="Docker is not configured"):
        source.lines_for_session("ses_1", since=clock.now())


def test_installation_not_set_is_a_clear_error(store: Store, clock: ManualClock, dead_socket: str) -> None:
    ops = ops_for(store, clock, client_factory(dead_socket), installation=None)
    with pytest.raises(DockerOpsError, match="RECOVER_INSTALLATION is not set"):
        ops.dryrun("U_ALICE")
    bad = ops_for(store, clock, client_factory(dead_socket), installation="Prod; rm -rf /")
    with pytest.raises(DockerOpsError, match="is not a compose project name"):
        bad.status()


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv")
def test_permission_denied_on_the_socket(tmp_path: Path) -> None:
    """A socket the bot's process may not open (root without DAC override, mode 000) → one clear error."""
    path = tmp_path / "forbidden.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    os.chmod(path, 0)
    script = textwrap.dedent(
        f"""
        from bot.dockerops import DockerOps, client_factory
        from bot.errors import DockerOpsError
        from bot.app.services import MIGRATIONS
        from bot.store import Store
        ops = DockerOps(Store({str(tmp_path / "r.db")!r}, migrations=MIGRATIONS), installation="rbtx",
                        docker_client_factory=client_factory("unix://{path}"))
        try:
            ops.preflight(28, [])
        except DockerOpsError as exc:
            print(str(exc))
        """
    )
    try:
        done = subprocess.run(
            [
                "setpriv",
                "--bounding-set=-dac_override,-dac_read_search",
                "--inh-caps=-dac_override,-dac_read_search",
                sys.executable,
                "-c",
                script,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Permission denied on the Docker socket (unix://{path})."), done.stdout
    assert "socket proxy" in done.stdout and "root-equivalent" in done.stdout
