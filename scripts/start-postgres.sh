#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for recover-bot's PostgreSQL tests, and print how to reach it.
#
#   eval "$(scripts/start-postgres.sh [DIR])"     # DIR defaults to .postgres-test/ in the repository
#
# Idempotent: if the server under DIR already answers, it is reused. initdb + pg_ctl on a loopback
# port, its data folder and socket under DIR (trust authentication on 127.0.0.1 only: a test server).
# As root the server runs as the `postgres` user (installed with apt, package `postgresql`, when
# initdb is missing). Diagnostics go to stderr; stdout carries only the `export RECOVER_TEST_PG_URL=...`
# line. Stop it with scripts/stop-postgres.sh [DIR].
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo/.postgres-test}"
# The port: RECOVER_TEST_PG_PORT, else the one this DIR's server was started on, else a free one the
# system hands out (a fixed or random number can be taken by another program's socket).
port="${RECOVER_TEST_PG_PORT:-}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
data="$dir/data"
log="$dir/postgres.log"
port_file="$dir/port"
if [ -z "$port" ] && [ -f "$port_file" ]; then port="$(cat "$port_file")"; fi
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

say() { printf 'start-postgres: %s\n' "$*" >&2; }

bindir() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        if [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
    return 1
}

if ! bin="$(bindir)"; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "initdb is missing and this user cannot install it (root + apt): apt-get install postgresql"
        exit 1
    fi
    say "installing postgresql with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -q --no-install-recommends postgresql >&2
    bin="$(bindir)"
fi

# As root, the server runs as an unprivileged user (PostgreSQL refuses to run as root).
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$dir"
    if ! runuser -u postgres -- test -w "$dir"; then
        say "the postgres user cannot reach $dir (a parent folder is private): give a DIR under /tmp"
        exit 1
    fi
fi

answers() { [ -n "$port" ] && as_owner "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" >/dev/null 2>&1; }

if [ -f "$data/postmaster.pid" ] && answers; then
    say "postgres already running under $dir (port $port)"
    echo "export RECOVER_TEST_PG_URL=postgresql://recover@127.0.0.1:$port/recover"
    exit 0
fi

if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data"
    as_owner "$bin/initdb" -D "$data" -U recover --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { say "initdb failed:"; tail -n 20 "$dir/initdb.log" >&2; exit 1; }
fi

# Loopback only; the socket in DIR (not /var/run, which may not exist); fsync off: throwaway data.
# max_connections: a `recover-bot serve` pair holds about 30 (a connection per worker thread), and up
# to three xdist workers may each run a pair while a SIGKILLed bot's connections wait to be reaped.
# A free port can still be taken between the check and the bind: a chosen one is tried again, a new one
# each time (a port given in RECOVER_TEST_PG_PORT is tried once).
fixed="${RECOVER_TEST_PG_PORT:-}"
for attempt in 1 2 3 4 5; do
    [ -n "$fixed" ] || port="$(free_port)"
    if as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c fsync=off -c max_connections=300" \
        start >&2; then
        break
    fi
    if [ -n "$fixed" ] || [ "$attempt" = 5 ]; then
        say "pg_ctl start failed (port $port); last lines of $log:"; tail -n 20 "$log" >&2; exit 1
    fi
    say "port $port was taken; trying another"
done
echo "$port" >"$port_file"
url="postgresql://recover@127.0.0.1:$port/recover"

if ! as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U recover -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'recover'" | grep -q 1; then
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U recover recover
fi
say "postgres running under $dir (port $port); log: $log"
echo "export RECOVER_TEST_PG_URL=$url"
