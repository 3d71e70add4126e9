"""The socket-proxy allowlist against the Docker API calls the bot really makes.

``test_record_the_bots_api_calls_behind_the_allowlist`` runs every Docker operation of the bot through
a recording proxy that enforces deploy/docker-compose.yml's -allow flags (as wollomatic/socket-proxy
reads them: ``^pattern$`` per method) against the real engine, and saves what it saw as
tests/docker/recorded_api_paths.json. The static tests check both ways that the compose flags admit
every recorded call and nothing the bot never calls (a rule no call needs; archive or exec beyond this
installation's reconciler; container create, image pull and friends), that the flags are exactly the
rendering of deploy/socket-proxy/allowlist.yaml (the one source), and that the check catches a needed
rule removed or an unneeded one added.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest
import yaml

from bot.clock import ManualClock
from bot.dockerops import (
    DockerLogSource,
    DockerOps,
    ReconcilerConfig,
    WorkerStop,
    WorkerStopFollower,
    client_factory,
)
from bot.dockerops.allowlist import COMPOSE_PROJECT, DEFAULT_FILE, compose_flags, denied, load_allowlist
from bot.errors import DockerOpsError
from bot.store import Store
from tests.docker.recording_proxy import RecordingProxy
from tests.fixtures.docker import PROJECT_LABEL, DockerEngine, ReconcilerContainer, WorkerSet

RECORDED = Path(__file__).resolve().parent / "recorded_api_paths.json"
COMPOSE = DEFAULT_FILE.parents[1] / "docker-compose.yml"
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
        "GET /events",
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


@pytest.mark.subprocess
def test_rendered_settings_follow_the_file() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bot.dockerops.allowlist", "--project", "prod", "--format", "env"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))
    assert set(env) == {"SP_ALLOW_GET", "SP_ALLOW_POST"}  # no HEAD, PUT or DELETE
    post = env["SP_ALLOW_POST"].strip("'")
    assert re.fullmatch(post, "/v1.41/containers/prod-reconciler-1/exec")
    assert not re.fullmatch(post, "/v1.41/containers/create")
    assert not re.fullmatch(post, "/v1.41/containers/staging-reconciler-1/exec")
    example = (DEFAULT_FILE.parent / "socket-proxy.env.example").read_text()
    assert example == load_allowlist("example").render_env()


# -- the compose flags, both ways against the recorded calls ------------------------------------------------

ALLOW_FLAG = re.compile(r"-allow([A-Z]+)=(.*)", re.S)
RECONCILER = r"{project}-reconciler-[0-9]+"
# Names the bot never execs in or reads files from: a worker, another service, another installation's
# reconciler, a container id, look-alikes of the reconciler's name.
NOT_THE_RECONCILER = (
    "{project}-worker-1",
    "db-1",
    "other-reconciler-1",
    "a" * 64,
    "{project}-reconciler-1x",
    "x{project}-reconciler-1",
)
CONTAINER_CALL = re.compile(r"(?P<v>/v1\.[0-9]+)?/containers/(?P<name>[^/]+)/(?P<op>[a-z]+)")


def compose_allow_flags(compose_text: str | None = None) -> list[str]:
    """The socket proxy's -allow<METHOD>= flags in deploy/docker-compose.yml, in order."""
    data = yaml.safe_load(compose_text if compose_text is not None else COMPOSE.read_text())
    return [f for f in data["services"]["socket-proxy"]["command"] if ALLOW_FLAG.fullmatch(str(f))]


def proxy_rules(flags: list[str], project: str) -> dict[str, list[re.Pattern[str]]]:
    """What socket-proxy compiles: ``^`` + pattern + ``$`` per method (several flags: any of them)."""
    rules: dict[str, list[re.Pattern[str]]] = {}
    for flag in flags:
        match = ALLOW_FLAG.fullmatch(flag)
        assert match, flag
        pattern = match.group(2).replace(COMPOSE_PROJECT, project)
        rules.setdefault(match.group(1), []).append(re.compile("^" + pattern + "$"))
    return rules


def admits(rules: dict[str, list[re.Pattern[str]]], method: str, path: str) -> bool:
    return any(r.match(path.split("?", 1)[0]) for r in rules.get(method, ()))


