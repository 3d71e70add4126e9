"""The whole store-outage incident at N = 60 over the real deployment.

``recover-bot serve`` as a process with the watch channel set, signed Slack HTTP in, the Slack Web
API stand-in out, the sandbox control host over HTTP (20 ms a call, 100 requests/s), one SQLite file.
60 sessions stop at once; the watcher says so, then edits that message into the triage; the store
comes back; people send the triage's batch command and a second person approves it; the workers come
up; the bot's verification closes every case. ``bench/storm.py`` runs the same at N = 1,000 and holds
the time targets; here time is only bounded so CI cannot hang.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.storm import run_storm

pytestmark = pytest.mark.subprocess

N = 60


def test_a_storm_of_store_outage_stops_ends_with_every_case_closed_by_verification(tmp_path: Path) -> None:
    f = run_storm(N, tmp_path, interval=1.0, timeout=240.0)
    assert not f.notes, f.notes
    assert len(f.commands) <= 4, f.commands  # the batch command and the second person's approval
    assert f.top_level_posts <= 3, f.top_level_texts  # the storm (first word → triage), the batch
    assert "Many sessions stopped at once" in f.top_level_texts[0]
    assert f.closed_by_verification == N, f.not_closed[:5]  # each case's last step: closed by verification
    assert f.sessions_sent == N and f.sends_per_session_max == 1 and f.sessions_sent_twice == 0
    assert f.keys_per_session_max == 1  # one Idempotency-Key per session
    # Generous bounds only (the targets are bench/storm.py's): nothing hung.
    assert f.stop_to_first_word is not None and f.stop_to_first_word < 60
    assert f.fix_to_all_verified is not None and f.fix_to_all_verified < 240
