//go:build sharded

package shardtest

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestDoublePartitions goes from two partitions to four under held leases
// and slots: every tenure survives the move with its holder and fence
// (renewable where it now lives), every row lives only on the partition
// that owns it, and the next tenure of a name gets a larger fence than any
// it had.
func TestDoublePartitions(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 2)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "split"))
	var names []string
	for i := range 16 {
		name := fmt.Sprintf("split-%d", i)
		names = append(names, name)
		mustAcquire(t, proxy, name, "a", time.Minute, 1)
		if i%2 == 0 { // a second tenure: fence 2
			if !release(t, proxy, name, "a", 1) {
				t.Fatalf("release %s", name)
			}
			mustAcquire(t, proxy, name, "a", time.Minute, 2)
		}
	}
	if _, err := proxy.Exec(testContext(t), `SELECT pglease.claim_slot(s, 'a', 1, '1 minute') FROM unnest($1::text[]) AS s`, names); err != nil {
		t.Fatal(err)
	}
	before := make(map[string]int)
	for _, n := range names {
		before[n] = partitionOf(t, proxy, n)
	}

	start := time.Now()
	if err := s.Double(testContext(t)); err != nil {
		t.Fatalf("double: %v", err)
	}
	t.Logf("2 -> 4 partitions (16 leases, 16 slots): %v, creating and migrating the new partitions included", time.Since(start).Round(time.Millisecond))

	moved := 0
	for i, name := range names {
		fence := int64(1 + (i+1)%2)
		after := partitionOf(t, proxy, name)
		if after != before[name] && after != before[name]+2 {
			t.Fatalf("%s moved from partition %d to %d, want %d or %d", name, before[name], after, before[name], before[name]+2)
		}
		if after != before[name] {
			moved++
		}
		if !renew(t, proxy, name, "a", fence, time.Minute) {
			t.Fatalf("renew %s (fence %d) on partition %d after the split: refused", name, fence, after)
		}
		var renewed bool
		if err := proxy.QueryRow(testContext(t), `SELECT renewed FROM pglease.renew_slot($1, 1, 'a', 1, '1 minute')`, name).Scan(&renewed); err != nil || !renewed {
			t.Fatalf("renew_slot %s after the split: %v, %v", name, renewed, err)
		}
		if !release(t, proxy, name, "a", fence) {
			t.Fatalf("release %s after the split: refused", name)
		}
		mustAcquire(t, proxy, name, "b", time.Minute, fence+1)
		for _, p := range s.Partitions {
			var rows int
			if err := pool(t, p.URL, "").QueryRow(testContext(t), `SELECT count(*) FROM pglease.leases WHERE name = $1`, name).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[p.Index == after]; rows != want {
				t.Fatalf("%s: %d rows on partition %d, want %d", name, rows, p.Index, want)
			}
		}
	}
	if moved == 0 || moved == len(names) {
		t.Fatalf("%d of %d names moved, want some", moved, len(names))
	}
	var status []string
	rows, _ := proxy.Query(testContext(t), `SELECT name FROM pglease.lease_status ORDER BY name`)
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		status = append(status, n)
	}
	slices.Sort(names)
	if !slices.Equal(status, names) {
		t.Fatalf("lease_status after the split: %v, want each name once: %v", status, names)
	}
	t.Logf("%d of %d names moved to the new partitions", moved, len(names))
}
