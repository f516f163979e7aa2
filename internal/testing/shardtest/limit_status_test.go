//go:build sharded

package shardtest

import (
	"testing"
)

// TestLimitStatusThroughProxy: limit_status through the proxy merges every
// partition's levels into one row per limit: buckets summed, the fewest
// tokens left the fewest of any partition.
func TestLimitStatusThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	owner := pool(t, s.ProxyURL, "")
	ctx := testContext(t)
	if _, err := owner.Exec(ctx, `SELECT pglease.limit_set('lvl', 1, '1 hour', 3)`); err != nil {
		t.Fatal(err)
	}
	// A key on each partition: one emptied, three with one token spent.
	for p := range 4 {
		key := namesOn(t, owner, "lvl", p, 1)[0]
		cost := 1
		if p == 0 {
			cost = 3
		}
		if _, err := owner.Exec(ctx, `SELECT pglease.take($1, $2)`, key, cost); err != nil {
			t.Fatal(err)
		}
	}
	var rows, buckets, limited, limits int64
	var minRemaining int
	if err := owner.QueryRow(ctx, `SELECT count(*), sum(buckets), sum(limited), min(min_remaining), max(limits)
		FROM pglease.limit_status() WHERE target = 'lvl'`).Scan(&rows, &buckets, &limited, &minRemaining, &limits); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || buckets != 4 || limited != 1 || minRemaining != 0 || limits < 1 {
		t.Fatalf("limit_status through the proxy: got %d rows, %d buckets, %d limited, %d fewest left, %d limits; "+
			"want 1 row, 4 buckets, 1 limited, 0 left", rows, buckets, limited, minRemaining, limits)
	}
}
