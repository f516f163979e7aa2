#!/bin/sh
# Interleaving tests of the pglease functions with PostgreSQL's own isolation
# tester (pg_isolation_regress + isolationtester): each spec in
# sql/tests/isolation/*.spec runs its permutations of steps from several
# sessions, and the output, blocked steps shown as <waiting ...>, must match
# sql/tests/isolation/expected/NAME.out.
#
# Usage: scripts/test-isolation.sh [SPEC...]
#   no argument: the specs listed in sql/tests/isolation/isolation_schedule;
#   SPEC: a spec name (file name without .spec), run instead of the schedule.
#
# Server: PGLEASE_TEST_DATABASE_URL (a libpq URL or connection string to a
# database whose user may CREATE DATABASE), else the local server
# postgres://postgres@127.0.0.1:5432/postgres. A scratch database is created
# there, every migration in migrations/ applied to it, and it is dropped at
# the end.
#
# Tester: PG_ISOLATION_REGRESS when set, else the one of the server's major
# version at /usr/lib/postgresql/MAJOR/lib/pgxs/src/test/isolation/, which
# Debian ships in postgresql-client-MAJOR (also psql); make deps installs it.
#
# PGLEASE_ISOLATION_EXTRA_SQL=FILE: SQL applied after the migration, e.g. a
# CREATE OR REPLACE of a deliberately broken function, to see that the specs
# catch it.
#
# Exit status: 0 all passed, 1 some spec failed (the diff is printed),
# 2 the tests could not be run (no server, no tester).
set -eu
cd "$(dirname "$0")/.."

specdir=sql/tests/isolation
schedule=$specdir/isolation_schedule
admin=${PGLEASE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
shown=$(printf '%s' "$admin" | sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#; s#(password=)[^ ]*#\1***#')

die() {
    echo "test-isolation: $*" >&2
    exit 2
}

# apt_install PKG...: says which Debian packages to install and fails; this
# script installs nothing (make deps does, as root or with sudo).
apt_install() {
    echo "test-isolation: missing: $*; install with make deps, or apt-get install $*" >&2
    return 1
}

# --- psql --------------------------------------------------------------------
if ! command -v psql >/dev/null 2>&1; then
    guess=$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)
    apt_install "postgresql-client${guess:+-$guess}" || apt_install postgresql-client ||
        die "psql is missing and could not be installed (Debian: apt-get install postgresql-client)"
fi

# --- server ------------------------------------------------------------------
if ! version=$(psql -X -A -t -v ON_ERROR_STOP=1 -d "$admin" -c 'SHOW server_version_num' 2>&1); then
    echo "$version" >&2
    die "cannot reach the PostgreSQL server at $shown; start it (e.g. pg_ctlcluster 15 main start) or set PGLEASE_TEST_DATABASE_URL"
fi
case $version in
    '' | *[!0-9]*) die "unexpected server_version_num from $shown: $version" ;;
esac
major=$((version / 10000))

# --- isolation tester ----------------------------------------------------------
tester=${PG_ISOLATION_REGRESS:-/usr/lib/postgresql/$major/lib/pgxs/src/test/isolation/pg_isolation_regress}
if [ ! -x "$tester" ] && [ -z "${PG_ISOLATION_REGRESS:-}" ]; then
    reinstall=""
    # Installed but the file is gone: only a reinstall brings it back.
    dpkg -s "postgresql-client-$major" >/dev/null 2>&1 && reinstall="--reinstall"
    apt_install $reinstall "postgresql-client-$major" || true
fi
[ -x "$tester" ] ||
    die "the isolation tester for PostgreSQL $major is missing: $tester (Debian ships it in postgresql-client-$major; or set PG_ISOLATION_REGRESS to a pg_isolation_regress of the server's major version)"
[ -x "$(dirname "$tester")/isolationtester" ] ||
    die "isolationtester is missing beside $tester"

