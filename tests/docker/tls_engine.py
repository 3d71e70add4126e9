"""A second, private dockerd that speaks only TLS on 127.0.0.1, with certificates made by openssl here.

``TlsCerts.make(folder)`` writes a CA, a server certificate for 127.0.0.1 and a client certificate
signed by it, plus a second CA with its own server and client certificates (what an attacker or a
wrong installation would hold). ``TlsEngine.start(folder, certs)`` runs dockerd with its own
--data-root, --exec-root, --pidfile and a short unix socket (for nothing but its own liveness), and
``--tlsverify`` on a free port; ``stop`` ends it (and its containerd) by its process group id, and a
test process that dies without stopping it takes it along (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from bot.dockerops import DockerEndpoint
from tests.fixtures.waiting import eventually


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key_and_csr(cwd: Path, stem: str, cn: str) -> None:
    _openssl(
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{stem}-key.pem",
        "-out",
        f"{stem}.csr",
        "-subj",
        f"/CN={cn}",
        cwd=cwd,
    )


def _ca(cwd: Path, stem: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{stem}-key.pem",
        "-out",
        f"{stem}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN={stem}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
        cwd=cwd,
    )


def _sign(cwd: Path, ca: str, stem: str, ext: str) -> None:
    (cwd / f"{stem}.ext").write_text(ext)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{stem}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}-key.pem",
        "-CAcreateserial",
        "-out",
        f"{stem}.pem",
        "-days",
        "2",
        "-extfile",
        f"{stem}.ext",
        cwd=cwd,
    )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass(frozen=True)
class TlsCerts:
    folder: Path

    @classmethod
    def make(cls, folder: Path) -> TlsCerts:
        folder.mkdir(parents=True, exist_ok=True)
        server_ext = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        client_ext = "extendedKeyUsage=clientAuth\n"
        for ca in ("ca", "other-ca"):
            _ca(folder, ca)
        for stem, cn, ca, ext in (
            ("server", "127.0.0.1", "ca", server_ext),
            ("client", "recover-bot", "ca", client_ext),
            ("other-client", "recover-bot", "other-ca", client_ext),
        ):
            _key_and_csr(folder, stem, cn)
            _sign(folder, ca, stem, ext)
        return cls(folder)

    def path(self, stem: str) -> Path:
        return self.folder / f"{stem}.pem"

    def key(self, stem: str) -> Path:
        return self.folder / f"{stem}-key.pem"

    def cert_path_folder(self, client: str = "client", ca: str = "ca") -> Path:
        """A DOCKER_CERT_PATH folder (ca.pem, cert.pem, key.pem) as the docker CLI expects it."""
        out = self.folder / f"certpath-{client}-{ca}"
        out.mkdir(exist_ok=True)
        shutil.copy(self.path(ca), out / "ca.pem")
        shutil.copy(self.path(client), out / "cert.pem")
        shutil.copy(self.key(client), out / "key.pem")
        return out


def _die_with_parent() -> None:
    """In the engine's child before exec: SIGTERM when the test process dies (even by SIGKILL), so a
    killed test run leaves no engine behind (prctl PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TlsEngine:
    folder: Path
    certs: TlsCerts
    port: int
    process: subprocess.Popen[bytes]

    @property
    def host(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.folder / "d.pid"

    def client(self, timeout: float = 60) -> docker.DockerClient:
        """The test's own client (good certificates), for setting up containers."""
        return self.endpoint().client(timeout)

    def endpoint(self, *, ca: str = "ca", client: str = "client", host: str | None = None) -> DockerEndpoint:
        c = self.certs
        return DockerEndpoint(host or self.host, c.path(ca), c.path(client), c.key(client))

    @classmethod
    def start(cls, folder: Path, certs: TlsCerts) -> TlsEngine:
        port = free_port()
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "exec").mkdir(exist_ok=True)
        log = (folder / "dockerd.log").open("wb")
        process = subprocess.Popen(
            [
                "dockerd",
                "--data-root",
                str(folder / "data"),
                "--exec-root",
                str(folder / "exec"),
                "--pidfile",
                str(folder / "d.pid"),
                "-H",
                f"unix://{folder / 'd.sock'}",
                "--bridge=none",
                "--iptables=false",
                "--tlsverify",
                "--tlscacert",
                str(certs.path("ca")),
                "--tlscert",
                str(certs.path("server")),
                "--tlskey",
                str(certs.key("server")),
                "-H",
                f"tcp://127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
        )
        engine = cls(folder, certs, port, process)

        def answers() -> bool:  # or ended: then nothing will answer
            if process.poll() is not None:
                return True
            with contextlib.closing(engine.client(timeout=5)) as c:
                c.ping()
            return True

        started = False
        with contextlib.suppress(pytest.fail.Exception):
            started = eventually(answers, 60, "the TLS dockerd to answer") and process.poll() is None
        if not started:
            engine.stop()
            tail = (folder / "dockerd.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the TLS dockerd did not start:\n{tail}")
        return engine

    def stop(self) -> None:
        """SIGTERM the engine's process group (dockerd and the containerd it started), then SIGKILL."""
        pgid = self.process.pid  # start_new_session: the group is the engine's own pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.process.wait(timeout=10)
        with contextlib.suppress(pytest.fail.Exception):  # containerd leaves after dockerd; the group must be empty
            eventually(lambda: not _group_alive(pgid), 10, "the engine's process group to empty")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def release(self) -> None:
        """After :meth:`stop`: a data root the engine left mounted (it bind-mounts it) is unmounted."""
        data = self.folder / "data"
        if os.path.ismount(data):
            subprocess.run(["umount", str(data)], capture_output=True, timeout=30)
