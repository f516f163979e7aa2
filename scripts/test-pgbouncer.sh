#!/bin/sh
# Runs the client and supervisor suites with every client connection going
# through PgBouncer in transaction pooling mode (PGLEASE_TEST_PGBOUNCER=1:
# the test harness starts a pgbouncer of its own in front of the test
# server, see internal/testing/pgtest/pgbouncer.go). Migrations and administrative
# connections stay direct.
#
# Usage: scripts/test-pgbouncer.sh [go test flags...]
#
# The tests that assert a wake-up at a release through LISTEN/NOTIFY skip
# themselves (pgtest.ThroughPooler): behind transaction pooling a LISTEN is
# lost with the server connection it ran on, so waiters wake at the
# holder's expiry instead (see docs/compatibility.md).
#
# Server: as for go test (PGLEASE_TEST_DATABASE_URL, PGLEASE_TEST_PG_BINDIR,
# or the local server). Needs pgbouncer (make deps).
set -eu
cd "$(dirname "$0")/.."

pkgs="./pglease/ ./supervisor/ ./runslots/"

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    echo "test-pgbouncer: pgbouncer is not installed (make deps, or apt-get install pgbouncer)" >&2
    exit 2
fi

echo "test-pgbouncer: go test $pkgs through PgBouncer (transaction pooling)" >&2
# shellcheck disable=SC2086 # $pkgs is a list
exec env PGLEASE_TEST_PGBOUNCER=1 go test -count=1 "$@" $pkgs
