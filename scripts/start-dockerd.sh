#!/usr/bin/env bash
# Start a private Docker engine for recover-bot's Docker tests, and print how to reach it.
#
#   eval "$(scripts/start-dockerd.sh [DIR])"      # DIR defaults to .docker-test/ in the repository
#
# Idempotent: if the engine under DIR already answers, it is reused. The engine gets its own
# --data-root, --exec-root, --pidfile and unix socket under DIR, so it never touches a system Docker.
# Needs root. If docker.io / busybox-static / iptables are missing, they are installed with apt.
# Diagnostics go to stderr; stdout carries only the `export DOCKER_HOST=...` line.
# Stop it with scripts/stop-dockerd.sh [DIR].
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo/.docker-test}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
log="$dir/dockerd.log"
host="unix://$sock"

say() { printf 'start-dockerd: %s\n' "$*" >&2; }

answers() { DOCKER_HOST="$host" timeout 10 docker version >/dev/null 2>&1; }

if [ "${#sock}" -gt 100 ]; then
    say "socket path too long for a unix socket (${#sock} chars): $sock — use a shorter DIR"
    exit 2
fi

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && answers; then
    say "dockerd already running under $dir (pid $(cat "$pidfile"))"
    echo "export DOCKER_HOST=$host"
    exit 0
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
[ -x /usr/bin/busybox ] || [ -x /bin/busybox ] || missing+=(busybox-static)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        say "missing ${missing[*]} and not root: install them (apt-get install docker.io busybox-static iptables) or run as root"
        exit 1
    fi
    say "installing ${missing[*]} with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -q --no-install-recommends docker.io busybox-static iptables >&2
fi
if ! command -v docker >/dev/null 2>&1; then
    say "the docker CLI is missing (docker.io provides it)"
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    say "dockerd needs root; run this script as root (or point DOCKER_HOST at an engine you can use)"
    exit 1
fi

# A stale pidfile or socket from an engine that died would make dockerd refuse to start.
if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    rm -f "$pidfile"
fi
rm -f "$sock"
mkdir -p "$dir/data" "$dir/exec"

# setsid: the engine outlives this script and is not killed with the caller's process group.
# No bridge network and no iptables rules: the test containers need no network, and a second engine
# on the machine (another checkout) would otherwise fight over the docker0 bridge.
setsid dockerd \
    --data-root "$dir/data" \
    --exec-root "$dir/exec" \
    --pidfile "$pidfile" \
    -H "$host" \
    --bridge=none --iptables=false \
    >"$log" 2>&1 </dev/null &

for _ in $(seq 1 120); do
    if answers; then
        say "dockerd running under $dir (pid $(cat "$pidfile" 2>/dev/null || echo '?')); log: $log"
        echo "export DOCKER_HOST=$host"
        exit 0
    fi
    sleep 0.5
done
say "dockerd did not answer within 60 s; last lines of $log:"
tail -n 20 "$log" >&2 || true
exit 1
