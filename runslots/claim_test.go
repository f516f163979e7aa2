package runslots_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

func TestNewInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		db   pglease.DB
		cfg  runslots.Config
	}{
		{"nil database", nil, runslots.Config{}},
		{"holder too long", noDB{t}, runslots.Config{Holder: strings.Repeat("h", 257)}},
		{"negative margin", noDB{t}, runslots.Config{SafetyMargin: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := runslots.New(tc.db, tc.cfg); !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Fatalf("New: got %v, want ErrInvalidArgument", err)
			}
		})
	}
	c, err := runslots.New(noDB{t}, runslots.Config{})
	if err != nil {
		t.Fatalf("New with zero Config: %v", err)
	}
	if c.Holder() == "" {
		t.Fatal("default holder is empty")
	}
}

// TestClaimInvalid: bad arguments are refused before any round trip.
func TestClaimInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := runslots.New(noDB{t}, runslots.Config{SafetyMargin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("s", 257)
	for _, tc := range []struct {
		name     string
		scope    string
		capacity int
		ttl      time.Duration
	}{
		{"empty scope", "", 1, time.Minute},
		{"long scope", long, 1, time.Minute},
		{"zero capacity", "s", 0, time.Minute},
		{"negative capacity", "s", -1, time.Minute},
		{"capacity too large", "s", runslots.MaxCapacity + 1, time.Minute},
		{"zero ttl", "s", 1, 0},
		{"negative ttl", "s", 1, -time.Second},
		{"ttl too long", "s", 1, pglease.MaxTTL + time.Second},
		{"ttl within margin", "s", 1, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.TryClaim(ctx, runslots.Want{Scope: tc.scope, Capacity: tc.capacity}, tc.ttl); !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Errorf("TryClaim: got %v, want ErrInvalidArgument", err)
			}
			if _, err := c.Claim(ctx, runslots.Want{Scope: tc.scope, Capacity: tc.capacity}, tc.ttl); !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Errorf("Claim: got %v, want ErrInvalidArgument", err)
			}
			wants := []runslots.Want{{Scope: tc.scope, Capacity: tc.capacity}}
			if _, err := c.TryClaimAll(ctx, wants, tc.ttl); !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Errorf("TryClaimAll: got %v, want ErrInvalidArgument", err)
			}
			if _, err := c.ClaimAll(ctx, wants, tc.ttl); !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Errorf("ClaimAll: got %v, want ErrInvalidArgument", err)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		wants []runslots.Want
	}{
		{"no wants", nil},
		{"too many wants", make([]runslots.Want, runslots.MaxWants+1)},
		{"repeated scope", []runslots.Want{{Scope: "a", Capacity: 1}, {Scope: "b", Capacity: 1}, {Scope: "a", Capacity: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.wants {
				if tc.wants[i].Scope == "" {
					tc.wants[i] = runslots.Want{Scope: fmt.Sprint(i), Capacity: 1}
				}
			}
			if _, err := c.TryClaimAll(ctx, tc.wants, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Errorf("TryClaimAll: got %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// TestMissingSchema: a database without the pglease schema gets a hint to
// apply the migrations.
func TestMissingSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t))
	c := newClient(t, pool, "")
	_, err := c.TryClaim(context.Background(), runslots.Want{Scope: "s", Capacity: 1}, time.Minute)
	if !errors.Is(err, pglease.ErrNotMigrated) || !strings.Contains(err.Error(), "apply the migrations") {
		t.Fatalf("TryClaim without the schema: got %v, want ErrNotMigrated with a hint to apply the migrations", err)
	}
	if n := strings.Count(err.Error(), "pglease:"); n != 1 || strings.Contains(err.Error(), "runslots:") {
		t.Fatalf("TryClaim without the schema: %q says %q %d times, want once and no other prefix", err, "pglease:", n)
	}
	if _, err := pgleaseadmin.Scopes(context.Background(), pool); err == nil || !strings.Contains(err.Error(), "apply the migrations") {
		t.Fatalf("Scopes without the schema: got %v, want a hint to apply the migrations", err)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")

	s := mustClaim(t, c, "gpu", 2, 10*time.Second)
	if s.Scope() != "gpu" || s.Number() != 1 || s.Fence() != 1 || s.Holder() != c.Holder() || s.TTL() != 10*time.Second {
		t.Fatalf("slot = (%q, %d, fence %d, %q, %s), want (gpu, 1, fence 1, %q, 10s)",
			s.Scope(), s.Number(), s.Fence(), s.Holder(), s.TTL(), c.Holder())
	}
	if st := slotStatus(t, pool, "gpu", 1); st.State != pgleaseadmin.Held || st.Holder != c.Holder() || st.Fence != 1 {
		t.Fatalf("Slots: got %+v, want held by %q with fence 1", st, c.Holder())
	}
	before := s.Deadline()
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if !s.Deadline().After(before) {
		t.Fatalf("Deadline after Renew = %v, want later than %v", s.Deadline(), before)
	}
	mustRelease(t, s)
	if time.Until(s.Deadline()) > 0 {
		t.Fatalf("Deadline after Release is %s away, want passed", time.Until(s.Deadline()))
	}
	for name, err := range map[string]error{"Renew": s.Renew(ctx), "Release": s.Release(ctx)} {
		if !errors.Is(err, runslots.ErrSlotLost) || !errors.Is(err, pglease.ErrLeaseLost) {
			t.Fatalf("%s after Release = %v, want ErrSlotLost matching pglease.ErrLeaseLost", name, err)
		}
	}
	if st := slotStatus(t, pool, "gpu", 1); st.State != pgleaseadmin.Free || st.Holder != "" || st.Fence != 1 {
		t.Fatalf("Slots after Release: got %+v, want free with fence 1", st)
	}
	scopes, err := pgleaseadmin.Scopes(ctx, pool)
	if err != nil {
		t.Fatalf("Scopes: %v", err)
	}
	if want := []pgleaseadmin.ScopeStatus{{Scope: "gpu", InUse: 0, Slots: 1}}; !slices.Equal(scopes, want) {
		t.Fatalf("Scopes = %+v, want %+v", scopes, want)
	}
}

// TestTryClaimRace: 64 holders race for 5 slots, round after round; exactly
// 5 win each round, on distinct slots 1..5, and the others are told the
// scope is full.
func TestTryClaimRace(t *testing.T) {
	t.Parallel()
	const holders, capacity, rounds = 64, 5, 4
	pool := newPool(t, 24)
	clients := newClients(t, pool, holders)
	ctx := context.Background()

	for round := range rounds {
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			won    []*runslots.Slot
			failed []error
		)
		start := make(chan struct{})
		for _, c := range clients {
			wg.Go(func() {
				<-start
				s, err := c.TryClaim(ctx, runslots.Want{Scope: "tenant:42", Capacity: capacity}, time.Minute)
				mu.Lock()
				defer mu.Unlock()
				switch full, ok := errors.AsType[*runslots.FullError](err); {
				case err == nil:
					won = append(won, s)
				case ok && full.InUse >= capacity && full.Capacity == capacity:
				default:
					failed = append(failed, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(failed) > 0 {
			t.Fatalf("round %d: unexpected errors: %v", round, failed)
		}
		if len(won) != capacity {
			t.Fatalf("round %d: %d claims won, want exactly %d", round, len(won), capacity)
		}
		var numbers []int
		for _, s := range won {
			numbers = append(numbers, s.Number())
		}
		slices.Sort(numbers)
		if !slices.Equal(numbers, []int{1, 2, 3, 4, 5}) {
			t.Fatalf("round %d: slot numbers %v, want 1..5 once each", round, numbers)
		}
		if n := inUse(t, pool, "tenant:42"); n != capacity {
			t.Fatalf("round %d: server reports %d in use, want %d", round, n, capacity)
		}
		for _, s := range won {
			if s.Fence() != int64(round+1) {
				t.Fatalf("round %d: slot %d has fence %d, want %d", round, s.Number(), s.Fence(), round+1)
			}
			mustRelease(t, s)
		}
	}
}

// TestShrink: lowering the capacity evicts nobody; claims at the lower
// capacity are refused until fewer than it are live.
func TestShrink(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	clients := newClients(t, pool, 6)
	var live []*runslots.Slot
	for _, c := range clients[:5] {
		live = append(live, mustClaim(t, c, "api", 5, time.Minute))
	}
	late := clients[5]
	mustBeFull(t, late, "api", 5, 5)
	for len(live) > 2 {
		mustBeFull(t, late, "api", 3, len(live))
		// A holder's own slot comes back whatever the capacity.
		if again := mustClaim(t, clients[0], "api", 3, time.Minute); again.Number() != live[0].Number() || again.Fence() != live[0].Fence() {
			t.Fatalf("re-claim at capacity 3: got slot %d fence %d, want slot %d fence %d",
				again.Number(), again.Fence(), live[0].Number(), live[0].Fence())
		}
		mustRelease(t, live[len(live)-1])
		live = live[:len(live)-1]
	}
	s := mustClaim(t, late, "api", 3, time.Minute)
	if s.Number() > 3 {
		t.Fatalf("claim at capacity 3 got slot %d, want 1..3", s.Number())
	}
	mustBeFull(t, clients[4], "api", 3, 3)
}

// TestExpiryReclaim: a slot that is not renewed expires on the server's
// clock and its next tenure gets fence + 1; the old holder's renewal is
// refused.
func TestExpiryReclaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	a, b := newClient(t, pool, "a"), newClient(t, pool, "b")
	const ttl = 250 * time.Millisecond

	old := mustClaim(t, a, "batch", 1, ttl)
	full := mustBeFull(t, b, "batch", 1, 1)
	if full.RetryIn <= 0 || full.RetryIn > ttl {
		t.Fatalf("RetryIn = %s, want in (0, %s]", full.RetryIn, ttl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	s, err := b.Claim(ctx, runslots.Want{Scope: "batch", Capacity: 1}, time.Minute) // wakes at RetryIn: nobody releases
	if err != nil {
		t.Fatalf("Claim after expiry: %v", err)
	}
	t.Logf("Claim got the expired slot after %s (ttl %s)", time.Since(start).Round(time.Millisecond), ttl)
	if s.Number() != old.Number() || s.Fence() != old.Fence()+1 {
		t.Fatalf("reclaimed slot %d fence %d, want slot %d fence %d", s.Number(), s.Fence(), old.Number(), old.Fence()+1)
	}
	if err := old.Renew(ctx); !errors.Is(err, runslots.ErrSlotLost) {
		t.Fatalf("Renew of the expired tenure = %v, want ErrSlotLost", err)
	}
	if err := old.Release(ctx); !errors.Is(err, runslots.ErrSlotLost) {
		t.Fatalf("Release of the expired tenure = %v, want ErrSlotLost", err)
	}
	// The short-lived tenure of a has expired for good: a claims anew.
	mustBeFull(t, a, "batch", 1, 1)
	mustRelease(t, s)
	if again := mustClaim(t, a, "batch", 1, ttl); again.Fence() != s.Fence()+1 {
		t.Fatalf("fence after release = %d, want %d", again.Fence(), s.Fence()+1)
	}
}

// TestReclaimIdempotent: claiming again as the same holder, from the same
// client or another with the same identity (a retry after a lost reply),
// returns the same slot and fence and takes no second slot.
func TestReclaimIdempotent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "worker-1")
	twin := newClient(t, pool, "worker-1")

	first := mustClaim(t, c, "q", 3, time.Minute)
	for _, again := range []*runslots.Slot{mustClaim(t, c, "q", 3, time.Minute), mustClaim(t, twin, "q", 3, time.Minute)} {
		if again.Number() != first.Number() || again.Fence() != first.Fence() {
			t.Fatalf("re-claim: slot %d fence %d, want slot %d fence %d", again.Number(), again.Fence(), first.Number(), first.Fence())
		}
	}
	all, err := c.TryClaimAll(context.Background(), []runslots.Want{{Scope: "q", Capacity: 3}}, time.Minute)
	if err != nil || all[0].Number() != first.Number() || all[0].Fence() != first.Fence() {
		t.Fatalf("TryClaimAll re-claim: %v, %v; want slot %d fence %d", all, err, first.Number(), first.Fence())
	}
	if n := inUse(t, pool, "q"); n != 1 {
		t.Fatalf("in use after re-claims = %d, want 1", n)
	}
}

// TestClaimAll: several scopes are claimed all or nothing.
func TestClaimAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c, other := newClient(t, pool, "c"), newClient(t, pool, "other")
	wants := []runslots.Want{{Scope: "tenant:7", Capacity: 1}, {Scope: "gpu", Capacity: 1}}

	blocker := mustClaim(t, other, "gpu", 1, time.Minute)
	_, err := c.TryClaimAll(ctx, wants, time.Minute)
	full, ok := errors.AsType[*runslots.FullError](err)
	if !ok || !errors.Is(err, runslots.ErrFull) {
		t.Fatalf("TryClaimAll with gpu full: got %v, want a *FullError", err)
	}
	if full.Scope != "gpu" || full.Capacity != 1 || full.InUse != 1 || full.RetryIn <= 0 {
		t.Fatalf("FullError = %+v, want scope gpu, capacity 1, in use 1, RetryIn > 0", full)
	}
	// Nothing is held in the first scope: another holder takes it at once.
	if n := inUse(t, pool, "tenant:7"); n != 0 {
		t.Fatalf("tenant:7 in use after the refusal = %d, want 0", n)
	}
	mustRelease(t, mustClaim(t, other, "tenant:7", 1, time.Minute))

	mustRelease(t, blocker)
	slots, err := c.TryClaimAll(ctx, wants, time.Minute)
	if err != nil {
		t.Fatalf("TryClaimAll with both free: %v", err)
	}
	for i, s := range slots {
		if s.Scope() != wants[i].Scope || s.Number() != 1 || s.Holder() != "c" {
			t.Fatalf("slots[%d] = %q/%d by %q, want %q/1 by c", i, s.Scope(), s.Number(), s.Holder(), wants[i].Scope)
		}
	}
	if slots[0].Fence() != 2 || slots[1].Fence() != 2 {
		t.Fatalf("fences = %d, %d, want 2, 2 (each scope was held once before)", slots[0].Fence(), slots[1].Fence())
	}
	for _, s := range slots {
		mustRelease(t, s)
	}
}

// TestClaimAllWokenByRelease: a blocked ClaimAll waits on the scope that
// refused and wakes at its release.
func TestClaimAllWokenByRelease(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	c, other := newClient(t, pool, "c"), newClient(t, pool, "other")
	waiting := waitingHook(c)
	blocker := mustClaim(t, other, "b", 1, time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		slots []*runslots.Slot
		err   error
		at    time.Time
	}
	done := make(chan result, 1)
	go func() {
		slots, err := c.ClaimAll(ctx, []runslots.Want{{Scope: "a", Capacity: 1}, {Scope: "b", Capacity: 1}}, time.Minute)
		done <- result{slots, err, time.Now()}
	}()
	if scope := waiting.Await(t, "ClaimAll to wait"); scope != "b" {
		t.Fatalf("ClaimAll waits on %q, want b", scope)
	}
	released := time.Now()
	mustRelease(t, blocker)
	r := <-done
	if r.err != nil {
		t.Fatalf("ClaimAll: %v", r.err)
	}
	t.Logf("release → blocked ClaimAll returned: %s", r.at.Sub(released))
	if r.at.Sub(released) > 10*time.Second {
		t.Fatalf("ClaimAll woke %s after the release, want well under the 1m TTL", r.at.Sub(released))
	}
	if len(r.slots) != 2 || r.slots[0].Scope() != "a" || r.slots[1].Scope() != "b" {
		t.Fatalf("ClaimAll slots = %v, want a and b", r.slots)
	}
}

// TestClaimWokenByRelease: a blocked Claim wakes on the release NOTIFY,
// long before the holder's TTL would let it in.
func TestClaimWokenByRelease(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	owner, c := newClient(t, pool, "owner"), newClient(t, pool, "waiter")
	waiting := waitingHook(c)
	held := mustClaim(t, owner, "jobs", 1, time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		slot *runslots.Slot
		err  error
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		s, err := c.Claim(ctx, runslots.Want{Scope: "jobs", Capacity: 1}, time.Minute)
		done <- result{s, err, time.Now()}
	}()
	waiting.Await(t, "Claim to wait") // refused after LISTEN: only the release can wake it early
	released := time.Now()
	mustRelease(t, held)
	r := <-done
	if r.err != nil {
		t.Fatalf("Claim: %v", r.err)
	}
	latency := r.at.Sub(released)
	t.Logf("release → blocked Claim returned: %s", latency)
	if latency > 10*time.Second {
		t.Fatalf("Claim woke %s after the release, want well under the 1m TTL (NOTIFY path)", latency)
	}
	if r.slot.Number() != 1 || r.slot.Fence() != 2 {
		t.Fatalf("Claim got slot %d fence %d, want slot 1 fence 2", r.slot.Number(), r.slot.Fence())
	}
}

// TestClaimCancel: a blocked Claim returns ctx.Err() unchanged.
func TestClaimCancel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	owner, c := newClient(t, pool, "owner"), newClient(t, pool, "waiter")
	waiting := waitingHook(c)
	mustClaim(t, owner, "jobs", 1, time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Claim(ctx, runslots.Want{Scope: "jobs", Capacity: 1}, time.Minute)
		done <- err
	}()
	waiting.Await(t, "Claim to wait")
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled Claim = %v, want context.Canceled unchanged", err)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	if _, err := c.ClaimAll(dctx, []runslots.Want{{Scope: "jobs", Capacity: 1}}, time.Minute); err != context.DeadlineExceeded {
		t.Fatalf("ClaimAll past its deadline = %v, want context.DeadlineExceeded unchanged", err)
	}
	if _, err := c.TryClaim(ctx, runslots.Want{Scope: "jobs", Capacity: 1}, time.Minute); err != context.Canceled {
		t.Fatalf("TryClaim with a cancelled ctx = %v, want context.Canceled unchanged", err)
	}
}

// TestDeadlineBeforeServerExpiry: the local deadline is never after the
// server's expiry, measured from the client's side: the expiry is at least
// ExpiresIn after the status request was sent.
func TestDeadlineBeforeServerExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	check := func(c *runslots.Client, s *runslots.Slot, what string) {
		t.Helper()
		// Same machine: the server's clock is this clock.
		st := slotStatus(t, pool, s.Scope(), s.Number())
		if s.Deadline().After(st.ExpiresAt) {
			t.Fatalf("%s: Deadline is %s after the server's expiry", what, s.Deadline().Sub(st.ExpiresAt))
		}
	}
	for _, margin := range []time.Duration{0, 5 * time.Millisecond} {
		c, err := runslots.New(pool, runslots.Config{SafetyMargin: margin})
		if err != nil {
			t.Fatal(err)
		}
		for i, ttl := range []time.Duration{300 * time.Millisecond, 5 * time.Second, time.Hour} {
			scope := fmt.Sprintf("margin-%s-%d", margin, i)
			s := mustClaim(t, c, scope, 2, ttl)
			check(c, s, fmt.Sprintf("claim %s ttl %s", scope, ttl))
			if err := s.Renew(ctx); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			check(c, s, fmt.Sprintf("renew %s ttl %s", scope, ttl))
			all, err := c.TryClaimAll(ctx, []runslots.Want{{Scope: scope + "/x", Capacity: 1}, {Scope: scope + "/y", Capacity: 1}}, ttl)
			if err != nil {
				t.Fatalf("TryClaimAll: %v", err)
			}
			for _, s := range all {
				check(c, s, "claim all "+s.Scope())
			}
		}
	}
}
