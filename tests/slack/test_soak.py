"""The soak bench's 30-second version: mixed signed commands with control-host faults lose nothing.

bench/soak.py runs the real bot (as tests/fixtures/slack.py builds it) over its threaded HTTP server against the sandbox
control host, sending ~100 `/recover` commands in 30 s while latency, a 5xx before the commit,
drop-after-commit and 429s are injected. Counted from the SQLite step store and the sandbox's effect
counters: every accepted command's step is stored, no decision has its effect twice (R0.3: the
uncertain sends are finished with their own Idempotency-Key), and the threads wind down afterwards.
The 5-minute run's figures are in bench/README.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def _soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_soak", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_thirty_second_soak_loses_no_step_and_duplicates_no_effect() -> None:
    result = _soak().run(commands=100, seconds=30, clients=4, seed=7)
    assert result["accepted"] == result["commands"] == 100, result
    kinds = result["by_kind"]
    assert {"diagnose", "decide_yes", "decide_two", "approve", "note"} <= set(kinds), kinds
    assert set(result["faults"]) == {"latency", "server_error", "drop_after_commit", "rate_limit"}, result
    # Decisions were really executed under the faults, and each has exactly one effect.
    assert result["executed"] >= 10 and result["effects"] == result["executed"], result
    assert result["lost_steps"] == 0, result
    assert result["duplicated_effects"] == 0 and result["missing_effects"] == 0, result
    assert result["idle"], result
    assert result["threads_end"] <= result["threads_start"] + 4, result
