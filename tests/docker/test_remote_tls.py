"""A remote Docker engine over TLS, for real: a second dockerd started here with --tlsverify on
127.0.0.1, certificates made by openssl in the test, reached only through the bot's client factory.

The good certificates read a worker's logs and list the installation's containers; a client
certificate from another CA, a server certificate for another name, a CA that did not sign the
engine's certificate and no client certificate at all are each refused with one sentence naming the
file or host (never a traceback). One engine per module; it is stopped by its process group.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import docker
import docker.tls
import pytest
import requests

from bot.dockerops import DockerEndpoint, DockerLogSource, client_factory, reach
from bot.dockerops._engine import connect
from bot.errors import DockerOpsError
from tests.docker.images.build import build_images
from tests.docker.tls_engine import TlsCerts, TlsEngine
from tests.fixtures.docker import PROJECT_LABEL, SERVICE_LABEL, SESSION_LABEL, TEST_LABEL, put_file

pytestmark = [pytest.mark.docker, pytest.mark.subprocess]

PROJECT = "rbttls"
SESSION = "ses_tls_remote_1"


@pytest.fixture(scope="module")
def tls_engine() -> Iterator[TlsEngine]:
    for tool in ("dockerd", "openssl"):
        if shutil.which(tool) is None:
            pytest.skip(f"REMOTE TLS TEST SKIPPED: {tool} is not installed (apt-get install docker.io openssl)")
    folder = Path(tempfile.mkdtemp(prefix="rbt-tls-", dir="/tmp"))  # short: unix socket paths are capped
    try:
        engine = TlsEngine.start(folder, TlsCerts.make(folder / "certs"))  # stops itself if it fails
        try:
            yield engine
        finally:
            engine.stop()
            engine.release()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def worker(tls_engine: TlsEngine) -> str:
    """One exited worker of the installation on the TLS engine, with a line of SESSION in its log."""
    client = tls_engine.client()
    try:
        image = build_images(client).worker
        container = client.containers.create(
            image,
            name=f"{PROJECT}-worker-1",
            network_mode="none",
            labels={TEST_LABEL: "1", PROJECT_LABEL: PROJECT, SERVICE_LABEL: "worker", SESSION_LABEL: SESSION},
        )
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line = (
            f'{{"ts":"{now}","level":"error","event":"worker.turn.failed",'
            f'"session_id":"{SESSION}","turn_id":"turn_tls_1","message":"read over TLS"}}'
        )
        put_file(container, "/worker/log.txt", line + "\n")
        container.start()
        container.wait(timeout=60)
        return str(container.name)
    finally:
        client.close()


def test_the_factory_reads_worker_logs_and_lists_containers_over_tls(tls_engine: TlsEngine, worker: str) -> None:
    factory = client_factory(tls_engine.endpoint())
    source = DockerLogSource(installation=PROJECT, docker_client_factory=factory)
    lines = list(source.lines_for_session(SESSION, since=datetime(2000, 1, 1, tzinfo=UTC)))
    assert any("read over TLS" in line.text for line in lines), lines
    client = connect(factory)
    try:
        names = [c.name for c in client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={PROJECT}"})]
    finally:
        client.close()
    assert names == [worker]


def test_docker_cert_path_and_tls_verify_reach_the_engine_as_the_cli_reads_them(tls_engine: TlsEngine) -> None:
    folder = tls_engine.certs.cert_path_folder()
    endpoint = DockerEndpoint.from_environment(tls_engine.host, tls_verify=True, cert_path=folder)
    assert endpoint.tls_ca == folder / "ca.pem" and endpoint.tls_key == folder / "key.pem"
    client = connect(client_factory(endpoint))
    try:
        assert client.version()["ApiVersion"]
    finally:
        client.close()


def test_the_system_ca_variables_do_not_replace_the_installations_ca(
    tls_engine: TlsEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # requests would otherwise verify against REQUESTS_CA_BUNDLE and refuse the engine's own CA.
    system = tls_engine.certs.path("other-ca")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(system))
    monkeypatch.setenv("CURL_CA_BUNDLE", str(system))
    client = connect(client_factory(tls_engine.endpoint()))
    client.close()


def _refused(endpoint: DockerEndpoint) -> DockerOpsError:
    with pytest.raises(DockerOpsError) as err:
        connect(client_factory(endpoint, timeout=10))
    text = str(err.value)
    assert "Traceback" not in text and "HTTPSConnectionPool" not in text, text
    return err.value


def test_a_client_certificate_signed_by_another_ca_is_refused(tls_engine: TlsEngine) -> None:
    err = _refused(tls_engine.endpoint(client="other-client"))
    assert "did not accept the bot's client certificate" in err.message
    assert str(tls_engine.certs.path("other-client")) in err.message


def test_a_server_certificate_for_another_name_is_refused(tls_engine: TlsEngine) -> None:
    # The engine's certificate names 127.0.0.1 only; dialled as localhost it is not the host asked for.
    err = _refused(tls_engine.endpoint(host=f"tcp://localhost:{tls_engine.port}"))
    assert err.message == (
        f"The Docker engine at tcp://localhost:{tls_engine.port} presented a certificate that is not for 'localhost'."
    )


def test_an_engine_certificate_not_signed_by_the_installations_ca_is_refused(tls_engine: TlsEngine) -> None:
    err = _refused(tls_engine.endpoint(ca="other-ca"))
    assert "not signed by the CA in" in err.message and str(tls_engine.certs.path("other-ca")) in err.message


def test_no_client_certificate_is_refused_by_the_factory_and_by_the_engine(tls_engine: TlsEngine) -> None:
    certs = tls_engine.certs
    err = _refused(DockerEndpoint(tls_engine.host, tls_ca=certs.path("ca")))
    assert "missing tls_cert, tls_key" in err.message
    err = _refused(DockerEndpoint(tls_engine.host))  # loopback plain tcp is allowed: the engine says no
    assert err.message.startswith(f"The Docker engine at {tls_engine.host} speaks TLS")
    # The engine itself enforces it: a TLS client with the right CA but no certificate is cut off.
    raw = docker.DockerClient(
        base_url=tls_engine.host, version="1.41", tls=docker.tls.TLSConfig(ca_cert=str(certs.path("ca")), verify=True)
    )
    raw.api.trust_env = False
    with pytest.raises(requests.exceptions.SSLError, match="(?i)bad certificate|eof"):
        raw.version()
    raw.close()


def test_reach_says_the_engines_version_or_what_is_wrong(tls_engine: TlsEngine) -> None:
    assert reach(tls_engine.endpoint()).startswith("1.")
    with pytest.raises(DockerOpsError, match="did not accept the bot's client certificate"):
        reach(tls_engine.endpoint(client="other-client"))