# --- specs -------------------------------------------------------------------
if [ $# -gt 0 ]; then
    tests="$*"
else
    [ -f "$schedule" ] || die "no schedule at $schedule"
    tests=$(sed -n 's/^test:[[:space:]]*//p' "$schedule" | tr '\n' ' ')
fi
for t in $tests; do
    [ -f "$specdir/$t.spec" ] || die "no spec $specdir/$t.spec"
    [ -f "$specdir/expected/$t.out" ] || die "no expected output $specdir/expected/$t.out"
done

# --- scratch database ----------------------------------------------------------
db="pglease_isolation_$$"
out=$(mktemp -d "${TMPDIR:-/tmp}/pglease-isolation.XXXXXX")
cleanup() {
    psql -X -q -d "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 ||
        echo "test-isolation: could not drop database $db" >&2
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 2' INT TERM HUP

psql -X -q -v ON_ERROR_STOP=1 -d "$admin" -c "CREATE DATABASE $db" >/dev/null ||
    die "cannot create a scratch database on $shown (the user needs CREATEDB)"
# Commits need not wait for the WAL flush here: locking and visibility are the
# same, and the specs commit often (a flush each would make them slow).
psql -X -q -d "$admin" -c "ALTER DATABASE $db SET synchronous_commit = off" >/dev/null ||
    echo "test-isolation: could not turn synchronous_commit off; the specs will be slower" >&2

# The tester connects with "dbname=$db" and takes the rest from PGHOST,
# PGPORT, PGUSER (passed as options) and the environment: ask psql where the
# admin connection went, and carry over a password and sslmode from the URL.
conn=$(psql -X -A -t -d "$admin" -c '\echo :HOST :PORT :USER') ||
    die "cannot read the connection parameters of $shown"
set -- $conn
host=$1 port=$2 user=$3
pw=$(printf '%s' "$admin" | sed -n -E 's#^postgres(ql)?://[^:/@]*:([^@]*)@.*#\2#p')
[ -n "$pw" ] && export PGPASSWORD="$pw"
ssl=$(printf '%s' "$admin" | sed -n -E 's#.*sslmode=([a-z-]+).*#\1#p')
[ -n "$ssl" ] && export PGSSLMODE="$ssl"
unset PGDATABASE PGSERVICE 2>/dev/null || true

for f in migrations/*.up.sql; do
    psql -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U "$user" -d "$db" \
        -f "$f" >/dev/null ||
        die "cannot apply $f to $db"
done
if [ -n "${PGLEASE_ISOLATION_EXTRA_SQL:-}" ]; then
    echo "test-isolation: applying $PGLEASE_ISOLATION_EXTRA_SQL after the migration" >&2
    psql -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U "$user" -d "$db" \
        -f "$PGLEASE_ISOLATION_EXTRA_SQL" >/dev/null ||
        die "cannot apply $PGLEASE_ISOLATION_EXTRA_SQL to $db"
fi

# pg_isolation_regress reads OUTPUTDIR/specs/NAME.spec before INPUTDIR/specs/.
mkdir -p "$out/specs"
cp "$specdir"/*.spec "$out/specs/"

start=$(date +%s)
status=0
# shellcheck disable=SC2086 # $tests is a list of names
"$tester" --use-existing --host="$host" --port="$port" --user="$user" --dbname="$db" \
    --inputdir="$specdir" --outputdir="$out" $tests >"$out/run.log" 2>&1 || status=$?
cat "$out/run.log"
elapsed=$(($(date +%s) - start))

total=$(echo $tests | wc -w)
# "test NAME ... FAILED" up to PostgreSQL 15, "not ok N - NAME" from 16 on.
failed=$(grep -cE '[.]{3} FAILED|^not ok ' "$out/run.log" || true)
passed=$((total - failed))

if [ "$status" -ne 0 ]; then
    if [ -s "$out/regression.diffs" ]; then
        echo "test-isolation: output differs from $specdir/expected (diff -U3 expected actual):"
        cat "$out/regression.diffs"
    fi
    if [ "$failed" -eq 0 ]; then
        die "pg_isolation_regress could not run the specs (exit $status)"
    fi
    echo "isolation: $passed passed, $failed failed"
    exit 1
fi
echo "test-isolation: all specs passed in ${elapsed}s"
echo "isolation: $total passed, 0 failed"
