// Package obstest is the harness of `make test-observability`: a real
// Prometheus (Debian's package, on a loopback port with a throwaway data
// directory) scraping `pglease exporter` against a real Postgres while a
// supervisor hands a lease over, prometheus-postgres-exporter with the
// queries file of deploy/postgres-exporter, promtool, and the plot of the
// handover that docs/observability.md shows.
//
// # Overview
//
// [StartPrometheus] starts a server and [Prometheus.Query] and
// [Prometheus.QueryRange] read its HTTP API; [ParseText] parses a text
// exposition strictly; [Plot] draws series as an SVG. The tests that need
// the binaries carry build tag observability (scripts/test-observability.sh
// passes it), so that go test ./... does not start servers.
//
// # Failure handling
//
// A missing binary fails the test with the Debian package to install
// (make deps installs them): the harness never skips.
//
// The package is for tests only: it starts servers.
package obstest
