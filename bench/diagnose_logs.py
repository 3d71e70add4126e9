"""diagnose over a 1,000,000-line worker container vs ``docker logs <id> | grep -F <session>``.

One run builds an exited worker container on the real Docker engine (DOCKER_HOST) whose log holds
``--lines`` lines of other sessions (~140 bytes each), the session's ``control_received`` and
``sdk_interrupt_called`` interrupt stages in the middle and its ``engine_terminal`` at the very end,
then times on that same container:

- ``docker logs <id> | grep -F <session>`` (twice: before and after diagnose; the mean is used);
- ``/recover diagnose`` end to end against the sandbox control host (its first answer), with the
  shipped runbook (10 s budget, 64 MiB first-answer budget) and the Docker worker-log source;
- the full coverage: until the follow-up naming the buried stage is posted (or the first answer, if
  it already covered the whole log);
- peak RSS growth of this process from before diagnose to after the follow-up (VmHWM, reset first).

Targets: first answer <= 10 s; full coverage <= 3x the grep time; RSS growth < 100 MB. Usage::

    DOCKER_HOST=unix:///path/docker.sock python bench/diagnose_logs.py [--lines N] [--keep]

Results are printed and written to bench/out/diagnose_logs.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import secrets
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from bot.app.services import MIGRATIONS, worker_log_config  # noqa: E402
from bot.clock import ManualClock  # noqa: E402
from bot.controlhost import ControlHostClient  # noqa: E402
from bot.diagnosis import Diagnoser  # noqa: E402
from bot.dockerops import DockerLogSource, client_factory  # noqa: E402
from bot.messages import ListReporter  # noqa: E402
from bot.runbook import load_runbooks  # noqa: E402
from bot.sandbox import builtin_scenarios_dir, load_scenarios, start_sandbox  # noqa: E402
from bot.store import Store  # noqa: E402
from tests.docker.images.build import build_images  # noqa: E402

SCENARIO = "unknown_unanswered"
SID = "ses_unknown_unanswered"
TURN, CONTROL = "turn_uu5", "ctl_uu5"


def _status_kb(key: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _ts(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _stage(at: datetime, stage: str, elapsed: int, extra: str = "") -> str:
    return (
        f'{{"ts":"{_ts(at)}","level":"info","event":"worker.turn.interrupt.stage","session_id":"{SID}",'
        f'"turn_id":"{TURN}","control_id":"{CONTROL}","stage":"{stage}","elapsed_ms":{elapsed}{extra}}}'
    )


def build_log(lines: int, end: datetime) -> bytes:
    """``lines`` lines of other sessions over the last two hours; the buried stages as described."""
    start = end - timedelta(hours=2)
    step = (end - start) / lines
    out = io.StringIO()
    middle = lines // 2
    for i in range(lines):
        at = start + step * i
        out.write(
            f'{{"ts":"{_ts(at)}","level":"info","event":"worker.turn.progress",'
            f'"session_id":"ses_{i % 4999:012x}","turn_id":"turn_{i:09d}","seq":{i}}}\n'
        )
        if i == middle:
            out.write(_stage(at, "control_received", 0) + "\n")
            out.write(_stage(at, "sdk_interrupt_called", 3) + "\n")
    out.write(_stage(end, "engine_terminal", 5003, ',"outcome":"timeout"') + "\n")
    return out.getvalue().encode()


def make_container(client: docker.DockerClient, image: str, project: str, log: bytes) -> str:
    name = f"{project}-worker-1"
    container = client.containers.create(
        image,
        name=name,
        labels={
            "recover-bot-test": "1",
            "com.docker.compose.project": project,
            "com.docker.compose.service": "worker",
            "control-host.session_id": SID,
        },
        network_mode="none",
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("log.txt")
        info.size = len(log)
        tar.addfile(info, io.BytesIO(log))
    container.put_archive("/worker", buf.getvalue())
    container.start()
    container.wait(timeout=600)
    return name


def time_grep(name: str) -> tuple[float, int]:
    """``docker logs <name> 2>&1 | grep -F <session>``, as two processes joined by a pipe (no shell)."""
    start = time.perf_counter()
    logs = subprocess.Popen(["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done = subprocess.run(["grep", "-F", SID], stdin=logs.stdout, capture_output=True, text=True, check=False)
    assert logs.stdout is not None
    logs.stdout.close()
    logs.wait()
    return time.perf_counter() - start, len(done.stdout.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="other sessions' lines (default 1,000,000)")
    parser.add_argument("--keep", action="store_true", help="keep the container")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "diagnose_logs.json")
    args = parser.parse_args(argv)

    client = docker.from_env(timeout=600)
    images = build_images(client)
    project = f"rbench{secrets.token_hex(3)}"
    real_now = datetime.now(UTC)
    log = build_log(args.lines, real_now)
    t0 = time.perf_counter()
    name = make_container(client, images.worker, project, log)
    build_s = time.perf_counter() - t0

    scenario = next(s for s in load_scenarios(builtin_scenarios_dir()) if s.id == SCENARIO)
    # The control host's clock: the turn (ended 90 s before "now") ends after the worker printed its
    # last line, as a stopped worker's last turn does.
    clock = ManualClock(real_now + timedelta(seconds=120))
    sandbox = start_sandbox(scenarios=[scenario], clock=clock)
    tmp = Path(tempfile.mkdtemp(prefix="recover-bench-"))
    store = Store(tmp / "recover.db", clock, migrations=MIGRATIONS)
    api = ControlHostClient(sandbox.url, sandbox.api_key, store=store, clock=clock)
    runbooks = load_runbooks(ROOT / "runbooks")
    diagnoser = Diagnoser(
        client=api,
        runbooks=runbooks,
        store=store,
        log_source=DockerLogSource(
            installation=project, config=worker_log_config(runbooks), docker_client_factory=client_factory()
        ),
        reconciler_status=None,
        clock=clock,
    )
    try:
        time_grep(name)  # warm the page cache for both
        grep_1, grep_count = time_grep(name)
        reporter = ListReporter()
        _reset_peak_rss()
        rss_before = _status_kb("VmRSS")
        start = time.perf_counter()
        reply = diagnoser.diagnose(SID, "bench", reporter)
        first_s = time.perf_counter() - start
        first_text = "\n".join(m.plain_text() for m in reply.messages)
        for work in reply.deferred:
            work()
        full_s = time.perf_counter() - start
        rss_growth_mb = (_status_kb("VmHWM") - rss_before) / 1024
        grep_2, _ = time_grep(name)
    finally:
        api.close()
        sandbox.stop()
        if not args.keep:
            client.api.remove_container(name, force=True)
    followup_text = "\n".join(m.plain_text() for m in reporter.posted)
    everything = first_text + "\n" + followup_text
    grep_s = (grep_1 + grep_2) / 2
    # A stage is named when the R3.2 timeline lists it ("  3 ms  sdk_interrupt_called"), not when
    # it is listed as missing.
    stages = ("sdk_interrupt_called", "engine_terminal")
    both_named = all(re.search(rf"\d ms  {s}\b", everything) for s in stages)
    first_named = [s for s in stages if re.search(rf"\d ms  {s}\b", first_text)]
    coverage = next((ln for ln in first_text.splitlines() if "Worker log" in ln), "")
    result = {
        "lines": args.lines + 3,
        "log_bytes": len(log),
        "container_build_seconds": round(build_s, 1),
        "grep_seconds": [round(grep_1, 2), round(grep_2, 2)],
        "grep_seconds_mean": round(grep_s, 2),
        "grep_lines": grep_count,
        "first_answer_seconds": round(first_s, 2),
        "first_answer_stages": first_named,
        "first_answer_coverage": coverage,
        "full_coverage_seconds": round(full_s, 2),
        "followups_posted": len(reporter.posted),
        "both_stages_named": both_named,
        "ratio_full_to_grep": round(full_s / grep_s, 2),
        "peak_rss_growth_mb": round(rss_growth_mb, 1),
        "targets": {"first_answer_seconds": 10, "ratio_full_to_grep": 3, "peak_rss_growth_mb": 100},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    result["meets_targets"] = bool(both_named and first_s <= 10 and full_s <= 3 * grep_s and rss_growth_mb < 100)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"diagnose_logs: {result['lines']:,} lines, {len(log) / 1e6:.0f} MB in {name} (built in {build_s:.1f} s)")
    print(f"docker logs | grep -F      {grep_s:7.2f} s  (runs {grep_1:.2f} s, {grep_2:.2f} s; {grep_count} lines)")
    print(
        f"diagnose first answer      {first_s:7.2f} s  (target <= 10 s; stages in it: "
        f"{', '.join(first_named) or 'none'})"
    )
    print(f"  {coverage}")
    print(
        f"diagnose full coverage     {full_s:7.2f} s  (follow-ups posted: {len(reporter.posted)}; both stages named: "
        f"{both_named})"
    )
    print(f"ratio full / grep          {full_s / grep_s:7.2f}    (target <= 3)")
    print(f"peak RSS growth            {rss_growth_mb:7.1f} MB (target < 100)")
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; meets targets: {result['meets_targets']}  "
        f"-> {args.out}"
    )
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
