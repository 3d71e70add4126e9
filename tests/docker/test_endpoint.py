"""Where an installation's Docker engine is: the value's own checks, read without connecting.

Schemes, ports, TLS files (all three, present, PEM, the key matching the certificate), plain tcp to
another machine refused unless allowed, ssh:// parsed and its missing transport said; each problem is
one line naming the host or the file. The real TLS engine is in tests/docker/test_remote_tls.py.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest

from bot.app.services import docker_endpoint
from bot.dockerops import DockerEndpoint, client_factory
from bot.dockerops._engine import connect
from bot.errors import DockerOpsError, SettingsError
from bot.settings import load_settings
from tests.docker.tls_engine import TlsCerts


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsCerts:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    return TlsCerts.make(tmp_path_factory.mktemp("certs"))


def tls(host: str, certs: TlsCerts, client: str = "client") -> DockerEndpoint:
    return DockerEndpoint(host, certs.path("ca"), certs.path(client), certs.key(client))


@pytest.mark.parametrize(
    "host", ["unix:///run/docker.sock", "tcp://127.0.0.1:2375", "tcp://localhost:2375", "tcp://[::1]:2375", None]
)
def test_local_engines_need_nothing_more(host: str | None) -> None:
    assert DockerEndpoint(host).problems() == []


@pytest.mark.parametrize("host", ["tcp://docker.eu-1:2375", "tcp://10.0.0.5:2375", "tcp://socket-proxy:2375"])
def test_plain_tcp_to_another_machine_is_refused_unless_allowed(host: str) -> None:
    problems = DockerEndpoint(host, origin="eu-1.yaml:7").problems()
    assert len(problems) == 1 and problems[0].startswith(f"docker_host {host!r} (eu-1.yaml:7) has no TLS")
    assert "tls_ca, tls_cert and tls_key" in problems[0] and "RECOVER_DOCKER_PLAIN_TCP=true" in problems[0]
    with pytest.raises(DockerOpsError, match="has no TLS and is another machine"):
        connect(client_factory(DockerEndpoint(host)))  # refused before any connection is tried
    assert DockerEndpoint(host, allow_plain_tcp=True).problems() == []


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("http://docker:2375", "use unix:///path/docker.sock, tcp://HOST:PORT"),
        ("docker.eu-1:2376", "use unix:///path/docker.sock"),
        ("tcp://docker.eu-1", "name the port"),
        ("tcp://docker.eu-1:http", "the port is not a number"),
        ("tcp://docker.eu-1:2376/v1.41", "no path after the host"),
        ("unix://", "needs the socket's path"),
        ("tcp://:2376", "no host name"),
    ],
)
def test_malformed_hosts_are_named(host: str, says: str) -> None:
    problems = DockerEndpoint(host).problems()
    assert problems and says in problems[0] and repr(host) in problems[0]


def test_tls_needs_all_three_files(certs: TlsCerts) -> None:
    only_ca = DockerEndpoint("tcp://docker.eu-1:2376", tls_ca=certs.path("ca"))
    assert "missing tls_cert, tls_key" in only_ca.problems()[0]
    no_ca = DockerEndpoint("tcp://docker.eu-1:2376", tls_cert=certs.path("client"), tls_key=certs.key("client"))
    assert "missing tls_ca" in no_ca.problems()[0]


def test_tls_files_are_named_when_missing_unreadable_or_not_pem(certs: TlsCerts, tmp_path: Path) -> None:
    gone = tmp_path / "gone.pem"
    ep = DockerEndpoint("tcp://docker.eu-1:2376", gone, certs.path("client"), certs.key("client"))
    assert ep.problems() == [f"tls_ca {gone}: no such file"]
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    ep = DockerEndpoint("tcp://docker.eu-1:2376", junk, certs.path("client"), certs.key("client"))
    assert ep.problems()[0].startswith(f"tls_ca {junk}: not a PEM CA certificate")
    # A key that is not the certificate's: the pair is named.
    ep = DockerEndpoint("tcp://docker.eu-1:2376", certs.path("ca"), certs.path("client"), certs.key("other-client"))
    assert ep.problems()[0].startswith(f"tls_cert {certs.path('client')} / tls_key {certs.key('other-client')}")
    with pytest.raises(DockerOpsError, match="not a PEM certificate and its matching key"):
        ep.check()


def test_good_tls_files_pass_for_a_remote_host(certs: TlsCerts) -> None:
    assert tls("tcp://docker.eu-1:2376", certs).problems() == []


@pytest.mark.parametrize("host", ["unix:///run/docker.sock", "ssh://ops@docker.eu-1"])
def test_tls_files_on_a_scheme_that_cannot_use_them_are_refused(host: str, certs: TlsCerts) -> None:
    assert any("TLS files apply to tcp:// only" in p for p in tls(host, certs).problems())


def test_ssh_is_parsed_and_its_transport_checked() -> None:
    problems = DockerEndpoint("ssh://ops@docker.eu-1:2222").problems()
    has_paramiko = importlib.util.find_spec("paramiko") is not None
    assert any("pip install 'docker[ssh]'" in p for p in problems) is not has_paramiko
    assert any("ssh client" in p for p in problems) is (shutil.which("ssh") is None)
    assert "no host name" in DockerEndpoint("ssh://ops@:22").problems()[0]


def test_docker_cert_path_is_the_clis_folder(tmp_path: Path) -> None:
    ep = DockerEndpoint.from_environment("tcp://docker.eu-1:2376", tls_verify=True, cert_path=tmp_path)
    assert (ep.tls_ca, ep.tls_cert, ep.tls_key) == (tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem")
    assert ep.problems() == [
        f"tls_ca {tmp_path / 'ca.pem'} (DOCKER_CERT_PATH): no such file",
        f"tls_cert {tmp_path / 'cert.pem'} (DOCKER_CERT_PATH): no such file",
        f"tls_key {tmp_path / 'key.pem'} (DOCKER_CERT_PATH): no such file",
    ]
    home = DockerEndpoint.from_environment("tcp://docker.eu-1:2376", tls_verify=True)
    assert home.tls_ca == Path.home() / ".docker" / "ca.pem"
    # A unix socket ignores the TLS variables, as the docker CLI does; no TLS: DOCKER_HOST as given.
    assert not DockerEndpoint.from_environment("unix:///run/d.sock", tls_verify=True, cert_path=tmp_path).tls
    plain = DockerEndpoint.from_environment("tcp://socket-proxy:2375", allow_plain_tcp=True)
    assert plain.problems() == [] and plain.origin == "DOCKER_HOST"


def test_tls_files_given_as_text_are_paths(certs: TlsCerts) -> None:
    text: Any = (str(certs.path("ca")), str(certs.path("client")), str(certs.key("client")))  # as YAML gives them
    ep = DockerEndpoint("tcp://docker.eu-1:2376", *text)
    assert ep.tls_ca == certs.path("ca") and ep.problems() == []


def test_the_settings_give_the_single_installation_its_endpoint(tmp_path: Path) -> None:
    s = load_settings(
        {"DOCKER_HOST": "tcp://docker.eu-1:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path)},
        dotenv=None,
    )
    ep = docker_endpoint(s)
    assert ep.tls_ca == tmp_path / "ca.pem" and not ep.allow_plain_tcp
    assert load_settings({"RECOVER_DOCKER_PLAIN_TCP": "true"}, dotenv=None).docker_plain_tcp
    assert not load_settings({}, dotenv=None).docker_tls_verify
    with pytest.raises(SettingsError, match="RECOVER_DOCKER_PLAIN_TCP must be true or false"):
        load_settings({"RECOVER_DOCKER_PLAIN_TCP": "maybe"}, dotenv=None)
