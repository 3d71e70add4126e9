#!/usr/bin/env bash
# Stop the private Docker engine started by scripts/start-dockerd.sh [DIR], by its PID.
# Idempotent: nothing running is not an error. Containers and images stay in DIR/data.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo/.docker-test}"
pidfile="$dir/dockerd.pid"

say() { printf 'stop-dockerd: %s\n' "$*" >&2; }

if [ ! -f "$pidfile" ]; then
    say "no pidfile at $pidfile: nothing to stop"
    exit 0
fi
pid="$(cat "$pidfile")"
if ! kill -0 "$pid" 2>/dev/null; then
    say "dockerd (pid $pid) is not running; removing the stale pidfile"
    rm -f "$pidfile"
    exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { say "dockerd (pid $pid) stopped"; exit 0; }
    sleep 0.5
done
say "dockerd (pid $pid) did not stop within 30 s; sending SIGKILL"
kill -KILL "$pid" 2>/dev/null || true
rm -f "$pidfile"
