"""Log-scan throughput: FileLogSource vs ``grep -F -c <session_id>`` on the same generated log.

Target: at least a third of grep's throughput, and peak RSS growth under 50 MB while
scanning a 1 GB file. Usage::

    python bench/log_scan.py                 # 1 GB in /tmp, deleted afterwards
    python bench/log_scan.py --size-mb 50    # quick run

Results are printed as a table and written to bench/out/log_scan.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.logs import FileLogSource  # noqa: E402
from tests.fixtures.logs import GEN_START, generate_log_file  # noqa: E402


def _status_kb(key: str) -> int:
    """A ``/proc/self/status`` value in kB (VmRSS, VmHWM); 0 where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0) so the peak measured is the scan's alone."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def time_grep(path: Path, target: str) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(["grep", "-c", "-F", target, str(path)], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {proc.stderr.strip()}")
    return elapsed, int(proc.stdout.strip() or 0)


def time_scan(path: Path, target: str, size: int) -> tuple[float, int, dict[str, object]]:
    source = FileLogSource(str(path))
    start = time.perf_counter()
    scan = source.lines_for_session(
        target,
        since=GEN_START - timedelta(days=1),
        byte_budget=size + 1,  # the whole file, no truncation
    )
    count = sum(1 for _ in scan)
    elapsed = time.perf_counter() - start
    stats = scan.stats  # type: ignore[attr-defined]
    return elapsed, count, {"bytes_read": stats.bytes_read, "truncated": stats.truncated}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the generated log (default 1024)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/recover-bot-bench"), help="where to generate")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each tool (best and median)")
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "log_scan.json")
    args = parser.parse_args(argv)

    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / "worker.log"
    t0 = time.perf_counter()
    gen = generate_log_file(path, size_bytes=args.size_mb * 1024 * 1024)
    gen_s = time.perf_counter() - t0
    size = path.stat().st_size
    mb = size / 1e6
    try:
        time_grep(path, gen.target)  # warm the page cache: both tools then read from memory
        grep_times: list[float] = []
        scan_times: list[float] = []
        grep_count = scan_count = -1
        rss_growth_kb: list[int] = []
        scan_info: dict[str, object] = {}
        for _ in range(args.repeat):
            elapsed, grep_count = time_grep(path, gen.target)
            grep_times.append(elapsed)
            reset = _reset_peak_rss()
            rss_before = _status_kb("VmRSS")
            maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            elapsed, scan_count, scan_info = time_scan(path, gen.target, size)
            scan_times.append(elapsed)
            if reset:
                rss_growth_kb.append(_status_kb("VmHWM") - rss_before)
            else:
                rss_growth_kb.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before)
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)

    grep_best, scan_best = min(grep_times), min(scan_times)
    grep_med, scan_med = statistics.median(grep_times), statistics.median(scan_times)
    result = {
        "file_bytes": size,
        "total_lines": gen.total_lines,
        "target": gen.target,
        "generator_target_lines": gen.target_lines,
        "grep_count": grep_count,
        "scan_count": scan_count,
        "counts_equal": grep_count == scan_count == gen.target_lines,
        "grep_mb_s_best": round(mb / grep_best, 1),
        "scan_mb_s_best": round(mb / scan_best, 1),
        "grep_mb_s_median": round(mb / grep_med, 1),
        "scan_mb_s_median": round(mb / scan_med, 1),
        "ratio_best": round(grep_best / scan_best, 3),
        "ratio_median": round(grep_med / scan_med, 3),
        "target_ratio": round(1 / 3, 3),
        "peak_rss_growth_mb": round(max(rss_growth_kb) / 1024, 1),
        "target_peak_rss_growth_mb": 50,
        "scan": scan_info,
        "repeat": args.repeat,
        "generate_seconds": round(gen_s, 1),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    result["meets_targets"] = bool(
        result["counts_equal"] and result["ratio_median"] >= 1 / 3 and result["peak_rss_growth_mb"] < 50
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"log_scan: {size / 2**20:.0f} MiB, {gen.total_lines} lines, target {gen.target}")
    print(f"{'tool':<16}{'MB/s best':>12}{'MB/s median':>14}{'lines':>10}")
    print(f"{'grep -F -c':<16}{result['grep_mb_s_best']:>12}{result['grep_mb_s_median']:>14}{grep_count:>10}")
    print(f"{'FileLogSource':<16}{result['scan_mb_s_best']:>12}{result['scan_mb_s_median']:>14}{scan_count:>10}")
    print(f"ratio scan/grep: best {result['ratio_best']}, median {result['ratio_median']} (target >= 0.333)")
    print(f"peak RSS growth while scanning: {result['peak_rss_growth_mb']} MB (target < 50)")
    print(f"generator's count {gen.target_lines}; counts equal: {result['counts_equal']}")
    print(f"meets targets: {result['meets_targets']}  -> {args.out}")
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
