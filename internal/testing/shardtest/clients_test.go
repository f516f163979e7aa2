//go:build sharded

package shardtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
	"github.com/pglease/pglease/supervisor"
)

// TestGoClientThroughProxy runs the Go lease client against the proxy: the
// same calls, the same errors, and Acquire's wait, which wakes at the
// holder's expiry (NOTIFY does not cross PL/Proxy).
func TestGoClientThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	db := pool(t, s.ProxyURL, newRole(t, fleet, "goclient"))
	ctx := testContext(t)
	c1, err := pglease.New(db, pglease.Config{Holder: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pglease.New(db, pglease.Config{Holder: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	l1, err := c1.TryAcquire(ctx, "go-lease", ttl)
	if err != nil || l1.Fence() != 1 {
		t.Fatalf("TryAcquire: got %v, %v, want fence 1", l1, err)
	}
	_, err = c2.TryAcquire(ctx, "go-lease", ttl)
	if held, ok := errors.AsType[*pglease.HeldError](err); !ok || held.Holder != "c1" {
		t.Fatalf("TryAcquire of a held lease: got %v, want a *HeldError naming c1", err)
	}
	if err := l1.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	// Through the proxy, a stale fence is refused with the same error; the
	// check's row lock ends with the call (docs/scaling.md).
	err = pglease.WithFence(ctx, db, "go-lease", 2, func(pgx.Tx) error { return nil })
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("WithFence with a stale fence through the proxy: got %v, want ErrLeaseLost", err)
	}

	got := make(chan *pglease.Lease, 1)
	var waitErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		l, err := c2.Acquire(ctx, "go-lease", ttl)
		waitErr = err
		got <- l
	})
	waitWaiter(t, s, db, "go-lease")
	released := time.Now()
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var l2 *pglease.Lease
	select {
	case l2 = <-got:
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("Acquire still waiting 10s past the released tenure's TTL")
	}
	wg.Wait()
	if waitErr != nil || l2.Fence() != 2 {
		t.Fatalf("Acquire after the release: got %v, %v, want fence 2", l2, waitErr)
	}
	// Fast when the release came before Acquire's second try; otherwise it
	// wakes at the expiry it saw (no NOTIFY crosses the proxy), as the
	// supervisor's handover below shows.
	t.Logf("Acquire through the proxy took the lease %v after the release (TTL %v)",
		time.Since(released).Round(time.Millisecond), ttl)
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRunslotsThroughProxy claims slots through the proxy, one scope and
// several of one routing tag at once; scopes of different tags are refused
// with the proxy's error.
func TestRunslotsThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	db := pool(t, s.ProxyURL, newRole(t, fleet, "goslots"))
	ctx := testContext(t)
	c, err := runslots.New(db, runslots.Config{Holder: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	slot, err := c.TryClaim(ctx, runslots.Want{Scope: "pool", Capacity: 1}, time.Minute)
	if err != nil || slot.Number() != 1 {
		t.Fatalf("TryClaim: got %v, %v", slot, err)
	}
	other, err := runslots.New(db, runslots.Config{Holder: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryClaim(ctx, runslots.Want{Scope: "pool", Capacity: 1}, time.Minute); !errors.Is(err, runslots.ErrFull) {
		t.Fatalf("TryClaim of a full scope: got %v, want ErrFull", err)
	}
	slots, err := c.TryClaimAll(ctx, []runslots.Want{{Scope: "{t}/cpu", Capacity: 2}, {Scope: "{t}/gpu", Capacity: 1}}, time.Minute)
	if err != nil || len(slots) != 2 {
		t.Fatalf("TryClaimAll in one tag: got %v, %v", slots, err)
	}
	_, err = c.TryClaimAll(ctx, []runslots.Want{{Scope: "cpu", Capacity: 2}, {Scope: "gpu", Capacity: 1}}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "routed by different keys") {
		t.Fatalf("TryClaimAll across tags: got %v, want the proxy's refusal", err)
	}
	for _, sl := range append(slots, slot) {
		if err := sl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSupervisorHandoverThroughProxy runs two supervisors against the
// proxy: when the leader stops, the standby takes over at the released
// tenure's expiry at the latest.
func TestSupervisorHandoverThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	db := pool(t, s.ProxyURL, newRole(t, fleet, "gosup"))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const ttl = 2 * time.Second
	newSup := func(holder string) *supervisor.Supervisor {
		sup, err := supervisor.NewLease(db, "sup", supervisor.Config{Holder: holder, TTL: ttl, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return sup
	}
	started := map[string]chan struct{}{"s1": make(chan struct{}), "s2": make(chan struct{})}
	workload := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			close(started[name])
			<-ctx.Done()
			return ctx.Err()
		}
	}
	ctx1, stop1 := context.WithCancel(testContext(t))
	ctx2, stop2 := context.WithCancel(testContext(t))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop2()
	defer stop1()
	s1, s2 := newSup("s1"), newSup("s2")
	wg.Go(func() { _ = s1.Run(ctx1, workload("s1")) })
	select {
	case <-started["s1"]:
	case <-time.After(30 * time.Second):
		t.Fatal("s1 did not start its workload in 30s")
	}
	wg.Go(func() { _ = s2.Run(ctx2, workload("s2")) })
	waitWaiter(t, s, db, "sup")
	stopped := time.Now()
	stop1()
	select {
	case <-started["s2"]:
	case <-time.After(ttl + 20*time.Second):
		t.Fatal("s2 did not take over within 20s past the TTL")
	}
	t.Logf("supervisor handover through the proxy: %v after the leader stopped (TTL %v)", time.Since(stopped).Round(time.Millisecond), ttl)
	if f := s2.Fence(); f != 2 {
		t.Fatalf("s2's fence: %d, want 2", f)
	}
}

// waitWaiter waits until a refused acquire of name has registered as a
// waiter on the name's partition, so a release after it is one the waiter
// must notice.
func waitWaiter(t *testing.T, s *Sharded, proxy querier, name string) {
	t.Helper()
	part := pool(t, s.Partitions[partitionOf(t, proxy, name)].URL, "")
	waitFor(t, "a waiter for "+name, func() bool {
		var n int
		err := part.QueryRow(testContext(t), `SELECT count(*) FROM pglease.waiters WHERE kind = 'lease' AND name = $1`, name).Scan(&n)
		return err == nil && n > 0
	})
}

// TestSlotRunRenewsThroughProxy keeps a slot through the proxy with
// Slot.Run for two TTLs: the renewals go through PL/Proxy.
func TestSlotRunRenewsThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	db := pool(t, s.ProxyURL, newRole(t, fleet, "gorun"))
	c, err := runslots.New(db, runslots.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	slot, err := c.Claim(testContext(t), runslots.Want{Scope: "long", Capacity: 1}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	err = slot.Run(testContext(t), func(ctx context.Context) error {
		s := runslots.SlotFromContext(ctx)
		first := s.Deadline()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for s.Deadline().Sub(first) < 2*ttl {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-tick.C:
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run through the proxy: %v", err)
	}
}
