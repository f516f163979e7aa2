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
# Every test of the release runs but three: 0.3.0 changed nothing else a
# v0.2.0 test checks (a refused acquire's expires_in and a refused claim's
# retry_in are now taken on the clock reading that decided, within what
# the release's tests allow; renew_holder's result is unchanged). A test of
# something head changes on purpose is skipped here by name, each with its
# reason, as the v0.1.0 tests of what 0.2.0 changed were:
# - TestExactACL lists the release's ACL exactly, and 0.3.0 grants more
#   functions to pglease_client (metrics, the cron, leadership, batch and
#   group functions, owner_of); head's own TestExactACL checks head's ACL
#   (make test, make test-extension).
# - TestSlots/ClaimSlotAfterConcurrentRelease holds the scope lock with a
#   refused claim left open; 0.3.0 gives that lock back when a claim is
#   refused, so that no refused call stalls other roles' claims (#49).
# - supervisor's TestRunPurges reads the fence floor from the table
#   pglease.fence_floor, which 0.3.0 replaced by sequences (a floor read
#   as it stands at any isolation level, #49); what it checks of purge
#   itself passes in head's own TestRunPurges.
# go test's -skip matches one level at a time, so the contract suite runs
# twice: TestSlots without that subtest, then everything else. The paths
# are the release's: v0.2.0 keeps the contract suite in internal/contract,
# which head moved to internal/testing/contract.
PGLEASE_TEST_SCHEMA=extension go test -race -count=1 -run '^TestSlots$' \
    -skip '^TestSlots$/^ClaimSlotAfterConcurrentRelease$' ./internal/contract/
PGLEASE_TEST_SCHEMA=extension go test -race -count=1 -skip '^(TestExactACL|TestSlots|TestRunPurges)$' \
    ./internal/contract/ ./pglease/ ./runslots/ ./supervisor/
