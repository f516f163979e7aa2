// Package exporter serves the database's view of pglease as Prometheus
// metrics: what `pglease exporter` runs (docs/observability.md).
//
// # Overview
//
// An [Exporter] is an http.Handler for /metrics. Each scrape makes one call
// of pglease.metrics (pgleaseadmin.ReadMetrics) and writes its figures in
// the Prometheus text format, written by hand: the per-lease held, expiry
// and fence gauges, the per-scope occupancy and capacity, totals by state,
// waiters, table rows and bytes, purge health, the schema version; then,
// from their own calls, the jobs, the shard groups and each role's quotas
// with their use (pglease.quota_usage; none on a schema without it), the
// configured rate limits with their levels, one set of series per limit,
// never per key (pglease.limit_status; none before 0.4.0); and the
// exporter's own pglease_up, scrape duration, scrape errors and series
// dropped by the name cap.
//
// # Safety
//
// The exporter only reads: one STABLE function, which takes no lock a
// holder waits for; cmd/pglease also opens its sessions read-only. Label
// values are escaped as the format requires (backslash, double quote, line
// feed), and invalid UTF-8 becomes U+FFFD, so no lease name can break a
// scrape or forge a series.
//
// # Failure handling
//
// A scrape always answers. When the read fails (the database is down,
// blackholed or too slow, the role lost its grant, the schema is gone) it
// answers pglease_up 0 with the exporter's own metrics, within its timeout:
// Options.Timeout, lowered by the scrape timeout Prometheus sends. One log
// line says when the database stops answering (and why, with a hint), and
// one when it answers again.
package exporter
