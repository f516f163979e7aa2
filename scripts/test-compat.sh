#!/bin/sh
# Old clients against the new schema: runs the SQL contract suite and the Go
# client suites of the last release (git tag vPREV, the version before head
# in sql/versions) against head, installed as the extension (so that the
# old tests, which install with CREATE EXTENSION pglease, get head's
# schema). Clients of version N keep working against schema N+1.
# Needs what `make test-extension` needs: write access to the server's
# extension directory.
set -eu
cd "$(dirname "$0")/.."

prev=$(grep -v '^#' sql/versions | awk 'NF' | tail -2 | head -1 | cut -d' ' -f1)
# The release's commit: the tag vPREV when the clone has it, else the commit
# recorded in sql/releases/PREV.commit (a clone need not carry tags).
tag="v$prev"
if ! git rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null; then
    tag=$(cat "sql/releases/$prev.commit" 2>/dev/null || true)
    if [ -z "$tag" ] || ! git rev-parse -q --verify "$tag^{commit}" >/dev/null; then
        echo "test-compat: neither git tag v$prev nor the commit in sql/releases/$prev.commit is in this clone: fetch them (git fetch --tags origin)" >&2
        exit 1
    fi
fi
make -s install-extension >/dev/null

dir=$(mktemp -d)
trap 'git worktree remove --force "$dir" >/dev/null 2>&1 || rm -rf "$dir"' EXIT
git worktree add -q --detach "$dir" "$tag"
echo "test-compat: the $tag clients and SQL contract against the head schema (CREATE EXTENSION pglease, $(sed -n "s/^default_version = '\(.*\)'/\1/p" extension/pglease.control))" >&2
cd "$dir"
# Every test of the release runs but five, each skipped by name with its
# reason (as v0.2.0's tests of what 0.3.0 changed were: git log -p of this
# file):
# - TestMetrics/Totals and TestOwnedNames/MetricsListEveryTable list the
#   tables pglease.metrics reports exactly; 0.4.0 adds the rate limits'
#   three (limits, limit_state, limit_reservations). Head's own tests check
#   head's list.
# - TestExactACL (DefaultPrivileges, EarlierGrants) lists the release's
#   ACL exactly, and TestNoClientCallStallsAnotherRole/
#   EveryGrantedFunctionIsSwept requires a sweep entry for every function
#   granted to pglease_client: 0.4.0 grants the rate limits' functions.
#   Head's own tests check head's ACL and sweep them (make test).
# - pglease's TestBatchFallsBack drops acquire_batch to play a schema
#   before 0.3.0, which an extension's member cannot be (2BP01); head's own
#   TestBatchFallsBack runs on the migrations (make test).
# go test's -skip matches one level at a time: the subtests are skipped in
# the contract suite's run, the top-level test in the client suites' run.
PGLEASE_TEST_SCHEMA=extension go test -race -count=1 \
    -skip '^(TestMetrics|TestOwnedNames|TestExactACL|TestNoClientCallStallsAnotherRole)$/^(Totals|MetricsListEveryTable|DefaultPrivileges|EarlierGrants|EveryGrantedFunctionIsSwept)$' ./internal/testing/contract/
PGLEASE_TEST_SCHEMA=extension go test -race -count=1 -skip '^TestBatchFallsBack$' \
    ./pglease/ ./runslots/ ./supervisor/
