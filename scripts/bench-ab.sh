#!/bin/sh
# Compares head's SQL functions with those of commit BASE under pgbench:
# acquire + release, renew, claim_slot + release_slot, renew_holder and a
# fenced transaction, each run on a database with BASE's migrations and on
# one with head's, alternated turn by turn on one server, so that both see
# the same load. Prints, per call, the transactions per second of each
# turn and the median of head / BASE. Commits skip the WAL flush
# (synchronous_commit off): what differs is the functions' own time.
#
# Usage: scripts/bench-ab.sh BASE   (make bench-ab BASE=<commit>)
# Environment: PGLEASE_BENCH_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres), AB_CLIENTS (8),
# AB_SECONDS per turn (5), AB_TURNS (5), PGBENCH (pgbench from PATH or
# the server's bin directory).
set -eu
cd "$(dirname "$0")/.."

base=${1:?usage: scripts/bench-ab.sh BASE (a commit whose migrations/ to compare with)}
git rev-parse --verify -q "$base^{commit}" >/dev/null || {
    echo "bench-ab: $base is not a commit of this repository" >&2
    exit 2
}
url=${PGLEASE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
clients=${AB_CLIENTS:-8}
seconds=${AB_SECONDS:-5}
turns=${AB_TURNS:-5}
pgbench=${PGBENCH:-$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -1)}
[ -x "$pgbench" ] || {
    echo "bench-ab: pgbench not found: install postgresql-client or set PGBENCH" >&2
    exit 2
}

tmp=$(mktemp -d)
suffix=$$
dbs="pglease_ab_base_$suffix pglease_ab_head_$suffix"
cleanup() {
    for db in $dbs; do psql -qX "$url" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

dburl() { # dburl DB: url with its database replaced
    printf '%s\n' "$url" | sed -E "s#^(postgres(ql)?://[^/]*)/[^?]*#\1/$1#"
}

# The migrations of each side, in order.
mkdir -p "$tmp/base" "$tmp/head"
for f in $(git ls-tree --name-only "$base" migrations/ | grep '\.up\.sql$' | sort); do
    git show "$base:$f" >"$tmp/base/$(basename "$f")"
done
cp migrations/*.up.sql "$tmp/head/"

for side in base head; do
    db=pglease_ab_${side}_$suffix
    psql -qX -v ON_ERROR_STOP=1 "$url" -c "CREATE DATABASE $db" >/dev/null
    for f in $(ls "$tmp/$side"/*.up.sql | sort); do
        psql -qX -v ON_ERROR_STOP=1 "$(dburl "$db")" -f "$f" >/dev/null
    done
    # What the renewals renew: a lease per client, and ten per holder of
    # renew_holder.
    psql -qX -v ON_ERROR_STOP=1 "$(dburl "$db")" >/dev/null <<EOF
SELECT pglease.acquire('ab/renew/' || c, 'renewer', '24 hours') FROM generate_series(0, $clients - 1) AS c;
SELECT pglease.acquire('ab/holder/' || c || '/' || k, 'holder' || c, '24 hours')
FROM generate_series(0, $clients - 1) AS c, generate_series(1, 10) AS k;
EOF
done

cat >"$tmp/acquire_release.sql" <<'EOF'
\set n random(1, 1000000)
SELECT fence FROM pglease.acquire('ab/' || :n, 'h' || :client_id, '1 hour') \gset
SELECT released FROM pglease.release('ab/' || :n, 'h' || :client_id, :fence);
EOF
cat >"$tmp/renew.sql" <<'EOF'
SELECT fence FROM pglease.lease_status WHERE name = 'ab/renew/' || :client_id \gset
SELECT renewed FROM pglease.renew('ab/renew/' || :client_id, 'renewer', :fence, '24 hours');
EOF
cat >"$tmp/claim_release_slot.sql" <<'EOF'
SELECT slot, fence FROM pglease.claim_slot('ab/pool', 'h' || :client_id, 64, '1 hour', 1) \gset
SELECT released FROM pglease.release_slot('ab/pool', :slot, 'h' || :client_id, :fence);
EOF
cat >"$tmp/renew_holder.sql" <<'EOF'
SELECT cardinality(leases) FROM pglease.renew_holder('holder' || :client_id, '24 hours');
EOF
cat >"$tmp/fenced.sql" <<'EOF'
SELECT fence FROM pglease.lease_status WHERE name = 'ab/renew/' || :client_id \gset
BEGIN;
SELECT pglease.assert_held('ab/renew/' || :client_id, :fence);
COMMIT;
EOF

export PGOPTIONS='-c synchronous_commit=off'
echo "bench-ab: head against $base, $clients clients, $turns turns of $seconds s each, load $(cut -d' ' -f1-3 /proc/loadavg)"
for call in acquire_release renew claim_release_slot renew_holder fenced; do
    ratios=
    line="$call:"
    for turn in $(seq 1 "$turns"); do
        for side in base head; do
            tps=$("$pgbench" -n -c "$clients" -j "$clients" -T "$seconds" -f "$tmp/$call.sql" \
                "$(dburl "pglease_ab_${side}_$suffix")" 2>&1 |
                awk '/^tps = / { printf "%.0f", $3 }')
            [ -n "$tps" ] || { echo "bench-ab: pgbench failed on $side for $call" >&2; exit 1; }
            eval "tps_$side=$tps"
        done
        ratios="$ratios $(awk -v h="$tps_head" -v b="$tps_base" 'BEGIN { printf "%.3f", h / b }')"
        line="$line $tps_base/$tps_head"
    done
    median=$(printf '%s\n' $ratios | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    echo "$line  (base/head tps per turn)  head/base median ${median}x"
done
echo "bench-ab: load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
