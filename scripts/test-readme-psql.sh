#!/bin/sh
# Runs the README's psql block (the ```sql block after "From psql") as pasted,
# with psql -v ON_ERROR_STOP=1, on a scratch database with migrations/*.up.sql
# applied, then checks what it did: the report row written under fence 1,
# the lease released. Runs it a second time to see it take fence 2, and once
# while another holder has the lease. Then runs every ```sql block of
# docs/sql-clients.md, each on a fresh copy of the migrated database.
#
# Server: PGLEASE_TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres.
# Exit status: 0 passed, 1 failed, 2 could not run.
set -eu
cd "$(dirname "$0")/.."

admin=${PGLEASE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db="pglease_readme_$$"
scratch=$(printf '%s' "$admin" | sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/$db#")
block=$(mktemp "${TMPDIR:-/tmp}/pglease-readme.XXXXXX")

fail() {
    echo "test-readme-psql: $*" >&2
    exit 1
}

awk '/^From psql/ { found = 1 } found && /^```sql$/ { on = 1; next } on && /^```$/ { exit } on' README.md >"$block"
[ -s "$block" ] || { echo "test-readme-psql: no \`\`\`sql block after \"From psql\" in README.md" >&2; exit 2; }

psql -X -q -v ON_ERROR_STOP=1 -d "$admin" -c "CREATE DATABASE $db" >/dev/null ||
    { echo "test-readme-psql: cannot create a scratch database (the user needs CREATEDB)" >&2; exit 2; }
trap 'rm -f "$block"; for d in $db ${db}_fresh; do psql -X -q -d "$admin" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null; done' EXIT
for f in migrations/*.up.sql; do
    psql -X -q -v ON_ERROR_STOP=1 -d "$scratch" -f "$f" >/dev/null || { echo "test-readme-psql: cannot apply $f" >&2; exit 2; }
done
# A copy with the fresh schema, the template of the guide's blocks below.
psql -X -q -v ON_ERROR_STOP=1 -d "$admin" -c "CREATE DATABASE ${db}_fresh TEMPLATE $db" >/dev/null

for want in 1 2; do
    out=$(psql -X -v ON_ERROR_STOP=1 -d "$scratch" -f "$block" 2>&1) || fail "the README's psql block failed (run $want):
$out"
    got=$(psql -X -A -t -d "$scratch" -c "SELECT fence || ' ' || state FROM pglease.lease_status WHERE name = 'nightly-report'")
    [ "$got" = "$want free" ] || fail "after run $want: got lease '$got', want '$want free'
$out"
done
done=$(psql -X -A -t -d "$scratch" -c "SELECT done FROM reports WHERE day = current_date")
[ "$done" = t ] || fail "the report was not marked done (got '$done')"

# Held elsewhere: the block must not write, and must say who holds it.
psql -X -q -A -t -d "$scratch" -c "UPDATE reports SET done = false; SELECT acquired FROM pglease.acquire('nightly-report', 'host-b/1', '1 minute')" >/dev/null
out=$(psql -X -v ON_ERROR_STOP=1 -d "$scratch" -f "$block" 2>&1) || fail "the README's psql block failed while the lease is held elsewhere:
$out"
case $out in *"held by host-b/1"*) ;; *) fail "the block did not say who holds the lease:
$out" ;; esac
done=$(psql -X -A -t -d "$scratch" -c "SELECT done FROM reports WHERE day = current_date")
[ "$done" = f ] || fail "the block wrote without the lease"
echo "test-readme-psql: the README's psql block ran as pasted (granted twice, refused once)"

# The guide's blocks, each on a fresh copy of the schema.
guide=docs/sql-clients.md
n=0
while :; do
    n=$((n + 1))
    awk -v want="$n" '/^```sql$/ { i++; on = (i == want); next } /^```$/ { on = 0 } on' "$guide" >"$block"
    [ -s "$block" ] || break
    copy="${db}_$n"
    psql -X -q -v ON_ERROR_STOP=1 -d "$admin" -c "CREATE DATABASE $copy TEMPLATE ${db}_fresh" >/dev/null
    out=$(psql -X -v ON_ERROR_STOP=1 -d "$(printf '%s' "$scratch" | sed "s#/$db#/$copy#")" -f "$block" 2>&1) || st=$?
    psql -X -q -d "$admin" -c "DROP DATABASE $copy WITH (FORCE)" >/dev/null
    [ "${st:-0}" -eq 0 ] || fail "$guide: sql block $n failed:
$(cat "$block")
$out"
done
[ "$n" -gt 1 ] || fail "no \`\`\`sql block in $guide"
echo "test-readme-psql: the $((n - 1)) sql blocks of $guide ran as pasted"
