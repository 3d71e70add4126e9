"""Soak: mixed signed `/recover` commands for minutes against the real bot, with control-host faults.

Loopback only and bounded (``--commands`` over ``--seconds``). The bot is built as the Slack tests build
it (tests/fixtures/slack.py): the real router over the sandbox control host, ``build_bot``, the checked
front on the threaded HTTP server (bot.slack.httpd), Slack's Web API stand-in. Commands are paced
evenly and sent from a few client threads as properly signed Slack requests: diagnose, decide
(``retry_restore --yes``, single person; ``close``, two-person, then ``approve`` by a second user),
cases, note, history, help. Every few seconds a control-host fault is injected through the sandbox's admin API:
latency, a 5xx before the commit,
drop-after-commit (an uncertain outcome the bot must finish with the same key), a 429.

At the end (after the bot's idle wait) it counts, from the SQLite step store and the sandbox:
- lost steps: an accepted diagnose, decide, note or approve without its step in the store (0 expected);
- duplicated effects: per session, effects on the sandbox beyond the decisions the bot recorded as
  executed (0 expected; fewer effects than executions are reported as missing effects);
- RSS growth of the process (the bot runs in this process) and the thread count at the end vs the start.

    python bench/soak.py [--commands 1000] [--seconds 300] [--clients 4] [--seed 1]

Prints a readable table and a one-line JSON summary; writes bench/out/soak.json. Exit 1 when lost
steps, duplicated or missing effects are above 0.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.app.compose import FrontPorts  # noqa: E402
from bot.sandbox import builtin_scenarios_dir, start_sandbox  # noqa: E402
from bot.slack import HttpServer, SlackDirectory, SlackFront, build_bot, make_client  # noqa: E402
from bot.store import Store  # noqa: E402
from tests.fixtures.composing import default_router  # noqa: E402
from tests.fixtures.slack import SIGNING_SECRET, SlackSender, SlackStandIn, slack_settings  # noqa: E402

DECISION_PATH = "/v1/sessions/*/recovery-decisions"
# Share of each command in the mix; every `close` request is followed by an `approve` from UBOB.
MIX = {"diagnose": 30, "decide_yes": 11, "decide_two": 11, "cases": 8, "note": 16, "history": 12, "help": 5}
# Faults cycled through while the soak runs (docs/sandbox.md, admin API).
FAULTS: list[dict[str, Any]] = [
    {"kind": "latency", "path": "/v1/sessions/*", "method": "GET", "seconds": 1.5, "times": 4},
    {"kind": "server_error", "path": DECISION_PATH, "method": "POST", "times": 1},
    {"kind": "drop_after_commit", "path": DECISION_PATH, "method": "POST", "times": 1},
    {"kind": "rate_limit", "path": "*", "times": 3, "retry_after": 1},
]
STEP_OF = {
    "diagnose": "diagnose",
    "decide_yes": "decision_requested",
    "decide_two": "decision_requested",
    "note": "note",
    "approve": "decision_approved",
}


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


@dataclass
class Sent:
    kind: str
    session: str | None
    marker: str | None
    status: int
    user: str


@dataclass
class Soak:
    """One soak run: the parts, the sessions and what was sent."""

    commands: int
    seconds: float
    clients: int
    seed: int
    sent: list[Sent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> dict[str, Any]:
        rng = random.Random(self.seed)
        api = SlackStandIn()
        sandbox = start_sandbox()
        tmp = tempfile.TemporaryDirectory(prefix="recover-soak-")
        db = Path(tmp.name) / "soak.db"
        settings = slack_settings(api, db)
        client = make_client(settings)
        ports = FrontPorts(directory=SlackDirectory(client))
        router = default_router(settings, sandbox=sandbox, ports=ports, startup=False)
        bot = build_bot(settings, router, client=client, store=Store(db), work_threads=8)
        server = HttpServer(SlackFront(bot.app, signing_secret=SIGNING_SECRET), "127.0.0.1", 0).start()
        url = server.url + "/slack/events"
        senders = [SlackSender(url, stand_in=api) for _ in range(self.clients)]
        local = threading.local()
        handed = iter(senders)
        made = iter(range(1, 1_000_000))
        spec = yaml.safe_load((builtin_scenarios_dir() / "restore_stopped_transient.yaml").read_text())

        def new_session() -> str:
            sid = f"ses_soak_{next(made):05d}"
            s = copy.deepcopy(spec)
            s["session"]["id"] = sid
            s["worker_logs"] = []
            sandbox.admin.create_session({k: s[k] for k in ("session", "turns", "events", "worker_logs")})
            return sid

        sessions = [new_session() for _ in range(10)]
        awaiting: list[str] = []  # sessions with a two-person `close` requested, not yet approved

        def sender() -> SlackSender:
            """Each client thread keeps its own connection."""
            if not hasattr(local, "s"):
                with self.lock:
                    local.s = next(handed)
            return local.s  # type: ignore[no-any-return]

        def send(kind: str, text: str, session: str | None, marker: str | None, user: str = "UALICE") -> None:
            try:
                status = sender().command(text, user=user).status_code
            except Exception:  # noqa: BLE001 - a failed send is counted, not fatal
                status = 0
            with self.lock:
                self.sent.append(Sent(kind, session, marker, status, user))

        def one(i: int) -> tuple[str, str, str | None, str | None, str]:
            """Pick the i-th command (on the pacing thread, so the mix is reproducible)."""
            with self.lock:
                if awaiting and rng.random() < 0.5:
                    sid = awaiting[0]
                    pending = [
                        r for r in bot.router.services.decisions.requests.find(session_id=sid) if r.state == "requested"
                    ]
                    if pending:
                        awaiting.pop(0)
                        return "approve", f"approve {pending[0].id}", sid, pending[0].id, "UBOB"
            kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
            marker = f"soak{i:06d}x"  # no marker is a prefix of another
            sid = rng.choice(sessions)
            if kind == "diagnose":
                return kind, f"diagnose {sid}", sid, None, "UALICE"
            if kind in ("decide_yes", "decide_two"):
                fresh = new_session()
                sessions.append(fresh)
                if kind == "decide_yes":
                    return kind, f'decide {fresh} retry_restore --reason "{marker}" --yes', fresh, marker, "UALICE"
                with self.lock:
                    awaiting.append(fresh)
                return kind, f'decide {fresh} close --reason "{marker}"', fresh, marker, "UALICE"
            if kind == "note":
                return kind, f"note {sid} {marker} checked by the soak", sid, marker, "UALICE"
            if kind == "history":
                return kind, f"history {sid}", sid, None, "UALICE"
            return kind, kind, None, None, "UALICE"

        # Warm-up: connections, imports, the first SQLite open; the baseline is taken after it.
        for text in ("help", f"diagnose {sessions[0]}", "cases"):
            senders[0].command(text)
        bot.wait_idle(60)
        time.sleep(1.0)
        rss0, threads0 = rss_kb(), thread_count()
        faults = Counter[str]()
        t0 = time.monotonic()
        interval = self.seconds / max(self.commands, 1)
        fault_every = max(1, self.commands // max(1, int(self.seconds / 3)))  # one fault about every 3 s
        pool = ThreadPoolExecutor(self.clients, thread_name_prefix="soak-client")
        try:
            for i in range(self.commands):
                delay = t0 + i * interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if i % fault_every == 0:
                    f = dict(FAULTS[(i // fault_every) % len(FAULTS)])
                    sandbox.admin.fault(f.pop("kind"), f.pop("path"), **f)
                    faults[FAULTS[(i // fault_every) % len(FAULTS)]["kind"]] += 1
                kind, text, sid, marker, user = one(i)
                pool.submit(send, kind, text, sid, marker, user)
            pool.shutdown(wait=True)
            elapsed = time.monotonic() - t0
            sandbox.admin.clear_faults()
            idle = bot.wait_idle(180)
            deadline = time.monotonic() + 120  # uncertain sends are finished in the background (R0.3)
            while time.monotonic() < deadline and bot.router.services.decisions.requests.find(
                states=("sending", "uncertain", "approved")
            ):
                time.sleep(0.5)
            bot.wait_idle(60)
            time.sleep(2.0)  # keep-alive connections and finished pool threads wind down
            rss1, threads1 = rss_kb(), thread_count()
            result = self.count(Store(db), sandbox, bot)
        finally:
            pool.shutdown(wait=True)
            for s in senders:
                s.close()
            server.stop()
            bot.close()
            sandbox.stop()
            api.stop()
            tmp.cleanup()
        result.update(
            {
                "commands": len(self.sent),
                "by_kind": dict(Counter(s.kind for s in self.sent)),
                "accepted": sum(1 for s in self.sent if s.status == 200),
                "not_accepted": sum(1 for s in self.sent if s.status != 200),
                "seconds": round(elapsed, 1),
                "faults": dict(faults),
                "idle": idle,
                "rss_start_mb": round(rss0 / 1024, 1),
                "rss_end_mb": round(rss1 / 1024, 1),
                "rss_growth_mb": round((rss1 - rss0) / 1024, 1),
                "threads_start": threads0,
                "threads_end": threads1,
                "load_average": round(os.getloadavg()[0], 1),
            }
        )
        return result

    def count(self, store: Store, sandbox: Any, bot: Any) -> dict[str, Any]:
        steps = store.steps()
        by_session: dict[str | None, list[Any]] = {}
        for st in steps:
            by_session.setdefault(st.session_id, []).append(st)
        diagnoses_sent = Counter(s.session for s in self.sent if s.kind == "diagnose" and s.status == 200)
        lost = 0
        for sid, n in diagnoses_sent.items():
            lost += max(0, n - sum(1 for st in by_session.get(sid, []) if st.step == "diagnose"))
        for s in self.sent:
            if s.status != 200 or s.kind not in STEP_OF or s.kind == "diagnose":
                continue
            want = STEP_OF[s.kind]
            found = any(
                st.step == want and s.marker in json.dumps(st.inputs) + json.dumps(st.detail or {}) + st.outcome
                for st in by_session.get(s.session, [])
            )
            lost += 0 if found else 1
        executed = Counter(st.session_id for st in steps if st.step == "decision_executed")
        effects = {k: v for k, v in sandbox.admin.effect_counts().items() if k.startswith("ses_soak_")}
        duplicated = sum(max(0, n - executed.get(sid, 0)) for sid, n in effects.items())
        missing = sum(max(0, n - effects.get(str(sid), 0)) for sid, n in executed.items())
        states = Counter(r.state for r in bot.router.services.decisions.requests.find())
        return {
            "lost_steps": lost,
            "duplicated_effects": duplicated,
            "missing_effects": missing,
            "effects": sum(effects.values()),
            "executed": sum(executed.values()),
            "request_states": dict(states),
            "steps": len(steps),
        }


def table(r: dict[str, Any]) -> str:
    rows = [
        ("commands sent / accepted (HTTP 200)", f"{r['commands']} / {r['accepted']}"),
        ("mix", ", ".join(f"{k} {v}" for k, v in sorted(r["by_kind"].items()))),
        ("seconds (sending)", r["seconds"]),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items()))),
        ("decision requests by state", ", ".join(f"{k} {v}" for k, v in sorted(r["request_states"].items()))),
        ("executed decisions / effects on the sandbox", f"{r['executed']} / {r['effects']}"),
        ("lost steps (target 0)", r["lost_steps"]),
        ("duplicated effects (target 0)", r["duplicated_effects"]),
        ("missing effects (target 0)", r["missing_effects"]),
        ("RSS start → end", f"{r['rss_start_mb']} → {r['rss_end_mb']} MB (growth {r['rss_growth_mb']} MB)"),
        ("threads start → end (after idle)", f"{r['threads_start']} → {r['threads_end']}"),
        ("load average (1 min)", r["load_average"]),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run(commands: int, seconds: float, clients: int = 4, seed: int = 1) -> dict[str, Any]:
    """One soak (also used by the CI test); the bot's own logging of injected faults is silenced."""
    logging.getLogger("recover_bot").setLevel(logging.CRITICAL)
    return Soak(commands, seconds, clients, seed).run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = run(args.commands, args.seconds, args.clients, args.seed)
    print(table(result))
    print(json.dumps(result, sort_keys=True))
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    bad = result["lost_steps"] + result["duplicated_effects"] + result["missing_effects"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