def branches(pattern: str) -> list[str]:
    """The top-level alternatives of ``(a|b|c)`` (a pattern without one is its own single branch)."""
    if not (pattern.startswith("(") and _closing(pattern, 0) == len(pattern) - 1):
        return [pattern]
    inner, out, depth, start = pattern[1:-1], [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "\\":
            continue
        if ch == "(" and (i == 0 or inner[i - 1] != "\\"):
            depth += 1
        elif ch == ")" and inner[i - 1] != "\\":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(inner[start:i])
            start = i + 1
    return [*out, inner[start:]]


def _closing(text: str, at: int) -> int:
    depth = 0
    for i in range(at, len(text)):
        if text[i] == "(" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif text[i] == ")" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return i
    return -1


def allowlist_findings(flags: list[str], project: str, calls: list[tuple[str, str]]) -> list[str]:
    """Everything wrong between the proxy flags and the calls the bot made, both ways (empty: in step)."""
    rules = proxy_rules(flags, project)
    findings = [f"refuses {m} {p}, which the bot calls" for m, p in calls if not admits(rules, m, p)]
    # Every rule is needed: each alternative of each flag matches some recorded call.
    for flag in flags:
        match = ALLOW_FLAG.fullmatch(flag)
        assert match
        method = match.group(1)
        for branch in branches(match.group(2).replace(COMPOSE_PROJECT, project)):
            rule = re.compile("^" + branch + "$")
            if not any(m == method and rule.match(p) for m, p in calls):
                findings.append(f"admits {method} {branch}, which no recorded call needs")
    # A container call the bot makes on the reconciler only is admitted on the reconciler only.
    names: dict[tuple[str, str], set[str]] = {}
    for m, p in calls:
        if c := CONTAINER_CALL.fullmatch(p):
            names.setdefault((m, c.group("op")), set()).add(c.group("name"))
    reconciler = re.compile(RECONCILER.format(project=project))
    for (method, op), seen in sorted(names.items()):
        if all(reconciler.fullmatch(n) for n in seen):
            for other in NOT_THE_RECONCILER:
                probe = f"/v1.41/containers/{other.format(project=project)}/{op}"
                if admits(rules, method, probe):
                    findings.append(f"admits {method} {probe}: the bot does {op} on the reconciler only")
    forbidden = [(m, p.replace(RECORD_PROJECT, project)) for m, p in FORBIDDEN]
    findings += [f"admits {m} {p}, which the bot must never do" for m, p in forbidden if admits(rules, m, p)]
    return findings


@pytest.mark.subprocess
def test_compose_flags_are_the_rendered_allowlist() -> None:
    # One source: deploy/socket-proxy/allowlist.yaml; compose carries its rendering, verbatim.
    assert compose_allow_flags() == compose_flags()
    out = subprocess.run(
        [sys.executable, "-m", "bot.dockerops.allowlist", "--format", "compose"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [line.strip().removeprefix("- ").strip("'") for line in out.splitlines()] == compose_flags()


def test_compose_flags_and_recorded_calls_agree_both_ways() -> None:
    project, calls = recorded_calls()
    assert allowlist_findings(compose_allow_flags(), project, calls) == []


def _needed_branches() -> list[tuple[str, str]]:
    out = []
    for flag in compose_flags():
        match = ALLOW_FLAG.fullmatch(flag)
        assert match
        out += [(match.group(1), b) for b in branches(match.group(2))]
    return out


def _without(flags: list[str], method: str, branch: str) -> list[str]:
    out = []
    for flag in flags:
        match = ALLOW_FLAG.fullmatch(flag)
        assert match
        if match.group(1) != method:
            out.append(flag)
            continue
        kept = [b for b in branches(match.group(2)) if b != branch]
        if kept:
            out.append(f"-allow{method}=" + (kept[0] if len(kept) == 1 else "(" + "|".join(kept) + ")"))
    return out


@pytest.mark.parametrize(("method", "branch"), _needed_branches(), ids=lambda x: x[-40:])
def test_removing_a_needed_rule_is_caught(method: str, branch: str) -> None:
    project, calls = recorded_calls()
    mutated = _without(compose_allow_flags(), method, branch)
    assert mutated != compose_allow_flags()
    findings = allowlist_findings(mutated, project, calls)
    assert findings and all(f.startswith("refuses ") for f in findings), findings


V = r"(/v1\.[0-9]{1,3})?"
NAME = r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}"
UNNEEDED = [
    ("GET", f"{V}/containers/{NAME}/archive"),  # any file of any container
    ("POST", f"{V}/containers/{NAME}/exec"),  # exec anywhere
    ("POST", f"{V}/containers/create"),
    ("POST", f"{V}/images/create"),
    ("GET", f"{V}/_ping"),  # harmless, but no call needs it
    ("HEAD", f"{V}/_ping"),
    ("GET", f"{V}/system/df"),
    ("PUT", f"{V}/containers/{NAME}/archive"),
    ("DELETE", ".*"),
    ("POST", f"{V}/containers/[a-z0-9_-]+-reconciler-[0-9]+/exec"),  # any installation's reconciler
]


@pytest.mark.parametrize(("method", "branch"), UNNEEDED, ids=lambda x: x[-40:])
def test_adding_an_unneeded_rule_is_caught(method: str, branch: str) -> None:
    project, calls = recorded_calls()
    mutated = [*compose_allow_flags(), f"-allow{method}={branch}"]
    findings = allowlist_findings(mutated, project, calls)
    assert findings and all(f.startswith("admits ") for f in findings), findings


def test_the_proxy_readme_table_is_the_allowlist() -> None:
    raw = yaml.safe_load(DEFAULT_FILE.read_text())["allow"]
    listed = {(m, p.removeprefix("{v}")) for m, items in raw.items() for p in items}
    readme = (DEFAULT_FILE.parent / "README.md").read_text()
    rows = set(re.findall(r"^\| (GET|HEAD|POST|PUT|DELETE) \| `([^`]+)` \|", readme, re.M))
    assert rows == listed


def test_the_proxy_runs_as_a_stated_user_with_the_sockets_group_and_the_bot_waits_for_it() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    proxy = services["socket-proxy"]
    # The image's own USER (65534:65534): stated, never root, and given the socket's group.
    assert proxy["user"] == "65534:65534"
    assert [str(g) for g in proxy["group_add"]] == [
        "${DOCKER_GID:?set DOCKER_GID: the group id of /var/run/docker.sock (stat -c %g /var/run/docker.sock)}"
    ]
    assert "-allowhealthcheck" in proxy["command"]
    assert proxy["healthcheck"]["test"] == ["CMD", "./healthcheck"]
    assert services["recover-bot"]["depends_on"]["socket-proxy"] == {"condition": "service_healthy"}
    assert re.fullmatch(r"wollomatic/socket-proxy:\d+\.\d+\.\d+(@sha256:[a-f0-9]{64})?", proxy["image"])


# Every public method of the two classes that talk to Docker, and whether the live recording runs it.
# A new Docker operation fails this test until the recording below runs it (or it is named as local).
EXERCISED = {
    "DockerOps": {"dryrun", "reconcile", "status", "preflight", "last_pass_lines", "find_reconciler"},
    "DockerLogSource": {"lines_for_session", "segments_for_session"},
    "WorkerStopFollower": {"start", "follow_once"},
}
LOCAL_ONLY = {  # no Docker call: records in SQLite, descriptions
    "DockerOps": {"get_dryrun", "get_pass", "passes_for"},
    "DockerLogSource": {"describe"},
    "WorkerStopFollower": {"filters", "stop"},
}
#: Run inside another exercised call: find_reconciler in every ops call, follow_once in start's loop.
INSIDE = {"find_reconciler", "follow_once"}


@pytest.mark.parametrize("cls", [DockerOps, DockerLogSource, WorkerStopFollower], ids=lambda c: c.__name__)
def test_the_recording_runs_every_docker_operation(cls: type) -> None:
    public = {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    assert public == EXERCISED[cls.__name__] | LOCAL_ONLY[cls.__name__]
    source = Path(__file__).read_text().split("def test_record_the_bots_api_calls_behind_the_allowlist", 1)[1]
    for name in EXERCISED[cls.__name__] - INSIDE:
        assert f".{name}(" in source, f"{cls.__name__}.{name} is not run behind the recording proxy"


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
    rules = proxy_rules(compose_allow_flags(), RECORD_PROJECT)  # the deployed flags, as socket-proxy reads them
    proxy = RecordingProxy(docker_engine.host.removeprefix("unix://"), allow=lambda m, p: admits(rules, m, p))
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
        completed, _ = ops.last_pass_lines()
        assert completed is not None
        source = DockerLogSource(installation=RECORD_PROJECT, docker_client_factory=factory)
        lines = list(source.lines_for_session(ws.session_id, since=datetime(2000, 1, 1, tzinfo=UTC)))
        assert len(lines) == len(ws.expected_lines)
        segments = list(source.segments_for_session(ws.session_id, since=datetime(2000, 1, 1, tzinfo=UTC)))
        assert segments
        # Watch mode's trigger: a worker's stop reaches the follower through the proxy.
        stops: list[WorkerStop] = []
        seen = threading.Event()
        follower = WorkerStopFollower(factory, RECORD_PROJECT, on_stop=lambda s: (stops.append(s), seen.set()))
        follower.start()
        try:
            assert follower.connected.wait(10)
            worker = docker_engine.client.containers.run(
                docker_engine.worker_image,
                ["sleep", "60"],
                name=f"{RECORD_PROJECT}-worker-90",
                detach=True,
                network_mode="none",
                labels={"recover-bot-test": "1", PROJECT_LABEL: RECORD_PROJECT, "com.docker.compose.service": "worker"},
            )
            worker.kill()
            assert seen.wait(10) and stops[0].name == f"{RECORD_PROJECT}-worker-90"
        finally:
            follower.stop()
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
        assert docker_engine.client.api.containers(all=True, filters={"name": f"{RECORD_PROJECT}-evil-1"}) == []

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
    calls = [(c["method"], c["path"]) for c in payload["calls"]]
    assert allowlist_findings(compose_allow_flags(), RECORD_PROJECT, calls) == []
