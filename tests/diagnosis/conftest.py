"""Diagnose against the real sandbox control host over HTTP, worker logs read from a file."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.controlhost import ControlHostClient, RetryPolicy
from bot.diagnosis import Diagnoser, ReconcilerStatus
from bot.logs import FileLogSource
from bot.runbook import RunbookSet, load_runbooks
from bot.sandbox import SandboxHandle, start_sandbox
from bot.store import Store

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "runbooks"


class StaticReconcilerStatus:
    """The reconciler status as the Docker source would report it (that source has its own tests)."""

    def __init__(self, last_pass: str = "completed", at: str = "2026-11-29T09:59:00Z") -> None:
        self.status = ReconcilerStatus(last_pass=last_pass, last_pass_at=at, raw={"ok": True})

    def read_status(self) -> ReconcilerStatus:
        return self.status


@dataclass
class Env:
    sandbox: SandboxHandle
    store: Store
    client: ControlHostClient
    clock: ManualClock
    tmp: Path
    runbooks: RunbookSet

    def write_worker_logs(self, session_id: str) -> Path:
        """The sandbox worker's lines for the session, as the worker wrote them, into a log file."""
        path = self.tmp / "logs" / f"worker-{session_id}.log"
        path.parent.mkdir(exist_ok=True)
        lines = self.sandbox.admin.worker_logs(session_id)
        path.write_text("".join(f"{line['text']}\n" for line in lines), encoding="utf-8")
        return path

    def diagnoser(
        self,
        *,
        runbooks: RunbookSet | None = None,
        log_glob: str | None = None,
        logs: bool = True,
        reconciler: object | None = None,
    ) -> Diagnoser:
        source = FileLogSource(log_glob or str(self.tmp / "logs" / "*.log")) if logs else None
        return Diagnoser(
            client=self.client,
            runbooks=runbooks or self.runbooks,
            store=self.store,
            log_source=source,
            reconciler_status=reconciler if reconciler is not None else StaticReconcilerStatus(),
            clock=self.clock,
        )

    def runbook_copy(self, edit: Callable[[str], str]) -> RunbookSet:
        """Load an edited copy of the runbooks (the shipped files are never touched)."""
        folder = self.tmp / "runbooks-copy"
        shutil.copytree(RUNBOOKS, folder, dirs_exist_ok=True)
        target = folder / "session-recovery.yaml"
        original = target.read_text(encoding="utf-8")
        edited = edit(original)
        assert edited != original, "the edit changed nothing"
        target.write_text(edited, encoding="utf-8")
        return load_runbooks(folder)


@pytest.fixture(scope="session")
def shipped_runbooks() -> RunbookSet:
    return load_runbooks(RUNBOOKS)


@pytest.fixture
def env(tmp_path: Path, clock: ManualClock, shipped_runbooks: RunbookSet) -> Iterator[Env]:
    sandbox = start_sandbox(scenarios="builtin", clock=clock)
    store = Store(tmp_path / "recover.db", clock, migrations=MIGRATIONS)
    # One attempt per GET: a retry would sleep on the shared manual clock and move the sandbox's time.
    client = ControlHostClient(
        sandbox.url, sandbox.api_key, store=store, clock=clock, retry=RetryPolicy(attempts=1), timeout=5.0
    )
    try:
        yield Env(sandbox, store, client, clock, tmp_path, shipped_runbooks)
    finally:
        client.close()
        sandbox.stop()
