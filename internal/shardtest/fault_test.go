//go:build sharded

package shardtest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRoleBindingAcrossTheHop checks that PL/Proxy connects to the
// partition as the role that called the proxy, so the partition binds the
// tenure to that role, and that another service's role cannot touch it
// through the proxy, even knowing its holder.
func TestRoleBindingAcrossTheHop(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 2)
	roleA, roleB := newRole(t, fleet, "svc_a"), newRole(t, fleet, "svc_b")
	a, b := pool(t, s.ProxyURL, roleA), pool(t, s.ProxyURL, roleB)
	const name = "victim"
	mustAcquire(t, a, name, "a-holder", time.Minute, 1)

	p := s.Partitions[partitionOf(t, a, name)]
	var sessions int
	err := pool(t, p.URL, "").QueryRow(testContext(t),
		`SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = current_database() AND usename = $1`, roleA).Scan(&sessions)
	if err != nil || sessions == 0 {
		t.Fatalf("partition %d: %d sessions of role %s (%v), want PL/Proxy's connection as the calling role", p.Index, sessions, roleA, err)
	}

	// Role B knows A's holder (lease_status shows it) and tries the
	// takeover of issue 14 through the proxy.
	if r := acquire(t, b, name, "a-holder", time.Microsecond); r.Acquired {
		t.Fatalf("role %s acquired with role %s's holder through the proxy: %+v", roleB, roleA, r)
	}
	if r := acquire(t, b, name, "attacker", 10*time.Minute); r.Acquired {
		t.Fatalf("role %s took the lease over through the proxy: %+v", roleB, r)
	}
	if renew(t, b, name, "a-holder", 1, time.Minute) {
		t.Fatalf("role %s renewed role %s's tenure through the proxy", roleB, roleA)
	}
	if release(t, b, name, "a-holder", 1) {
		t.Fatalf("role %s released role %s's tenure through the proxy", roleB, roleA)
	}
	if !renew(t, a, name, "a-holder", 1, time.Minute) {
		t.Fatalf("role %s's renewal refused after role %s's attempts", roleA, roleB)
	}
}

// TestPartitionDown stops the cluster of two of four partitions: calls
// routed there fail fast naming the partition, every other name keeps
// working, and after a restart the fences there continue where they were.
func TestPartitionDown(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	own, err := StartFleet(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := own.Stop(ctx); err != nil {
			t.Errorf("stop fleet: %v", err)
		}
	})
	s := newSharded(t, own, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, own, "down"))
	names := make([][]string, 4)
	for p := range 4 {
		names[p] = namesOn(t, proxy, "down", p, 2)
		for _, n := range names[p] {
			mustAcquire(t, proxy, n, "a", time.Minute, 1)
			if !release(t, proxy, n, "a", 1) {
				t.Fatalf("release %s", n)
			}
			mustAcquire(t, proxy, n, "a", time.Minute, 2)
		}
	}
	down := own.Clusters[1] // partitions 1 and 3
	if err := down.Halt(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 3} {
		for _, n := range names[p] {
			start := time.Now()
			_, err := tryAcquire(ctx, proxy, n, "b", time.Minute)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "["+s.Partitions[p].Name+"]") {
				t.Fatalf("acquire %s on stopped partition %d: got %v, want an error naming [%s]", n, p, err, s.Partitions[p].Name)
			}
			if took > 5*time.Second {
				t.Fatalf("acquire %s on stopped partition %d failed after %v, want fast (connect_timeout=2)", n, p, took)
			}
			t.Logf("partition %d down: failed in %v: %v", p, took.Round(time.Millisecond), err)
		}
	}
	for _, p := range []int{0, 2} {
		for _, n := range names[p] {
			if !renew(t, proxy, n, "a", 2, time.Minute) {
				t.Fatalf("renew %s on partition %d while partitions 1 and 3 are down: refused", n, p)
			}
			if !release(t, proxy, n, "a", 2) {
				t.Fatalf("release %s on partition %d: refused", n, p)
			}
			mustAcquire(t, proxy, n, "b", time.Minute, 3)
		}
	}
	// The calls that read every partition fail while one is down (the
	// documented exception).
	for _, q := range []string{`SELECT count(*) FROM pglease.lease_status`, `SELECT leases FROM pglease.renew_holder('a', '1 minute')`} {
		if _, err := proxy.Exec(ctx, q); err == nil {
			t.Fatalf("%s with two partitions down: no error, want one (it reads every partition)", q)
		}
	}

	if err := down.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 3} {
		for _, n := range names[p] {
			// PL/Proxy drops its broken connection on the first call
			// after the restart; the partition itself answers at once.
			var renewed bool
			waitFor(t, "partition "+s.Partitions[p].Name+" to answer through the proxy again", func() bool {
				return proxy.QueryRow(ctx, `SELECT renewed FROM pglease.renew($1, 'a', 2, '1 minute')`, n).Scan(&renewed) == nil
			})
			if !renewed {
				t.Fatalf("renew %s with fence 2 after the restart: refused, want the tenure kept (its grant was durable)", n)
			}
			if !release(t, proxy, n, "a", 2) {
				t.Fatalf("release %s after restart: refused", n)
			}
			mustAcquire(t, proxy, n, "b", time.Minute, 3)
		}
	}
}
