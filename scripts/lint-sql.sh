#!/bin/sh
# Static check of every PL/pgSQL function with plpgsql_check: fails on any
# error or warning (all_warnings, including performance hints). Applies the
# migrations to a scratch database on the test server
# (PGLEASE_TEST_DATABASE_URL, else the local server) and drops it afterwards.
# Installs nothing: when plpgsql_check or psql is missing it names the
# package (make deps installs it).
set -eu
cd "$(dirname "$0")/.."

admin=${PGLEASE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
command -v psql >/dev/null 2>&1 ||
    { echo "lint-sql: psql is missing: make deps (as root or with sudo), or apt-get install postgresql-client" >&2; exit 1; }
db="pglease_lint_$$"
scratch=$(printf '%s' "$admin" | sed -E "s#(postgres(ql)?://[^/]*)/[^?]*#\1/$db#")

psql -X -q -v ON_ERROR_STOP=1 -d "$admin" -c "CREATE DATABASE $db" >/dev/null
trap 'psql -X -q -d "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT

if ! psql -X -q -v ON_ERROR_STOP=1 -d "$scratch" -c 'CREATE EXTENSION plpgsql_check' >/dev/null 2>&1; then
    major=$(($(psql -X -A -t -d "$admin" -c 'SHOW server_version_num') / 10000))
    printf '%s\n' "lint-sql: the plpgsql_check extension is not installed on the PostgreSQL $major server." \
        "  Install it with make deps (as root or with sudo), or: apt-get install postgresql-$major-plpgsql-check" >&2
    exit 1
fi
for f in migrations/*.up.sql; do psql -X -q -v ON_ERROR_STOP=1 -d "$scratch" -f "$f" >/dev/null; done

report=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$scratch" <<'SQL'
SELECT p.oid::regprocedure || ': line ' || coalesce(c.lineno::text, '?') || ': '
       || c.level || ': ' || c.message || coalesce(' (' || c.detail || ')', '')
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
-- A trigger function is checked on a table of one of its triggers, with
-- its transition table (0.4.0's tenure history).
LEFT JOIN LATERAL (SELECT tg.tgrelid, tg.tgoldtable FROM pg_catalog.pg_trigger AS tg
                   WHERE tg.tgfoid = p.oid ORDER BY tg.tgrelid::regclass::text LIMIT 1) AS tr ON true
CROSS JOIN LATERAL plpgsql_check_function_tb(p.oid, coalesce(tr.tgrelid, 0), all_warnings => true,
                                             oldtable => tr.tgoldtable) AS c
WHERE n.nspname = 'pglease' AND l.lanname = 'plpgsql'
ORDER BY 1;
SQL
)
count=$(psql -X -q -A -t -d "$scratch" -c "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang WHERE n.nspname = 'pglease' AND l.lanname = 'plpgsql'")
if [ -n "$report" ]; then
    echo "lint-sql: plpgsql_check found problems:" >&2
    echo "$report" >&2
    exit 1
fi
echo "lint-sql: $count PL/pgSQL functions pass plpgsql_check with all warnings on"
