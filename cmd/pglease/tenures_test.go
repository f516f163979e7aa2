package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// testTenures: pglease tenures lists a lease's tenure history with how
// each ended, as a table and as JSON, honours --since, and refuses bad
// arguments with exit 2.
func testTenures(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	ctx := t.Context()
	for _, sql := range []string{
		`SELECT pglease.history_enable('svc/', '30 days')`,
		`SELECT pglease.acquire('svc/leader', 'a', '1 hour')`,
		`SELECT pglease.release('svc/leader', 'a', 1)`,
		`SELECT pglease.acquire('svc/leader', 'b', '1 hour')`,
		`SELECT pglease.force_release('svc/leader')`,
		`SELECT pglease.acquire('svc/leader', 'c', '1 hour')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	r := c.mustRun(0, "tenures", "svc/leader")
	requireContains(t, "tenures", r.stdout, "FENCE", "released", "forced", "open, expires")
	j := c.mustRun(0, "tenures", "svc/leader", "--json")
	requireContains(t, "tenures --json", j.stdout, `"name": "svc/leader"`, `"ended": "released"`, `"ended": "forced"`, `"ended": null`)
	if n := strings.Count(j.stdout, `"fence"`); n != 3 {
		t.Fatalf("tenures --json lists %d tenures, want 3\n%s", n, j.stdout)
	}
	// Open at a time after the forced end: the open tenure alone.
	s := c.mustRun(0, "tenures", "svc/leader", "--json", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if n := strings.Count(s.stdout, `"fence"`); n != 1 {
		t.Fatalf("tenures --since in an hour lists %d tenures, want 1 (the open one)\n%s", n, s.stdout)
	}
	requireContains(t, "tenures of a name without history", c.mustRun(0, "tenures", "other").stdout, "No tenures")
	c.mustRun(exitUsage, "tenures")
	c.mustRun(exitUsage, "tenures", "svc/leader", "--since", "yesterday")
	c.mustRun(exitUsage, "tenures", "svc/leader", "--since", "-1h")
}
