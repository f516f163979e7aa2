package exporter

import (
	"testing"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestScrapeGroups: each shard group gets its shards, live members and
// unowned shards, and each live member the shards it owns.
func TestScrapeGroups(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	for _, sql := range []string{
		`SELECT pglease.group_create('outbox', 5, NULL)`,
		`SELECT pglease.group_sync('outbox', 'w1', '1 min', 3)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	log, logs := newLog()
	body, _ := scrape(t, New(pool, Options{Log: log}), 0)
	got := parseExposition(t, body)
	for key, want := range map[string]float64{
		"pglease_group_shards{group=outbox}":                  5,
		"pglease_group_members{group=outbox}":                 1,
		"pglease_group_unowned_shards{group=outbox}":          2,
		"pglease_group_member_shards{group=outbox,member=w1}": 3,
	} {
		if s, ok := got[key]; !ok || s.Value != want {
			t.Errorf("%s: got %v (present %v), want %v", key, s.Value, ok, want)
		}
	}
	if l := logs.String(); l != "" {
		t.Errorf("log: got %q, want nothing", l)
	}
}
