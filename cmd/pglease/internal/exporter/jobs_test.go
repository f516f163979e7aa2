package exporter

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestScrapeJobs: each job of the run ledger gets its last success, its
// window and its last run's start; a job that never succeeded has last
// success 0.
func TestScrapeJobs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	for _, sql := range []string{
		`SELECT pglease.acquire('report', 'h', '1 min')`,
		`SELECT pglease.run_begin('report', 'h', 1, '5 min')`,
		`SELECT pglease.run_end('report', 'h', 1, 0)`,
		`SELECT pglease.acquire('broken', 'h', '1 min')`,
		`SELECT pglease.run_begin('broken', 'h', 1, '1 hour')`,
		`SELECT pglease.run_end('broken', 'h', 1, 1)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	log, logs := newLog()
	body, _ := scrape(t, New(pool, Options{Log: log}), 0)
	got := parseExposition(t, body)
	now := float64(time.Now().Unix())
	if s := got["pglease_job_last_success_timestamp_seconds{name=report}"]; s.Value < now-60 || s.Value > now+60 {
		t.Errorf("last success of report: got %v, want about %v", s.Value, now)
	}
	for key, want := range map[string]float64{
		"pglease_job_last_success_timestamp_seconds{name=broken}": 0,
		"pglease_job_window_seconds{name=report}":                 300,
		"pglease_job_window_seconds{name=broken}":                 3600,
	} {
		if s, ok := got[key]; !ok || s.Value != want {
			t.Errorf("%s: got %v (present %v), want %v", key, s.Value, ok, want)
		}
	}
	if s := got["pglease_job_last_run_timestamp_seconds{name=broken}"]; s.Value < now-60 {
		t.Errorf("last run of broken: got %v, want about %v", s.Value, now)
	}
	if l := logs.String(); l != "" {
		t.Errorf("log: got %q, want nothing", l)
	}
}
