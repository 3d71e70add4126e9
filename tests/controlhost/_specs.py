"""Session specs for the sandbox's admin API (create_session), shared by the over-HTTP tests."""

from __future__ import annotations

from typing import Any


def starting(sid: str, *, checkpoint: bool = True, revision: int = 1) -> dict[str, Any]:
    """A session whose fresh worker is starting (restoring a checkpoint, or preparing without one)."""
    session: dict[str, Any] = {
        "id": sid,
        "status": "running",
        "admission_state": "open",
        "revision": revision,
        "execution": {"state": "running", "alive": True, "phase": "starting"},
    }
    if checkpoint:
        session["checkpoint"] = {"id": f"ckpt_{sid}", "committed_at": "-10m", "covers_turn_id": f"{sid}_t1"}
    return {
        "session": session,
        "turns": [{"id": f"{sid}_t1", "status": "completed", "started_at": "-20m", "ended_at": "-11m"}],
    }


def running(sid: str, revision: int = 5) -> dict[str, Any]:
    """A healthy session with a ready worker and a checkpoint covering its first turn."""
    spec = starting(sid, revision=revision)
    spec["session"]["execution"]["phase"] = "ready"
    return spec
