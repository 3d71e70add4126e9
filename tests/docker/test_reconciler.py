"""Reconciler dry run, reviewed real pass and status against a real Docker engine (runbook §1)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.clock import ManualClock
from bot.dockerops import DockerOps, ReconcilerConfig, ReconcileRefused
from bot.dockerops import migrations as docker_migrations
from bot.errors import DockerOpsError
from bot.store import Store
from tests.fixtures.docker import RECONCILER_ENV, DockerEngine, ReconcilerContainer
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.docker

INJECTIONS = ["; rm -rf /", "$(id)", "`id`", "a' && touch /tmp/pwned && echo 'b", "dry_abc; id", "dry_1\nid"]


def make_ops(engine: DockerEngine, store: Store, clock: ManualClock, project: str | None, **config: Any) -> DockerOps:
    cfg = ReconcilerConfig(exec_timeout_seconds=config.pop("exec_timeout_seconds", 60.0), **config)
    return DockerOps(store, installation=project, config=cfg, docker_client_factory=engine.factory(), clock=clock)


@pytest.fixture
def ops(docker_engine: DockerEngine, store: Store, clock: ManualClock, reconciler_container: ReconcilerContainer):
    return make_ops(docker_engine, store, clock, reconciler_container.project)


def printed_argv(output: str) -> list[str]:
    """The argv the test reconciler printed, one ``  [arg]`` line each (multi-line args joined)."""
    body = output.split("argv:\n", 1)[1].split("\nenv RECONCILER_DRY_RUN=", 1)[0]
    return re.findall(r"^  \[(.*?)\]$", body, flags=re.M | re.S)


def printed_env(output: str, name: str) -> str:
    m = re.search(rf"^env {name}=(.*)$", output, flags=re.M)
    assert m, output
    return m.group(1)


def exec_pass_lines(rc: ReconcilerContainer, mode: str) -> list[str]:
    """Pass lines in the container's log written by an exec'd pass (pid != 1: not the loop)."""
    return [
        ln for ln in rc.logs().splitlines() if "Reconciler pass" in ln and f"mode={mode}" in ln and "pid=1 " not in ln
    ]


def full_output(reply_text: str, dry: dict[str, Any] | None) -> str:
    return dry["output"] if dry else reply_text


# -- dry run ---------------------------------------------------------------------------------------


def test_dry_run_sets_true_keeps_the_containers_env_and_is_recorded(
    ops: DockerOps, reconciler_container: ReconcilerContainer, store: Store
) -> None:
    reply = ops.dryrun("U_ALICE")
    msg = reply.messages[0]
    assert reply.ok and msg.level == "ok"
    dry_id = msg.ref
    assert dry_id and re.match(r"^dry_[0-9a-f]{12}$", dry_id)
    row = ops.get_dryrun(dry_id)
    assert row is not None
    output = row["output"]
    # R1.1: the dry-run variable reaches the process; R1.3: the container's own env is kept.
    assert printed_env(output, "RECONCILER_DRY_RUN") == "true"
    assert printed_env(output, "DATABASE_URL") == RECONCILER_ENV["DATABASE_URL"]
    assert printed_env(output, "NODE_ENV") == RECONCILER_ENV["NODE_ENV"]
    assert printed_argv(output) == list(ops.config.argv)
    assert "pass mode=dry-run" in output
    # R1.1: the repeating reconciler (the container's main process) does not get the variable.
    assert "RECONCILER_DRY_RUN" not in reconciler_container.own_env()
    first_pass = reconciler_container.logs().split("pass mode=", 1)[0]
    assert "env RECONCILER_DRY_RUN=<unset>" in first_pass
    # The exec'd pass also shows in `docker logs` (written to /proc/1/fd/1).
    assert len(exec_pass_lines(reconciler_container, "dry-run")) == 1
    assert row["outcome"] == "succeeded" and row["exit_code"] == 0
    assert row["installation"] == reconciler_container.project
    assert row["container"] == reconciler_container.name == f"{reconciler_container.project}-reconciler-1"
    facts = dict(msg.facts)
    assert facts["Exit code"] == "0" and facts["Dry run"] == dry_id
    assert "RECONCILER_DRY_RUN=true" in facts["Environment"]
    (button,) = msg.buttons
    assert button.label == "Reviewed — run the real pass"
    assert (button.action, button.value) == ("reconcile_reviewed", dry_id)
    assert button.command == f"/recover reconcile --reviewed {dry_id}"
    steps = [s for s in store.steps() if s.step == "reconciler_dryrun"]
    assert len(steps) == 1 and steps[0].outcome == "succeeded" and steps[0].actor == "U_ALICE"
    assert steps[0].inputs["environment"] == {"RECONCILER_DRY_RUN": "true"}


def test_long_dry_run_output_is_summarised_and_attached_whole(
    ops: DockerOps, reconciler_container: ReconcilerContainer
) -> None:
    reconciler_container.put_file("/tmp/reconciler-targets", "400")
    msg = ops.dryrun("U_ALICE").messages[0]
    assert msg.attachment is not None
    full = msg.attachment.text
    assert full.count("would fence lease") == 400
    assert "lease_400 " in full and "lease_200 " in full
    shown = "\n".join(msg.lines)
    assert "more lines; the full output is attached" in shown
    assert shown.count("would fence lease") < 40
    assert msg.attachment.filename == f"{msg.ref}.txt"


def test_failed_dry_run_offers_no_button_and_cannot_be_used(
    ops: DockerOps, reconciler_container: ReconcilerContainer
) -> None:
    reconciler_container.put_file("/tmp/reconciler-fail", "database unreachable")
    reply = ops.dryrun("U_ALICE")
    msg = reply.messages[0]
    assert not reply.ok and msg.level == "error" and not msg.buttons
    assert dict(msg.facts)["Exit code"] == "1"
    row = ops.get_dryrun(msg.ref or "")
    assert row is not None and row["outcome"] == "failed" and row["exit_code"] == 1
    with pytest.raises(ReconcileRefused, match=r"failed \(exit 1\)"):
        ops.reconcile("U_ALICE", msg.ref or "")
    assert exec_pass_lines(reconciler_container, "real") == []
    assert ops.passes_for(msg.ref or "") == []


# -- real pass -------------------------------------------------------------------------------------


def test_a_named_installations_dry_run_carries_its_name_and_is_reviewed_by_that_id(
    docker_engine: DockerEngine, reconciler_container: ReconcilerContainer, tmp_path: Path, clock: ManualClock
) -> None:
    store = Store(tmp_path / "recover-eu-1.db", clock=clock, installation="eu-1", migrations=[docker_migrations])
    ops = make_ops(docker_engine, store, clock, reconciler_container.project)
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    assert re.match(r"^dry_[0-9a-f]{12}\.eu-1$", dry_id), dry_id
    reply = ops.reconcile("U_BOB", dry_id)  # the id as shown and typed
    assert reply.ok, reply.messages[0].headline
    assert {s.installation for s in store.steps()} == {"eu-1"}


def test_real_pass_after_reviewed_dry_run_gets_false_and_records_the_reviewer(
    ops: DockerOps, reconciler_container: ReconcilerContainer, store: Store, clock: ManualClock
) -> None:
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    clock.advance(600)  # reviewed 10 minutes later: still inside the 15-minute window
    reply = ops.reconcile("U_BOB", dry_id)
    msg = reply.messages[0]
    assert reply.ok and msg.level == "ok"
    pass_id = msg.ref or ""
    row = ops.get_pass(pass_id)
    assert row is not None
    output = row["output"]
    assert printed_env(output, "RECONCILER_DRY_RUN") == "false"  # R1.2
    assert printed_env(output, "DATABASE_URL") == RECONCILER_ENV["DATABASE_URL"]  # R1.3
    assert printed_argv(output) == list(ops.config.argv)
    assert "pass mode=real" in output
    assert len(exec_pass_lines(reconciler_container, "real")) == 1
    assert row["dryrun_id"] == dry_id and row["reviewed_by"] == "U_BOB" and row["outcome"] == "succeeded"
    dry = ops.get_dryrun(dry_id)
    assert dry is not None and dry["reviewed_by"] == "U_BOB"
    facts = dict(msg.facts)
    assert facts["Reviewed by"] == "U_BOB" and facts["Reviewed dry run"] == dry_id
    text = "\n".join(msg.lines)
    assert "R1.6" in text and "safe" in text  # running beside the loop is safe
    assert "R1.5" in text and "scheduler" in text
    names = [s.step for s in store.steps()]
    assert names == ["reconciler_dryrun", "reconciler_reviewed", "reconciler_pass"]
    reviewed = [s for s in store.steps() if s.step == "reconciler_reviewed"][0]
    assert reviewed.actor == "U_BOB" and reviewed.inputs["dryrun_id"] == dry_id


def test_the_person_who_ran_the_dry_run_may_review_it(
    ops: DockerOps, reconciler_container: ReconcilerContainer
) -> None:
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    reply = ops.reconcile("U_ALICE", dry_id)
    assert reply.ok
    assert ops.get_pass(reply.messages[0].ref or "")["reviewed_by"] == "U_ALICE"  # type: ignore[index]


def test_real_pass_refused_without_a_dry_run(ops: DockerOps, reconciler_container: ReconcilerContainer) -> None:
    with pytest.raises(ReconcileRefused, match="No dry run dry_0123456789ab"):
        ops.reconcile("U_ALICE", "dry_0123456789ab")
    assert exec_pass_lines(reconciler_container, "real") == []


def test_real_pass_refused_with_a_stale_dry_run(
    ops: DockerOps, reconciler_container: ReconcilerContainer, clock: ManualClock
) -> None:
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    clock.advance(ops.config.review_window_seconds + 1)
    with pytest.raises(ReconcileRefused, match=r"finished 15 min ago; a real pass needs one from the last 15 min"):
        ops.reconcile("U_ALICE", dry_id)
    assert exec_pass_lines(reconciler_container, "real") == []
    assert ops.passes_for(dry_id) == []


def test_real_pass_refused_with_another_installations_dry_run(
    docker_engine: DockerEngine,
    store: Store,
    clock: ManualClock,
    reconciler_factory: Callable[..., ReconcilerContainer],
) -> None:
    a = reconciler_factory()
    b = reconciler_factory()
    ops_a = make_ops(docker_engine, store, clock, a.project)
    ops_b = make_ops(docker_engine, store, clock, b.project)
    dry_id = ops_a.dryrun("U_ALICE").messages[0].ref or ""
    with pytest.raises(ReconcileRefused, match=f"run on installation '{a.project}', not on '{b.project}'"):
        ops_b.reconcile("U_ALICE", dry_id)
    assert exec_pass_lines(b, "real") == [] and exec_pass_lines(a, "real") == []


def test_one_reviewed_dry_run_authorises_one_real_pass(
    ops: DockerOps, reconciler_container: ReconcilerContainer
) -> None:
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    assert ops.reconcile("U_ALICE", dry_id).ok
    with pytest.raises(ReconcileRefused, match="already used by real pass pass_"):
        ops.reconcile("U_BOB", dry_id)
    assert len(exec_pass_lines(reconciler_container, "real")) == 1


def test_a_double_click_runs_one_real_pass(ops: DockerOps, reconciler_container: ReconcilerContainer) -> None:
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    results: list[object] = []

    def click() -> None:
        try:
            results.append(ops.reconcile("U_ALICE", dry_id))
        except ReconcileRefused as exc:
            results.append(exc)

    threads = [threading.Thread(target=click) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(type(r).__name__ for r in results) == ["ReconcileRefused", "Reply"]
    assert len(exec_pass_lines(reconciler_container, "real")) == 1


# -- nothing typed in chat reaches the argv ---------------------------------------------------------


@pytest.mark.parametrize("typed", INJECTIONS)
def test_injection_in_the_dry_run_id_is_refused_before_any_exec(
    ops: DockerOps, reconciler_container: ReconcilerContainer, typed: str
) -> None:
    before = reconciler_container.logs()
    with pytest.raises(ReconcileRefused, match="is not a dry-run id"):
        ops.reconcile("U_ALICE", typed)
    assert reconciler_container.logs() == before  # no pass ran at all


def test_argv_items_arrive_as_single_literal_arguments(
    docker_engine: DockerEngine, store: Store, clock: ManualClock, reconciler_container: ReconcilerContainer
) -> None:
    """Even hostile argv items (from a runbook) are never given to a shell: each arrives as one argument."""
    argv = (*ReconcilerConfig().argv, *INJECTIONS[:4])
    ops = make_ops(docker_engine, store, clock, reconciler_container.project, argv=argv)
    row = ops.get_dryrun(ops.dryrun("U_ALICE").messages[0].ref or "")
    assert row is not None
    assert printed_argv(row["output"]) == list(argv)
    assert "uid=" not in row["output"]
    check = reconciler_container.container.exec_run(["ls", "/tmp/pwned"])
    assert check.exit_code != 0


# -- status (R1.4, R1.5) --------------------------------------------------------------------------------


def read_status_file(rc: ReconcilerContainer) -> str:
    return rc.container.exec_run(["cat", "/tmp/reconciler-status.json"]).output.decode()


def test_status_shows_the_file_as_it_is_and_the_latest_pass_lines(
    ops: DockerOps, reconciler_container: ReconcilerContainer
) -> None:
    ops.dryrun("U_ALICE")
    reconciler_container.put_file("/tmp/reconciler-fail", "lock timeout")
    ops.dryrun("U_ALICE")  # a failed pass, the most recent one
    msg = ops.status().messages[0]
    text = "\n".join(msg.lines)
    on_disk = read_status_file(reconciler_container).strip()
    assert '"result":"failed"' in on_disk and "lock timeout" in on_disk
    assert on_disk in text  # shown as it is
    facts = dict(msg.facts)
    logs = reconciler_container.logs().splitlines()
    last_completed = [ln for ln in logs if "Reconciler pass completed" in ln][-1]
    last_failed = [ln for ln in logs if "Reconciler pass failed" in ln][-1]
    # Their times are Docker's (the host's clock), to the millisecond.
    assert facts["Last pass completed"].startswith(last_completed.split(" ", 1)[0][:23])
    assert facts["Last pass failed"].startswith(last_failed.split(" ", 1)[0][:23])
    assert last_completed.split(" ", 1)[1] in text and last_failed.split(" ", 1)[1] in text
    assert msg.level == "warn"  # the last pass failed
    assert "R1.5" in text and "does not mean containers were removed" in text
    assert msg.rules == ["R1.4", "R1.5"]


def test_status_says_when_there_is_no_status_file(ops: DockerOps, reconciler_container: ReconcilerContainer) -> None:
    reconciler_container.remove_file("/tmp/reconciler-status.json")
    msg = ops.status().messages[0]
    assert "no status file yet" in "\n".join(msg.lines)
    assert dict(msg.facts)["Last pass failed"].startswith("none in the last")


# -- finding the reconciler (R1.3) ------------------------------------------------------------------


def test_no_reconciler_names_the_labels_searched(docker_engine: DockerEngine, store: Store, clock: ManualClock) -> None:
    ops = make_ops(docker_engine, store, clock, "rbtnothinghere")
    with pytest.raises(DockerOpsError) as err:
        ops.dryrun("U_ALICE")
    text = str(err.value)
    assert "No reconciler found" in text
    assert "com.docker.compose.project=rbtnothinghere" in text
    assert "com.docker.compose.service=reconciler" in text and "status running" in text


def test_two_reconcilers_are_refused(
    docker_engine: DockerEngine,
    store: Store,
    clock: ManualClock,
    reconciler_factory: Callable[..., ReconcilerContainer],
) -> None:
    first = reconciler_factory()
    second = reconciler_factory(first.project, 2)
    ops = make_ops(docker_engine, store, clock, first.project)
    with pytest.raises(DockerOpsError, match="2 containers match") as err:
        ops.status()
    assert first.name in str(err.value) and second.name in str(err.value)
    assert exec_pass_lines(first, "dry-run") == []


def test_a_stopped_reconciler_is_not_used(
    docker_engine: DockerEngine, store: Store, clock: ManualClock, reconciler_container: ReconcilerContainer
) -> None:
    reconciler_container.container.stop(timeout=1)
    ops = make_ops(docker_engine, store, clock, reconciler_container.project)
    with pytest.raises(DockerOpsError, match="No reconciler found") as err:
        ops.dryrun("U_ALICE")
    assert reconciler_container.name in str(err.value) and "exited" in str(err.value)


def test_a_reconciler_not_named_like_compose_is_refused(
    docker_engine: DockerEngine,
    store: Store,
    clock: ManualClock,
    reconciler_factory: Callable[..., ReconcilerContainer],
) -> None:
    rc = reconciler_factory(name=f"handmade-{time.time_ns()}")
    ops = make_ops(docker_engine, store, clock, rc.project)
    with pytest.raises(DockerOpsError, match=f"not {rc.project}-reconciler-<n>"):
        ops.dryrun("U_ALICE")


# -- exec timeout and a container gone mid-exec ---------------------------------------------------------


def test_exec_past_its_timeout_is_recorded_as_outcome_unknown(
    docker_engine: DockerEngine, store: Store, clock: ManualClock, reconciler_container: ReconcilerContainer
) -> None:
    reconciler_container.put_file("/tmp/reconciler-sleep", "30")
    ops = make_ops(docker_engine, store, clock, reconciler_container.project, exec_timeout_seconds=1.5)
    started = time.monotonic()
    reply = ops.dryrun("U_ALICE")
    assert time.monotonic() - started < 15
    msg = reply.messages[0]
    assert not reply.ok and msg.level == "warn" and not msg.buttons
    assert "outcome unknown" in msg.headline
    facts = dict(msg.facts)
    row = ops.get_dryrun(msg.ref or "")
    assert row is not None and row["outcome"] == "unknown" and row["exit_code"] is None
    assert facts["Exec id"] == row["exec_id"] and len(row["exec_id"]) == 64
    pid = int(facts["Pid (on the Docker host)"])
    assert pid > 1 and row["pid"] == pid
    # The process really is still running (exec inspect's pid is the host's; this test runs there).
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--once" in cmdline
    text = "\n".join(msg.lines)
    assert "may still be running" in text and "R1.6" in text and "later pass is safe" in text
    step = [s for s in store.steps() if s.step == "reconciler_dryrun"][0]
    assert step.outcome == "unknown" and step.detail and step.detail["pid"] == pid
    with pytest.raises(ReconcileRefused, match="unknown outcome"):
        ops.reconcile("U_ALICE", msg.ref or "")


def test_container_gone_mid_exec_is_a_clear_error_and_outcome_unknown(
    docker_engine: DockerEngine, store: Store, clock: ManualClock, reconciler_container: ReconcilerContainer
) -> None:
    reconciler_container.put_file("/tmp/reconciler-sleep", "20")
    ops = make_ops(docker_engine, store, clock, reconciler_container.project, exec_timeout_seconds=60)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            ops.dryrun("U_ALICE")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    # The exec is under way once its reconciler sleeps the 20 s put above (top's CMD column is cut short:
    # the reconciler's own arguments are not in it).
    eventually(
        lambda: any(p[-1] == "sleep 20" for p in reconciler_container.container.top()["Processes"]),
        15,
        "the dry run's reconciler mid-exec",
    )
    reconciler_container.container.remove(force=True)
    t.join(60)
    assert not t.is_alive()
    (err,) = errors
    assert isinstance(err, DockerOpsError)
    assert f"The reconciler container {reconciler_container.name} went away (stopped or removed)" in str(err)
    assert "recorded as unknown" in str(err)
    with store.read() as db:
        outcome = db.execute("SELECT outcome FROM dryruns").fetchall()
    assert outcome == [("unknown",)]


def test_a_real_pass_past_its_timeout_is_unknown_and_needs_a_new_dry_run(
    docker_engine: DockerEngine, store: Store, clock: ManualClock, reconciler_container: ReconcilerContainer
) -> None:
    ops = make_ops(docker_engine, store, clock, reconciler_container.project, exec_timeout_seconds=1.5)
    dry_id = ops.dryrun("U_ALICE").messages[0].ref or ""
    reconciler_container.put_file("/tmp/reconciler-sleep", "30")
    reply = ops.reconcile("U_BOB", dry_id)
    msg = reply.messages[0]
    assert not reply.ok and "outcome unknown" in msg.headline
    row = ops.get_pass(msg.ref or "")
    assert row is not None and row["outcome"] == "unknown" and row["reviewed_by"] == "U_BOB"
    assert row["exec_id"] and row["pid"]
    assert "Run /recover dryrun again" in "\n".join(msg.lines)
    steps = {s.step: s.outcome for s in store.steps()}
    assert steps["reconciler_pass"] == "unknown"
    with pytest.raises(ReconcileRefused, match="already used"):
        ops.reconcile("U_BOB", dry_id)
