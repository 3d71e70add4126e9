#!/usr/bin/env bash
# Stop the throwaway PostgreSQL server started by scripts/start-postgres.sh [DIR] and remove its data.
# Idempotent: nothing running is not an error.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo/.postgres-test}"
data="$dir/data"

say() { printf 'stop-postgres: %s\n' "$*" >&2; }

if [ ! -f "$data/postmaster.pid" ]; then
    say "no server under $data: nothing to stop"
else
    bin=""
    for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && bin="$d"; done
    [ -n "$bin" ] || bin="$(dirname "$(command -v pg_ctl)")"
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w -t 30 stop >&2 || true
    else
        "$bin/pg_ctl" -D "$data" -m fast -w -t 30 stop >&2 || true
    fi
    say "postgres under $dir stopped"
fi
# Throwaway: the data folder goes with the server.
rm -rf "$data"
