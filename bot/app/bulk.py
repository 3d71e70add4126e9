"""Wiring of the mass-incident tools: a paced control-host client shared by triage and batches.

The paced client is a second :class:`bot.controlhost.ControlHostClient` on the same store (same
Idempotency-Key rule, same records) whose transport holds the runbook's request rate and pauses on a
429; single-session commands keep the unpaced client, so a running batch never delays a diagnose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.batch import BatchService
from bot.clock import Clock
from bot.controlhost import ControlHostClient
from bot.decisions import DecisionService
from bot.logs import LogSource
from bot.runbook import RunbookSet
from bot.store import Store
from bot.triage import PacedTransport, RateLimiter, Triage, runbook_limit


@dataclass
class Bulk:
    client: ControlHostClient
    limiter: RateLimiter
    triage: Triage
    batches: BatchService

    @classmethod
    def build(
        cls,
        url: str,
        key: str,
        *,
        store: Store,
        clock: Clock,
        runbooks: RunbookSet,
        api: dict[str, Any],
        log_source: LogSource | None,
        decisions: DecisionService,
        csv_dir: Path | None,
    ) -> Bulk:
        limiter = RateLimiter(runbook_limit(runbooks, "bulk_rate"))
        client = ControlHostClient(url, key, store=store, clock=clock, transport=PacedTransport(limiter), **api)
        # Examples are diagnosed by diagnose's own function: triage and diagnose share one classification.
        triage = Triage(
            client=client,
            runbooks=runbooks,
            store=store,
            clock=clock,
            log_source=log_source,
            diagnoser=decisions.diagnoser,
        )
        batches = BatchService(
            store=store, client=client, runbooks=runbooks, clock=clock, decisions=decisions, csv_dir=csv_dir
        )
        return cls(client=client, limiter=limiter, triage=triage, batches=batches)
