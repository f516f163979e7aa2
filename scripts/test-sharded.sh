#!/bin/sh
# Runs pglease sharded by PL/Proxy on real, separate clusters
# (internal/testing/shardtest): two throwaway clusters started from the local
# server binaries, a proxy database (migrations/proxy) over four partition
# databases spread over both, and against the proxy the SQL contract, the
# Go lease client, runslots and the supervisor, role binding across the
# hop, a stopped cluster and a blackholed partition (fault isolation), the
# history checker with backend kills, and adding partitions.
# The tests carry build tag sharded, so that go test ./... (make test, CI)
# does not start their clusters.
#
# With PGLEASE_SHARDED_SUITES=1 it then runs the repository's unchanged
# suites (internal/testing/contract, pglease, runslots, supervisor) with every
# pglease call going through a proxy: internal/testing/shardtest/suiteproxy starts
# a proxy cluster whose template0 is a migrated proxy database, and two
# partition clusters; each test database the harness creates is then a
# proxy whose four partitions are made for it when the harness reads its
# migration history, before the test runs. The tests that cannot hold
# through a proxy are skipped by name, each for the reason given with
# TOP_* and SUB_* below (docs/scaling.md, "What differs through the
# proxy").
#
# Usage: scripts/test-sharded.sh [go test flags...]
#
# Needs PL/Proxy for the server binaries the clusters start from (Debian:
# postgresql-MAJOR-plproxy; make deps installs it). PGLEASE_SHARD_PG_BINDIR
# picks the binaries (default: pg_config's). As root, the clusters run as
# user postgres.
set -eu
cd "$(dirname "$0")/.."

bindir=${PGLEASE_SHARD_PG_BINDIR:-$(pg_config --bindir)}
sharedir=$("$bindir/pg_config" --sharedir 2>/dev/null || pg_config --sharedir)
if [ ! -f "$sharedir/extension/plproxy.control" ]; then
    echo "test-sharded: PL/Proxy is not installed for the server in $bindir (no $sharedir/extension/plproxy.control):" >&2
    echo "  run make deps (Debian package postgresql-MAJOR-plproxy), or set PGLEASE_SHARD_PG_BINDIR to a server that has it" >&2
    exit 2
fi
export PGLEASE_SHARD_PG_BINDIR="$bindir"

echo "test-sharded: proxy and four partitions on two throwaway clusters of $bindir" >&2
go test -tags sharded -race -count=1 -timeout 10m "$@" ./internal/testing/shardtest/

[ "${PGLEASE_SHARDED_SUITES:-}" = 1 ] || exit 0

# Exceptions, by reason (top-level tests, and subtests of TestLeases and
# TestSlots):
# - the migrations and ACLs of the partition schema, and tests that read or
#   write pglease's tables or internal functions, which live on the
#   partitions (make test runs them on a pglease database);
#   (TestRunDeadline hangs renewals by locking a row of pglease.slots,
#   TestKeeperKeepsMany counts live rows of pglease.leases and slots,
#   TestMetrics compares pglease.metrics with the tables and reads it twice
#   in one repeatable-read snapshot; shardtest's TestMetricsThroughProxy
#   covers the merge);
TOP_PARTITION='TestMigrationsBesideAppHistory|TestMigrateCLI|TestExactACL|TestBadInputRefused|TestNameKeyedCallsUsePrimaryKey|TestPrivileges|TestRunPurges|TestRunLost|TestRunDeadline|TestKeeperKeepsMany|TestSentinels|TestMissingSchema|TestMetrics'
SUB_PARTITION='LeaseStatusStates'
# - roles created by a test exist on the proxy's cluster only, and PL/Proxy
#   connects to the partitions as the caller's role (shardtest's
#   TestRoleBindingAcrossTheHop covers the hop);
TOP_ROLES='TestThreatModel'
# - NOTIFY does not cross PL/Proxy: waiters on the proxy wake at expiry;
TOP_NOTIFY='ExampleClient_Acquire|ExampleClient_Claim|TestAcquireWokenByRelease|TestNotifyListener|TestAcquireListensAgain|TestClaimWokenByRelease|TestClaimAllWokenByRelease|TestGracefulHandover'
SUB_NOTIFY='NotifyLease|NotifySlot'
# - a call commits on its partition at once: no row lock of assert_held or
#   of a waiting call outlives it, and lock waits happen on the partition,
#   not on the server the test watches (TestLeaseRace checks that fenced
#   writes commit in fence order, which only assert_held's row lock
#   ensures: through the proxy a takeover does not wait for them;
#   TestWithFenceIdleBound reads the idle timeout assert_held sets for the
#   rest of the transaction, which is the partition's);
TOP_LOCKS='TestFencedTransactionBound|TestWithFenceIdleBound|TestServerClockAfterWaits|TestLeaseRace'
SUB_LOCKS='AssertHeldBlocksTakeover|ClaimSlotsAfterConcurrentRelease|ClaimSlotAfterConcurrentRelease'
# - claim_slots across routing keys is refused; renew_holder's expires_at
#   is the earliest of the partitions' clocks;
TOP_ROUTING='ExampleClient_TryClaimAll|TestClaimAll|TestDeadlineBeforeServerExpiry'
SUB_ROUTING='ClaimSlotsRace|ClaimSlotsInputOrder|ClaimSlotsAllOrNothing|RenewHolder'
top="^($TOP_PARTITION|$TOP_ROLES|$TOP_NOTIFY|$TOP_LOCKS|$TOP_ROUTING)\$"
sub="^(TestLeases|TestSlots)\$/^($SUB_PARTITION|$SUB_NOTIFY|$SUB_LOCKS|$SUB_ROUTING)\$"

go build -o "${TMPDIR:-/tmp}/pglease-suiteproxy.$$" ./internal/testing/shardtest/suiteproxy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "${TMPDIR:-/tmp}/pglease-suiteproxy.$$"' EXIT
status=0
for pkg in ./internal/testing/contract/ ./pglease/ ./runslots/ ./supervisor/; do
    mkfifo "$tmp/stdin"
    "${TMPDIR:-/tmp}/pglease-suiteproxy.$$" <"$tmp/stdin" >"$tmp/url" 2>"$tmp/log" &
    sp=$!
    exec 4>"$tmp/stdin"
    while [ ! -s "$tmp/url" ]; do
        kill -0 "$sp" 2>/dev/null || { cat "$tmp/log" >&2; exit 1; }
        sleep 1
    done
    echo "test-sharded: $pkg unchanged, every call through a PL/Proxy proxy" >&2
    url=$(cat "$tmp/url")
    if [ "$pkg" = ./internal/testing/contract/ ]; then
        # The subtests of TestLeases and TestSlots in a run of their own:
        # one -skip pattern cannot name top-level tests and subtests both.
        PGLEASE_TEST_DATABASE_URL=$url go test -race -count=1 -timeout 10m -skip "^($TOP_PARTITION|$TOP_ROLES|$TOP_NOTIFY|$TOP_LOCKS|$TOP_ROUTING|TestLeases|TestSlots)\$" "$@" "$pkg" || status=1
        PGLEASE_TEST_DATABASE_URL=$url go test -race -count=1 -timeout 10m -run '^(TestLeases|TestSlots)$' -skip "$sub" "$@" "$pkg" || status=1
    else
        PGLEASE_TEST_DATABASE_URL=$url go test -race -count=1 -timeout 10m -skip "$top" "$@" "$pkg" || status=1
    fi
    exec 4>&-
    wait "$sp" || status=1
    rm -f "$tmp/stdin" "$tmp/url"
done
exit "$status"
