//go:build sharded

package shardtest

import (
	"testing"
	"time"
)

// TestCronThroughProxy: the cron functions through the proxy: each job's
// ledger lives on the partition of its lease name (release_after,
// run_begin, run_end, run_history routed by name), and run_summary merges
// every partition's jobs sorted by name.
func TestCronThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "cron"))
	ctx := testContext(t)
	var names []string
	for p := range 4 {
		names = append(names, namesOn(t, proxy, "job", p, 1)...)
	}
	for _, n := range names {
		mustAcquire(t, proxy, n, "host-a", time.Minute, 1)
		var run, recorded bool
		if err := proxy.QueryRow(ctx, `SELECT run FROM pglease.run_begin($1, 'host-a', 1, '1 hour')`, n).Scan(&run); err != nil || !run {
			t.Fatalf("run_begin(%s): %v, %v", n, run, err)
		}
		if err := proxy.QueryRow(ctx, `SELECT recorded FROM pglease.run_end($1, 'host-a', 1, 0)`, n).Scan(&recorded); err != nil || !recorded {
			t.Fatalf("run_end(%s): %v, %v", n, recorded, err)
		}
		var released bool
		if err := proxy.QueryRow(ctx, `SELECT released FROM pglease.release_after($1, 'host-a', 1, '1 hour')`, n).Scan(&released); err != nil || !released {
			t.Fatalf("release_after(%s): %v, %v", n, released, err)
		}
		// Held until grant + 1 hour on its partition.
		if r := acquire(t, proxy, n, "host-b", time.Minute); r.Acquired {
			t.Fatalf("acquire(%s) during the hold: granted", n)
		}
		var outcome string
		if err := proxy.QueryRow(ctx, `SELECT outcome FROM pglease.run_history($1, 10)`, n).Scan(&outcome); err != nil || outcome != "succeeded" {
			t.Fatalf("run_history(%s): %q, %v", n, outcome, err)
		}
	}
	if err := proxy.QueryRow(ctx, `SELECT array_agg(n ORDER BY n) FROM unnest($1::text[]) AS n`, names).Scan(&names); err != nil {
		t.Fatal(err)
	}
	var got []string
	var dropped int64
	if err := proxy.QueryRow(ctx, `SELECT job_names, jobs_dropped FROM pglease.run_summary('^job', 3)`).Scan(&got, &dropped); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || dropped != 1 || got[0] != names[0] || got[2] != names[2] {
		t.Fatalf("run_summary('^job', 3) through the proxy: %q, %d dropped; want %q, 1 dropped", got, dropped, names[:3])
	}
}
