"""The ladder's race, measured: many requests across the ladder on a simulated clock, decisions
(approve, reject, withdraw) racing due steps on other threads, over the real core and SQLite file.

Used by tests/escalation/test_ladder_race.py (100 requests, kept short) and bench/escalation_race.py
(1,000 runs). The poster checks, as it posts, that the request is still pending in the store: a post
after a decision's commit is counted as late. At the end every row must be posted or cancelled, no
step posted twice, and every request that expired must have had its whole ladder and its announcement.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.clock import ManualClock
from bot.decisions._ladder_rows import LadderBusy
from bot.decisions._requests import RequestStore
from bot.escalation.ladder import PENDING_STATES
from bot.escalation.runner import LadderRunner
from bot.messages import Message


@dataclass
class RaceResult:
    requests: int = 0
    posts: int = 0
    late: int = 0  # posts made after their request left requested/recheck
    duplicates: int = 0  # a step posted twice
    lost: int = 0  # a row neither posted nor cancelled at the end, or an expired request's missing step
    busy: int = 0  # decisions refused because a post was in flight (then retried)
    racing: int = 0  # decisions that began while a step of their request was being posted
    decided: Counter[str] = field(default_factory=Counter)


class CheckingPoster:
    """Posts into a list, and checks at the moment of each post that its request is still pending."""

    def __init__(self, requests: RequestStore, result: RaceResult, jitter: Callable[[], None]) -> None:
        self.requests = requests
        self.result = result
        self.jitter = jitter
        self.keys: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.in_flight: Counter[str] = Counter()  # request id → its posts under way now
        self.on_post: Callable[[str, str], None] = lambda _rid, _key: None

    def thread_of(self, request: Any) -> tuple[str, str | None]:
        return ("CRACE", f"t-{request.id}")

    def post(self, channel: str, message: Message, thread_ts: str | None) -> str | None:
        rid = (thread_ts or "").removeprefix("t-")
        with self.lock:
            self.in_flight[rid] += 1
        self.on_post(rid, message.lines[-1])  # the race: its decision is let go now, mid-post
        self.jitter()  # Slack takes a while: a decision may try to commit meanwhile
        req = self.requests.get(rid)
        key = message.lines[-1]
        with self.lock:
            self.in_flight[rid] -= 1
            self.result.posts += 1
            self.keys[key] += 1
            expiry = key.endswith("#-1")
            if req is None or (req.state not in PENDING_STATES and not (expiry and req.state == "expired")):
                self.result.late += 1
        return f"ts-{key}"

    def find(self, channel: str, text: str, thread_ts: str | None) -> str | None:
        with self.lock:
            return f"ts-{text}" if self.keys.get(text) else None

    def request_message(self, request_id: str) -> tuple[str, str] | None:
        return None

    def update(self, channel: str, ts: str, message: Message) -> float | None:
        return None


def run_race(
    make_request: Callable[[int], str],
    decide: Callable[[str, str], Any],
    runner: LadderRunner,
    clock: ManualClock,
    *,
    requests: int,
    seed: int = 0,
    end_seconds: float = 12.0,
    spread: float = 0.05,
    lag: float = 0.004,
) -> RaceResult:
    """Make ``requests`` requests, then race a runner thread (the clock moving on) against decision
    threads; ``decide(how, request_id)`` approves, rejects or withdraws, at most ``lag`` seconds after
    the post it races began (keep it well below the poster's latency, or the post is over first)."""
    rng = random.Random(seed)
    poster = runner.poster
    assert isinstance(poster, CheckingPoster)
    result = poster.result
    start_at = clock.now()
    ids: list[str] = []
    made_at: list[float] = []
    for i in range(requests):  # spread over time, so few steps fall due at once and each can race
        clock.advance(spread)
        made_at.append((clock.now() - start_at).total_seconds())
        ids.append(make_request(i))
    result.requests = len(ids)
    # Each decided request is decided while one of its steps is being posted (its post lets the
    # decision go): the decision's commit and the post overlap unless the ordering prevents it.
    hows = ["approve", "reject", "withdraw", "expire", "expire"]
    plan = {rid: (rng.choice(hows), rng.choice([0, 1, 2])) for rid in ids}
    go = {rid: threading.Event() for rid in ids}
    stop = threading.Event()

    def let_go(rid: str, key: str) -> None:
        planned = plan.get(rid)
        if planned is not None and key.endswith(f"#{planned[1]}"):
            go[rid].set()

    poster.on_post = let_go

    def ladder() -> None:
        while not stop.is_set():
            runner.run_due()
            clock.advance(0.25)

    def decider(rid: str, how: str) -> None:
        go[rid].wait(30)
        threading.Event().wait(delay.uniform(0.0, lag))
        with poster.lock:
            result.racing += poster.in_flight[rid] > 0  # its post is still under way: the race is on
        for _ in range(50):
            try:
                decide(how, rid)
                with poster.lock:
                    result.decided[how] += 1
                break
            except LadderBusy:
                with poster.lock:
                    result.busy += 1

    delay = random.Random(seed + 1)
    threads = [threading.Thread(target=ladder)] + [
        threading.Thread(target=decider, args=(rid, how)) for rid, (how, _k) in plan.items() if how != "expire"
    ]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    while (clock.now() - start_at).total_seconds() < end_seconds + requests * spread:
        threading.Event().wait(0.01)
    stop.set()
    threads[0].join()
    runner.run_due()
    result.duplicates = sum(n - 1 for n in poster.keys.values() if n > 1)
    states = runner.rows.counts()
    result.lost = sum(n for s, n in states.items() if s not in ("posted", "cancelled"))
    for rid in ids:
        req = runner.ctx.requests.get(rid)
        if req is not None and req.state == "expired":
            rows = runner.rows.states(rid)
            result.lost += sum(1 for s in rows.values() if s != "posted")
    return result
