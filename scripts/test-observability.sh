#!/bin/sh
# The database's view as Prometheus sees it (make test-observability): the
# rules of deploy/prometheus checked and unit-tested by promtool, then
# internal/testing/obstest with build tag observability: a real Prometheus
# (Debian's package, a loopback port, a throwaway data directory) scraping
# `pglease exporter` against a real Postgres while supervisors hand a lease
# over, its HTTP API showing the handover, the held gauge and a firing
# alert; promtool check metrics on the exporter's output; and Debian's
# prometheus-postgres-exporter with deploy/postgres-exporter/queries.yaml,
# whose series must match the exporter's.
#
# PGLEASE_UPDATE_PLOT=1 rewrites docs/img/handover.svg from the run.
#
# Usage: scripts/test-observability.sh [go test flags...]
#        scripts/test-observability.sh --rules-only   (promtool only: make test-rules)
set -eu
cd "$(dirname "$0")/.."

need() {
    command -v "$1" >/dev/null 2>&1 && return
    echo "test-observability: $1 not found in PATH: run make deps (Debian package $2)" >&2
    exit 2
}

need promtool prometheus
promtool check rules deploy/prometheus/pglease.rules.yml
(cd deploy/prometheus && promtool test rules pglease.rules.test.yml)
if [ "${1:-}" = --rules-only ]; then
    exit 0
fi

need prometheus prometheus
need prometheus-postgres-exporter prometheus-postgres-exporter
go test -tags observability -race -count=1 -timeout 5m "$@" ./internal/testing/obstest/
