#!/usr/bin/env bash
# The whole suite: lint, types, tests. Called by the README's test command and by .ci/run.
#
# Docker tests need a real engine. When DOCKER_HOST does not answer and we are root with apt, an engine
# is installed and started for this run (and stopped at the end); otherwise the Docker tests are
# skipped with a loud reason. Under CI=true a Docker test never skips: it fails.
# The same for PostgreSQL (the store's second engine): when RECOVER_TEST_PG_URL is unset and we are root
# with apt, a throwaway server is started for this run (scripts/start-postgres.sh) and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

started_here=""
pg_here=""
cleanup() {
    if [ -n "$started_here" ]; then scripts/stop-dockerd.sh "$started_here" >/dev/null 2>&1 || true; fi
    if [ -n "$pg_here" ]; then scripts/stop-postgres.sh "$pg_here" >/dev/null 2>&1 || true; rm -rf "$pg_here"; fi
}
trap cleanup EXIT

if ! docker version >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        dir="$PWD/.docker-test"
        echo "== starting a Docker engine for the Docker tests (in $dir)"
        eval "$(scripts/start-dockerd.sh "$dir")"
        started_here="$dir"
    else
        echo "!!! ================================================================== !!!"
        echo "!!! No Docker engine answers and this user cannot start one (root + apt). !!!"
        echo "!!! The Docker tests will be SKIPPED. Set DOCKER_HOST or run as root.     !!!"
        echo "!!! ================================================================== !!!"
    fi
fi

if [ -z "${RECOVER_TEST_PG_URL:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # Under /tmp: the postgres user must reach the folder (a checkout under /root cannot).
        pg_here="$(mktemp -d /tmp/recover-pg.XXXXXX)"
        chmod 755 "$pg_here"
        echo "== starting a PostgreSQL server for the store's PostgreSQL tests (in $pg_here)"
        # A free port of its own (start-postgres.sh asks the system), so two runs never meet on one server.
        eval "$(scripts/start-postgres.sh "$pg_here")"
    else
        echo "!!! ======================================================================= !!!"
        echo "!!! RECOVER_TEST_PG_URL is unset and this user cannot start PostgreSQL (root +  !!!"
        echo "!!! apt). The PostgreSQL tests will be SKIPPED. Set RECOVER_TEST_PG_URL.        !!!"
        echo "!!! ======================================================================= !!!"
    fi
fi

echo "== ruff"
python -m ruff format --check bot tests bench
python -m ruff check bot tests bench
echo "== mypy"
python -m mypy
echo "== import-linter (the layering in pyproject.toml)"
lint-imports --no-cache
echo "== pytest"
# In RECOVER_TEST_WORKERS processes (pytest-xdist; 3 by default: most tests wait on processes, sockets and
# timers, so a third worker fills the waits of two cores). RECOVER_TEST_WORKERS=0 runs them in this process.
python -m pytest -n "${RECOVER_TEST_WORKERS:-3}" "$@"
