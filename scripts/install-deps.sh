#!/bin/sh
# Installs the Debian packages the checks need, when missing: plpgsql_check
# for the server's major version (make lint-sql), psql and the isolation
# tester (postgresql-client-MAJOR), pgbouncer (PgBouncer tests), psycopg 3
# for Debian's python3 and Node.js with npm (make test-clients), PL/Proxy
# (make test-sharded), Prometheus with promtool and
# prometheus-postgres-exporter (make test-rules, make test-observability;
# the package may start Debian's own prometheus service on :9090, which the
# tests leave alone: they start their own on a free loopback port), and
# redis-server (make bench starts its own, on a free port, to compare), and spin
# with gcc (make model checks model/shards.pml). The only
# target that installs packages (make deps; .ci/run calls it first): the
# others check for what they need and name the package. Idempotent; needs
# root (or sudo) only when something is missing.
set -eu

major=$(pg_config --version | sed -E 's/[^0-9]*([0-9]+).*/\1/')
need=""
dpkg -s "postgresql-$major-plpgsql-check" >/dev/null 2>&1 || need="$need postgresql-$major-plpgsql-check"
dpkg -s "postgresql-client-$major" >/dev/null 2>&1 || need="$need postgresql-client-$major"
dpkg -s pgbouncer >/dev/null 2>&1 || need="$need pgbouncer"
dpkg -s python3-psycopg >/dev/null 2>&1 || need="$need python3-psycopg"
command -v npm >/dev/null 2>&1 || need="$need nodejs npm"
dpkg -s "postgresql-$major-plproxy" >/dev/null 2>&1 || need="$need postgresql-$major-plproxy" # make test-sharded
dpkg -s prometheus >/dev/null 2>&1 || need="$need prometheus"                                  # prometheus, promtool
dpkg -s prometheus-postgres-exporter >/dev/null 2>&1 || need="$need prometheus-postgres-exporter"
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"                          # make bench
command -v spin >/dev/null 2>&1 || need="$need spin gcc"                                    # make model
[ -z "$need" ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing$need" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
