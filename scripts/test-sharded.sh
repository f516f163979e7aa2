#!/bin/sh
# Runs pglease sharded by PL/Proxy on real, separate clusters
# (internal/shardtest): two throwaway clusters started from the local
# server binaries, a proxy database (migrations/proxy) over four partition
# databases spread over both, and against the proxy the SQL contract, the
# Go lease client, runslots and the supervisor, role binding across the
# hop, a stopped cluster (fault isolation) and adding partitions.
#
# Usage: scripts/test-sharded.sh [go test flags...]
#
# Needs PL/Proxy for the server binaries the clusters start from (Debian:
# postgresql-MAJOR-plproxy; make deps installs it). PGLEASE_SHARD_PG_BINDIR
# picks the binaries (default: the newest on the machine). As root, the
# clusters run as user postgres.
set -eu
cd "$(dirname "$0")/.."

bindir=${PGLEASE_SHARD_PG_BINDIR:-$(pg_config --bindir)}
sharedir=$("$bindir/pg_config" --sharedir 2>/dev/null || pg_config --sharedir)
if [ ! -f "$sharedir/extension/plproxy.control" ]; then
    echo "test-sharded: PL/Proxy is not installed for the server in $bindir (no $sharedir/extension/plproxy.control):" >&2
    echo "  run make deps (Debian package postgresql-MAJOR-plproxy), or set PGLEASE_SHARD_PG_BINDIR to a server that has it" >&2
    exit 2
fi

echo "test-sharded: proxy and four partitions on two throwaway clusters of $bindir" >&2
exec env PGLEASE_SHARD_PG_BINDIR="$bindir" go test -race -count=1 -timeout 10m "$@" ./internal/shardtest/
