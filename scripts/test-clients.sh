#!/bin/sh
# Runs the non-Go clients against a real Postgres: the README's psql block
# and the sql blocks of docs/sql-clients.md (scripts/test-readme-psql.sh),
# the stock migrate commands of docs/install.md
# (scripts/test-readme-migrate.sh), the
# Python example (examples/python, unittest, Debian's python3-psycopg
# under /usr/bin/python3) and the Node example (examples/node, node --test
# over pg from npm, installed with npm ci from its lockfile). Ends with one
# line "clients: N passed, M failed" counting the tests of all four.
#
# Server: PGLEASE_TEST_DATABASE_URL (a postgres:// URL to a database whose
# user may CREATE DATABASE), else postgres://postgres@127.0.0.1:5432/postgres.
# Each test makes and drops databases of its own.
#
# Needs psql, python3-psycopg and node with npm: `make deps` installs the
# Debian packages; this script installs nothing but examples/node's
# node_modules.
#
# Exit status: 0 all passed, 1 some failed, 2 could not run.
set -eu
cd "$(dirname "$0")/.."

admin=${PGLEASE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
export PGLEASE_TEST_DATABASE_URL="$admin"
python=/usr/bin/python3

die() {
    echo "test-clients: $*" >&2
    exit 2
}

command -v go >/dev/null 2>&1 || die "go is missing: the migrate commands of docs/install.md need it (Go 1.26)"
command -v psql >/dev/null 2>&1 || die "psql is missing: make deps (Debian: apt-get install postgresql-client)"
"$python" -c 'import psycopg' 2>/dev/null ||
    die "psycopg 3 is missing for $python: make deps (Debian: apt-get install python3-psycopg)"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
    die "node and npm are missing: install Node.js 20 or later with npm (Debian: apt-get install nodejs npm)"
psql -X -q -A -t -d "$admin" -c 'SELECT 1' >/dev/null ||
    die "cannot reach the PostgreSQL server at $(printf '%s' "$admin" | sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#'); start it or set PGLEASE_TEST_DATABASE_URL"

log=$(mktemp "${TMPDIR:-/tmp}/pglease-clients.XXXXXX")
trap 'rm -f "$log"' EXIT
passed=0
failed=0

echo "test-clients: the README's psql block and the guide's (docs/sql-clients.md)" >&2
if ./scripts/test-readme-psql.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "test-clients: the stock migrate commands of docs/install.md" >&2
if ./scripts/test-readme-migrate.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "test-clients: examples/python ($python -m unittest)" >&2
(cd examples/python && PYTHONDONTWRITEBYTECODE=1 "$python" -m unittest -v) 2>&1 | tee "$log"
# unittest ends with "Ran N tests" and "OK" or "FAILED (failures=F, errors=E)".
ran=$(sed -n -E 's/^Ran ([0-9]+) tests?.*/\1/p' "$log")
bad=$(awk '/^FAILED/ { while (match($0, /(failures|errors)=[0-9]+/)) { s += substr($0, RSTART + index(substr($0, RSTART, RLENGTH), "=")); $0 = substr($0, RSTART + RLENGTH) } } END { print s + 0 }' "$log")
[ -n "$ran" ] || ran=0 bad=1 # it did not run
passed=$((passed + ran - bad)) failed=$((failed + bad))

echo "test-clients: examples/node (npm ci, node --test)" >&2
(cd examples/node && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee "$log"
ok=$(sed -n -E 's/^# pass ([0-9]+)$/\1/p' "$log")
bad=$(sed -n -E 's/^# fail ([0-9]+)$/\1/p' "$log")
[ -n "$ok" ] && [ -n "$bad" ] || ok=0 bad=1 # it did not run
passed=$((passed + ok)) failed=$((failed + bad))

echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
