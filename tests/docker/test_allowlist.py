"""The socket-proxy allowlist against the Docker API calls the bot really makes.

``test_record_the_bots_api_calls_behind_the_allowlist`` runs every Docker operation of the bot through
a proxy that enforces deploy/socket-proxy/allowlist.yaml against the real engine and saves what it saw
as tests/docker/recorded_api_paths.json; the static tests check that file against the allowlist, and
that container create, image pull and friends are refused.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest

from bot.clock import ManualClock
from bot.dockerops import DockerLogSource, DockerOps, ReconcilerConfig, client_factory
from bot.dockerops.allowlist import DEFAULT_FILE, denied, load_allowlist
from bot.errors import DockerOpsError
from bot.store import Store
from tests.docker.recording_proxy import RecordingProxy
from tests.fixtures.docker import PROJECT_LABEL, DockerEngine, ReconcilerContainer, WorkerSet

RECORDED = Path(__file__).resolve().parent / "recorded_api_paths.json"
RECORD_PROJECT = "rbtrecorded"
HEX_ID = re.compile(r"[a-f0-9]{64}")
EXEC_ID = "e" * 64

# Calls the bot must never be able to make, for the recorded installation.
FORBIDDEN = [
    ("POST", "/v1.41/containers/create"),
    ("POST", "/containers/create"),
    ("POST", "/v1.41/images/create"),  # docker pull
    ("POST", "/v1.41/build"),
    ("POST", "/v1.41/images/load"),
    ("POST", f"/v1.41/containers/{RECORD_PROJECT}-worker-1/exec"),  # exec anywhere but the reconciler
    ("POST", "/v1.41/containers/other-reconciler-1/exec"),  # another installation's reconciler
    ("POST", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1x/exec"),
    ("POST", f"/v1.41/containers/{'a' * 64}/exec"),  # by id: never
    ("POST", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1/start"),
    ("POST", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1/stop"),
    ("POST", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1/kill"),
    ("POST", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1/update"),
    ("DELETE", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1"),
    ("PUT", f"/v1.41/containers/{RECORD_PROJECT}-reconciler-1/archive"),  # write files
    ("GET", f"/v1.41/containers/{RECORD_PROJECT}-worker-1/archive"),  # read files elsewhere
    ("GET", "/v1.41/containers/db-1/archive"),
    ("POST", f"/v1.41/exec/{EXEC_ID}/resize"),
    ("POST", "/v1.41/volumes/create"),
    ("POST", "/v1.41/networks/create"),
    ("GET", "/v1.41/events"),
    ("POST", "/v1.41/swarm/init"),
    ("POST", "/v1.41/containers/prune"),
]


def normalise(calls: list[tuple[str, str]]) -> list[dict[str, str]]:
    """Sorted, unique; exec/container ids made stable so the file only changes when the calls do."""
    seen = {(m, HEX_ID.sub(EXEC_ID, p)) for m, p in calls}
    return [{"method": m, "path": p} for m, p in sorted(seen)]


# -- static: the recorded file against the allowlist (no Docker needed) -----------------------------------


def recorded_calls() -> tuple[str, list[tuple[str, str]]]:
    data = json.loads(RECORDED.read_text())
    return data["project"], [(c["method"], c["path"]) for c in data["calls"]]


def test_every_recorded_call_is_allowed() -> None:
    project, calls = recorded_calls()
    allowlist = load_allowlist(project)
    assert calls, "no recorded calls: run the docker tests to record them"
    assert denied(allowlist, calls) == []


def test_the_recording_covers_every_operation() -> None:
    project, calls = recorded_calls()
    version = re.compile(r"^/v1\.[0-9]+")
    as_text = {f"{m} {version.sub('', p)}" for m, p in calls}
    for expected in (
        f"POST /containers/{project}-reconciler-1/exec",
        f"POST /exec/{EXEC_ID}/start",
        f"GET /exec/{EXEC_ID}/json",
        f"GET /containers/{project}-reconciler-1/archive",
        f"GET /containers/{project}-reconciler-1/logs",
        f"GET /containers/{project}-worker-1/logs",
        "GET /containers/json",
        "GET /version",
        "GET /info",
    ):
        assert expected in as_text, expected


@pytest.mark.parametrize(("method", "path"), FORBIDDEN)
def test_dangerous_calls_are_not_allowed(method: str, path: str) -> None:
    assert not load_allowlist(RECORD_PROJECT).allows(method, path)


def test_query_strings_do_not_change_the_decision() -> None:
    allowlist = load_allowlist(RECORD_PROJECT)
    assert allowlist.allows("GET", "/v1.41/containers/json?all=1&filters=%7B%7D")
    assert not allowlist.allows("POST", "/v1.41/images/create?fromImage=busybox&tag=latest")
    assert not allowlist.allows("POST", f"/v1.41/containers/create?name={RECORD_PROJECT}-reconciler-1")


def test_rendered_settings_follow_the_file() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bot.dockerops.allowlist", "--project", "prod", "--format", "env"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))
    assert set(env) == {"SP_ALLOW_GET", "SP_ALLOW_HEAD", "SP_ALLOW_POST"}  # no PUT, no DELETE
    post = env["SP_ALLOW_POST"].strip("'")
    assert re.fullmatch(post, "/v1.41/containers/prod-reconciler-1/exec")
    assert not re.fullmatch(post, "/v1.41/containers/create")
    assert not re.fullmatch(post, "/v1.41/containers/staging-reconciler-1/exec")
    example = (DEFAULT_FILE.parent / "socket-proxy.env.example").read_text()
    assert example == load_allowlist("example").render_env()


def test_a_project_name_cannot_widen_the_allowlist() -> None:
    for bad in (".*", "a|b", "prod)|(.*", "Prod"):
        with pytest.raises(ValueError, match="not a compose project name"):
            load_allowlist(bad)


# -- live: the bot behind the allowlist, against the real engine ------------------------------------------


@pytest.mark.docker
def test_record_the_bots_api_calls_behind_the_allowlist(
    docker_engine: DockerEngine,
    store: Store,
    clock: ManualClock,
    reconciler_factory: Callable[..., ReconcilerContainer],
    worker_containers: Callable[..., WorkerSet],
) -> None:
    if not docker_engine.host.startswith("unix://"):
        pytest.skip("the recording proxy forwards to a unix socket engine")
    docker_engine.remove_labelled(**{PROJECT_LABEL: RECORD_PROJECT})  # a stale run's leftovers
    rc = reconciler_factory(RECORD_PROJECT)
    ws = worker_containers("unknown_unanswered", project=RECORD_PROJECT, other_sessions=0)
    allowlist = load_allowlist(RECORD_PROJECT)
    proxy = RecordingProxy(docker_engine.host.removeprefix("unix://"), allow=allowlist.allows)
    try:
        factory = client_factory(proxy.url)
        ops = DockerOps(
            store,
            installation=RECORD_PROJECT,
            config=ReconcilerConfig(exec_timeout_seconds=60),
            docker_client_factory=factory,
            clock=clock,
        )
        dry = ops.dryrun("U_ALICE")
        assert dry.ok, dry.messages[0].plain_text()
        assert ops.reconcile("U_ALICE", dry.messages[0].ref or "").ok
        status = ops.status().messages[0]
        assert '"result":"completed"' in "\n".join(status.lines)
        assert ops.preflight(20, []).ok
        source = DockerLogSource(installation=RECORD_PROJECT, docker_client_factory=factory)
        lines = list(source.lines_for_session(ws.session_id, since=datetime(2000, 1, 1, tzinfo=UTC)))
        assert len(lines) == len(ws.expected_lines)
        assert all(c.allowed for c in proxy.calls), [c for c in proxy.calls if not c.allowed]
        recorded = proxy.recorded()

        # The same proxy refuses what the bot must never do, and the engine never sees it.
        raw = docker.DockerClient(base_url=proxy.url, version="1.41")
        with pytest.raises(docker.errors.APIError) as refused:
            raw.containers.create(docker_engine.reconciler_image, name=f"{RECORD_PROJECT}-evil-1")
        assert refused.value.status_code == 403
        with pytest.raises(docker.errors.APIError) as refused:
            raw.images.pull("busybox", tag="latest")
        assert refused.value.status_code == 403
        with pytest.raises(docker.errors.APIError) as refused:
            raw.api.exec_create(ws.containers[-1], ["sh", "-c", "id"])
        assert refused.value.status_code == 403
        raw.close()
        assert (
            docker_engine.client.api.containers(all=True, filters={"name": f"{RECORD_PROJECT}-evil-1"}) == []
        )

        # A bot configured for another installation is refused exec by this proxy, with a clear message.
        other = reconciler_factory()
        other_ops = DockerOps(store, installation=other.project, docker_client_factory=factory, clock=clock)
        with pytest.raises(DockerOpsError, match="the Docker API refused it") as err:
            other_ops.dryrun("U_ALICE")
        assert "allowlist" in (err.value.hint or "")
    finally:
        proxy.stop()
    assert rc.name == f"{RECORD_PROJECT}-reconciler-1"
    payload = {
        "about": "Docker API calls recover-bot made against a real engine (tests/docker/test_allowlist.py)",
        "project": RECORD_PROJECT,
        "calls": normalise(recorded),
    }
    text = json.dumps(payload, indent=2) + "\n"
    if not RECORDED.exists() or RECORDED.read_text() != text:
        RECORDED.write_text(text)
    assert denied(allowlist, recorded) == []
