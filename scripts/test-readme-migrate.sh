#!/bin/sh
# Runs the stock-migrate commands of docs/install.md (the ```sh block after
# "The migrations use their own history table") as pasted, with its
# placeholder URL pgx5://user@host/db pointed at a scratch database, then
# its `down -all` counterpart, and checks what the page says: up reaches the
# newest migration, and after down only the empty history table
# pglease_schema_migrations remains. (The README's own set-up commands are
# run by internal/testing/readme's TestREADMESetup.)
#
# Server: PGLEASE_TEST_DATABASE_URL (a postgres:// URL), else
# postgres://postgres@127.0.0.1:5432/postgres. Needs go and psql.
# Exit status: 0 passed, 1 failed, 2 could not run.
set -eu
cd "$(dirname "$0")/.."

admin=${PGLEASE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db="pglease_migrate_$$"
scratch=$(printf '%s' "$admin" | sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/$db#")
authority=$(printf '%s' "$admin" | sed -n -E 's#^postgres(ql)?://([^/?]*).*#\2#p')
ssl=$(printf '%s' "$admin" | sed -n -E 's#.*[?&](sslmode=[a-z-]+).*#\&\1#p')
[ -n "$authority" ] || { echo "test-readme-migrate: PGLEASE_TEST_DATABASE_URL must be a postgres:// URL" >&2; exit 2; }
target="pgx5://$authority/$db?x-migrations-table=pglease_schema_migrations$ssl"

fail() {
    echo "test-readme-migrate: $*" >&2
    exit 1
}

# The block's commands, continuation lines joined, placeholder replaced.
page=docs/install.md
cmds=$(awk '/^The migrations use their own history table/ { found = 1 } found && /^```sh$/ { on = 1; next } on && /^```$/ { exit } on' "$page" |
    sed -e ':a' -e '/\\$/{N;s/\\\n *//;ba' -e '}' |
    sed "s#pgx5://user@host/db?x-migrations-table=pglease_schema_migrations#$target#")
[ "$(printf '%s\n' "$cmds" | grep -c "$db")" -ge 2 ] ||
    { echo "test-readme-migrate: no migrate commands with pgx5://user@host/db after \"The migrations use their own history table\" in $page" >&2; exit 2; }

psql -X -q -v ON_ERROR_STOP=1 -d "$admin" -c "CREATE DATABASE $db" >/dev/null ||
    { echo "test-readme-migrate: cannot create a scratch database (the user needs CREATEDB)" >&2; exit 2; }
trap 'psql -X -q -d "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT

q() { psql -X -A -t -v ON_ERROR_STOP=1 -d "$scratch" -c "$1"; }

printf '%s\n' "$cmds" | while IFS= read -r cmd; do
    echo "test-readme-migrate: $(printf '%s' "$cmd" | sed 's#pgx5://[^ ]*#pgx5://…#')" >&2
    sh -c "$cmd" || fail "the command of $page failed: $cmd"
done
latest=$(ls migrations/*.up.sql | wc -l)
[ "$(q 'SELECT version FROM pglease_schema_migrations')" = "$latest" ] || fail "up did not reach migration $latest"
[ "$(q "SELECT count(*) > 0 FROM pg_proc WHERE proname = 'acquire' AND pronamespace = 'pglease'::regnamespace")" = t ] ||
    fail "up did not install pglease.acquire"

down=$(printf '%s\n' "$cmds" | sed -n 's/ up$/ down -all/p')
[ -n "$down" ] || fail "no command ending in ' up' in the block of $page"
sh -c "$down" >/dev/null 2>&1 || fail "down -all failed: $down"
[ "$(q "SELECT count(*) FROM pg_namespace WHERE nspname = 'pglease'")" = 0 ] || fail "down left schema pglease"
[ "$(q "SELECT count(*) FROM pg_class WHERE relname = 'pglease_schema_migrations'")" = 1 ] ||
    fail "down dropped pglease_schema_migrations: $page says it remains"
[ "$(q 'SELECT count(*) FROM pglease_schema_migrations')" = 0 ] || fail "the history table is not empty after down"
echo "test-readme-migrate: the migrate commands of $page ran as pasted; after down -all only the empty pglease_schema_migrations remains"
