package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/internal/testing/testsignal"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

func newClient(t *testing.T, db pglease.DB, holder string) *pglease.Client {
	t.Helper()
	c, err := pglease.New(db, pglease.Config{Holder: holder})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func mustAcquire(t *testing.T, c *pglease.Client, name string, ttl time.Duration) *pglease.Lease {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), name, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q) as %s: %v", name, c.Holder(), err)
	}
	return l
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")

	l := mustAcquire(t, c, "jobs", 10*time.Second)
	if l.Name() != "jobs" || l.Fence() != 1 || l.Holder() != c.Holder() || l.TTL() != 10*time.Second {
		t.Fatalf("lease = (%q, fence %d, %q, %s), want (jobs, 1, %q, 10s)", l.Name(), l.Fence(), l.Holder(), l.TTL(), c.Holder())
	}
	before := l.Deadline()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if !l.Deadline().After(before) {
		t.Fatalf("Deadline after Renew = %v, want later than %v", l.Deadline(), before)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew after Release = %v, want ErrLeaseLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("second Release = %v, want ErrLeaseLost", err)
	}
	statuses, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	if len(statuses) != 1 || statuses[0].State != pgleaseadmin.Free || statuses[0].Fence != 1 {
		t.Fatalf("Leases = %+v, want one free lease with fence 1", statuses)
	}
}

func TestReentrant(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")
	a := mustAcquire(t, c, "jobs", 10*time.Second)
	b := mustAcquire(t, c, "jobs", 10*time.Second)
	if a.Fence() != b.Fence() {
		t.Fatalf("re-entrant acquire fence = %d, want the same tenure's %d", b.Fence(), a.Fence())
	}
}

func TestHeldError(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	owner := newClient(t, pool, "owner")
	other := newClient(t, pool, "other")
	mustAcquire(t, owner, "jobs", 10*time.Second)

	_, err := other.TryAcquire(context.Background(), "jobs", 10*time.Second)
	if !errors.Is(err, pglease.ErrLeaseHeld) {
		t.Fatalf("TryAcquire of held lease = %v, want ErrLeaseHeld", err)
	}
	held, ok := errors.AsType[*pglease.HeldError](err)
	if !ok {
		t.Fatalf("error %T is not a *HeldError", err)
	}
	if held.Holder != "owner" || held.Fence != 1 || held.Name != "jobs" {
		t.Fatalf("HeldError = %+v, want holder owner, fence 1, name jobs", held)
	}
	if held.ExpiresIn <= 9*time.Second || held.ExpiresIn > 10*time.Second {
		t.Fatalf("HeldError.ExpiresIn = %s, want in (9s, 10s]", held.ExpiresIn)
	}
	if !strings.Contains(err.Error(), `"owner"`) {
		t.Fatalf("error %q does not name the holder", err)
	}
}

// TestFenceMonotonic takes the lease over after release and after expiry:
// every tenure's fence is larger than the last.
func TestFenceMonotonic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a := newClient(t, pool, "a")
	b := newClient(t, pool, "b")

	var last int64
	check := func(l *pglease.Lease) {
		t.Helper()
		if l.Fence() != last+1 {
			t.Fatalf("fence = %d, want %d", l.Fence(), last+1)
		}
		last = l.Fence()
	}
	l := mustAcquire(t, a, "jobs", 10*time.Second)
	check(l)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l = mustAcquire(t, b, "jobs", 200*time.Millisecond)
	check(l)
	waitState(t, pool, "jobs", pgleaseadmin.Expired)
	if err := l.Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew of expired lease = %v, want ErrLeaseLost", err)
	}
	l = mustAcquire(t, b, "jobs", 10*time.Second) // same holder, new tenure
	check(l)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check(mustAcquire(t, a, "jobs", 10*time.Second))
}

// waitState polls the server until lease name is in state; time passing is
// the subject here, so polling with a deadline is the honest wait.
func waitState(t *testing.T, db pglease.DB, name string, state pgleaseadmin.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		all, err := pgleaseadmin.Leases(context.Background(), db)
		if err != nil {
			t.Fatalf("Leases: %v", err)
		}
		for _, s := range all {
			if s.Name == name && s.State == state {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("lease %q never reached state %s", name, state)
}

// TestAcquireWokenByRelease: a blocked Acquire wakes on the release NOTIFY,
// long before the 30 s TTL would let it in.
func TestAcquireWokenByRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDirectPool(t)
	owner := newClient(t, pool, "owner")
	waiter := newClient(t, pool, "waiter")
	waiting := waitingHook(waiter)
	l := mustAcquire(t, owner, "jobs", 30*time.Second)

	type result struct {
		lease *pglease.Lease
		err   error
		at    time.Time
	}
	done := make(chan result, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "jobs", 30*time.Second)
		done <- result{wl, err, time.Now()}
	}()
	waiting.Await(t, "the blocked Acquire to listen")
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		latency := r.at.Sub(released)
		t.Logf("release → blocked Acquire returned: %s", latency)
		if r.lease.Fence() != 2 {
			t.Fatalf("fence = %d, want 2", r.lease.Fence())
		}
		if latency > 2*time.Second {
			t.Fatalf("woke %s after release, want well under the 30s TTL (NOTIFY path)", latency)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Acquire not woken 10s after release")
	}
}

// waitingHook returns a signal of the lease name each time one of c's
// blocking acquires has been refused and is about to wait: by then it
// listens, so a release is not sent before the waiter subscribed.
func waitingHook(c *pglease.Client) testsignal.Signal[string] {
	s := testsignal.New[string]()
	pglease.SetWaitingHook(c, s.Send)
	return s
}

// TestAcquireWaitsForExpiry: without a release, a blocked Acquire gets the
// lease once the holder's TTL runs out.
func TestAcquireWaitsForExpiry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	owner := newClient(t, pool, "owner")
	waiter := newClient(t, pool, "waiter")
	mustAcquire(t, owner, "jobs", 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := waiter.Acquire(ctx, "jobs", time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if l.Fence() != 2 {
		t.Fatalf("fence = %d, want 2", l.Fence())
	}
}

func TestAcquireCancel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	owner := newClient(t, pool, "owner")
	waiter := newClient(t, pool, "waiter")
	mustAcquire(t, owner, "jobs", 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := waiter.Acquire(ctx, "jobs", time.Second)
	if err != context.DeadlineExceeded {
		t.Fatalf("Acquire with expiring ctx = %v, want context.DeadlineExceeded unchanged", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := waiter.Acquire(ctx2, "jobs", time.Second); err != context.Canceled {
		t.Fatalf("Acquire with cancelled ctx = %v, want context.Canceled unchanged", err)
	}
	if _, err := waiter.TryAcquire(ctx2, "jobs", time.Second); err != context.Canceled {
		t.Fatalf("TryAcquire with cancelled ctx = %v, want context.Canceled unchanged", err)
	}
}

// TestDeadlineBeforeServerExpiry: the local deadline is never after the
// server's expiry, measured from the client's side.
func TestDeadlineBeforeServerExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")
	for i := range 20 {
		l := mustAcquire(t, c, fmt.Sprintf("lease-%d", i), 2*time.Second)
		if i%2 == 1 {
			if err := l.Renew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var expiresAt time.Time
		if err := pool.QueryRow(ctx, `SELECT expires_at FROM pglease.lease_status WHERE name = $1`, l.Name()).Scan(&expiresAt); err != nil {
			t.Fatal(err)
		}
		// Same machine: the server's clock is this clock.
		if l.Deadline().After(expiresAt) {
			t.Fatalf("Deadline %v after the server's expiry %v", l.Deadline(), expiresAt)
		}
		t.Logf("lease %d: deadline %s before the server's expiry", i, expiresAt.Sub(l.Deadline()))
	}
}

func TestWithFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE public.orders (id int, fence bigint)`); err != nil {
		t.Fatal(err)
	}
	a := newClient(t, pool, "a")
	b := newClient(t, pool, "b")
	la := mustAcquire(t, a, "orders", 10*time.Second)
	write := func(tx pgx.Tx, fence int64) error {
		_, err := tx.Exec(ctx, `INSERT INTO public.orders VALUES (1, $1)`, fence)
		return err
	}
	if err := pglease.WithFence(ctx, pool, la.Name(), la.Fence(), func(tx pgx.Tx) error { return write(tx, la.Fence()) }); err != nil {
		t.Fatalf("WithFence while held: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := mustAcquire(t, b, "orders", 10*time.Second)

	called := false
	err := pglease.WithFence(ctx, pool, la.Name(), la.Fence(), func(tx pgx.Tx) error { called = true; return write(tx, la.Fence()) })
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("WithFence with stale fence = %v, want ErrLeaseLost", err)
	}
	if called {
		t.Fatal("WithFence called fn with a stale fence")
	}
	fnErr := errors.New("boom")
	if err := pglease.WithFence(ctx, pool, lb.Name(), lb.Fence(), func(tx pgx.Tx) error { _ = write(tx, lb.Fence()); return fnErr }); err != fnErr {
		t.Fatalf("WithFence returned %v, want fn's error unchanged", err)
	}
	var fences []int64
	rows, _ := pool.Query(ctx, `SELECT fence FROM public.orders ORDER BY fence`)
	fences, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(fences) != 1 || fences[0] != 1 {
		t.Fatalf("orders fences = %v, want [1] (stale and failed writes rolled back)", fences)
	}
}

func TestInvalidArgumentsBeforeRoundTrip(t *testing.T) {
	t.Parallel()
	// A pool that cannot connect: validation must fail first.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := newClient(t, pool, "h")
	ctx := context.Background()
	long := strings.Repeat("x", 257)
	cases := []struct {
		name string
		ttl  time.Duration
		want string
	}{
		{"", time.Second, "name must be 1 to 256 bytes"},
		{long, time.Second, "name must be 1 to 256 bytes"},
		{"ok", 0, "ttl must be from"},
		{"ok", -time.Second, "ttl must be from"},
		{"ok", 25 * time.Hour, "ttl must be from"},
	}
	for _, tc := range cases {
		for _, call := range []func() error{
			func() error { _, err := c.TryAcquire(ctx, tc.name, tc.ttl); return err },
			func() error { _, err := c.Acquire(ctx, tc.name, tc.ttl); return err },
		} {
			err := call()
			if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("(%d-byte name, ttl %s) = %v, want ErrInvalidArgument saying %q", len(tc.name), tc.ttl, err, tc.want)
			}
		}
	}
	if _, err := pglease.New(pool, pglease.Config{Holder: long}); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Errorf("New with 257-byte holder = %v, want ErrInvalidArgument", err)
	}
	if _, err := pglease.New(nil, pglease.Config{}); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
	m, err := pglease.New(pool, pglease.Config{SafetyMargin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryAcquire(ctx, "x", time.Second); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Errorf("TTL not above SafetyMargin = %v, want ErrInvalidArgument", err)
	}
}

func TestHolderIDsDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := pglease.NewHolderID()
		if seen[id] {
			t.Fatalf("NewHolderID repeated %q", id)
		}
		seen[id] = true
	}
}

// TestExecModes runs the lease cycle with every pgx query exec mode,
// including those needed behind PgBouncer's transaction pooling.
func TestExecModes(t *testing.T) {
	t.Parallel()
	url := pgtest.ClientURL(t, pgtest.NewMigrated(t))
	modes := []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	}
	if pgtest.ThroughPooler(t) { // the others break behind transaction pooling
		modes = []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			a := newClient(t, pool, "a-"+mode.String())
			b := newClient(t, pool, "b-"+mode.String())
			name := "mode-" + mode.String()
			l := mustAcquire(t, a, name, 5*time.Second)
			if _, err := b.TryAcquire(ctx, name, 5*time.Second); !errors.Is(err, pglease.ErrLeaseHeld) {
				t.Fatalf("TryAcquire held = %v, want ErrLeaseHeld", err)
			}
			if err := l.Renew(ctx); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if err := pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(pgx.Tx) error { return nil }); err != nil {
				t.Fatalf("WithFence: %v", err)
			}
			var batch pgx.Batch
			batch.Queue(`SELECT 1`)
			if err := pglease.SendFenced(ctx, pool, l.Name(), l.Fence(), &batch); err != nil {
				t.Fatalf("SendFenced: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if _, err := b.Acquire(ctx, name, 5*time.Second); err != nil {
				t.Fatalf("Acquire: %v", err)
			}
		})
	}
}

// TestRace: many clients race for one lease with a short TTL; every grant
// has a fresh fence, a grant's fenced write commits only while no newer
// grant exists (none of the committed writes sees a larger fence already
// written), and a released tenure's fenced write is refused.
func TestRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE public.race_writes (fence bigint NOT NULL, holder text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		grants  = map[int64]string{}
		refused int // fenced writes refused because the tenure had expired
		wg      sync.WaitGroup
	)
	// write makes the fenced write of fence as holder. It fails when a
	// larger fence's write has already committed.
	write := func(name string, fence int64, holder string) error {
		return pglease.WithFence(ctx, pool, name, fence, func(tx pgx.Tx) error {
			var newest int64
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(fence), 0) FROM public.race_writes`).Scan(&newest); err != nil {
				return err
			}
			if newest > fence {
				return fmt.Errorf("fenced write of fence %d committing after fence %d's: an older grant wrote after a newer one", fence, newest)
			}
			_, err := tx.Exec(ctx, `INSERT INTO public.race_writes VALUES ($1, $2)`, fence, holder)
			return err
		})
	}
	stop := time.Now().Add(1500 * time.Millisecond)
	for i := range 12 {
		c := newClient(t, pool, fmt.Sprintf("worker-%d", i))
		wg.Go(func() {
			for time.Now().Before(stop) {
				l, err := c.Acquire(ctx, "race", 100*time.Millisecond)
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				mu.Lock()
				if prev, dup := grants[l.Fence()]; dup && prev != c.Holder() {
					t.Errorf("fence %d granted to %s and %s", l.Fence(), prev, c.Holder())
				}
				grants[l.Fence()] = c.Holder()
				mu.Unlock()
				switch err := write(l.Name(), l.Fence(), c.Holder()); {
				case errors.Is(err, pglease.ErrLeaseLost): // expired under load before the write
					mu.Lock()
					refused++
					mu.Unlock()
				case err != nil:
					t.Errorf("fenced write of fence %d: %v", l.Fence(), err)
				}
				if l.Fence()%3 == 0 {
					continue // let it expire
				}
				err = l.Release(ctx)
				if err != nil && !errors.Is(err, pglease.ErrLeaseLost) {
					t.Errorf("Release: %v", err)
				}
				if err := write(l.Name(), l.Fence(), c.Holder()); !errors.Is(err, pglease.ErrLeaseLost) {
					t.Errorf("fenced write of released fence %d = %v, want ErrLeaseLost", l.Fence(), err)
				}
			}
		})
	}
	wg.Wait()
	for f := int64(1); f <= int64(len(grants)); f++ {
		if _, ok := grants[f]; !ok {
			t.Fatalf("fence %d never granted among %d grants: fences are not consecutive", f, len(grants))
		}
	}
	var written int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.race_writes`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	if written == 0 {
		t.Fatal("no fenced write committed")
	}
	t.Logf("%d tenures granted to 12 racing clients; %d fenced writes committed in fence order, %d refused after expiry",
		len(grants), written, refused)
}

// TestWithFenceStalledTransaction: a holder that stalls inside its fenced
// transaction (paused, cut off) must not block takeovers past its TTL: the
// transaction's idle timeout ends it, and the write does not commit.
func TestWithFenceStalledTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a := newClient(t, pool, "a")
	b := newClient(t, pool, "b")
	la := mustAcquire(t, a, "stall", 300*time.Millisecond)

	taken := make(chan time.Time, 1)
	err := pglease.WithFence(ctx, pool, la.Name(), la.Fence(), func(tx pgx.Tx) error {
		go func() {
			l, err := b.Acquire(ctx, "stall", 10*time.Second)
			if err != nil {
				t.Errorf("Acquire during the stall: %v", err)
				taken <- time.Time{}
				return
			}
			if l.Fence() != 2 {
				t.Errorf("takeover fence %d, want 2", l.Fence())
			}
			taken <- time.Now()
		}()
		time.Sleep(2 * time.Second) // the stall: idle in transaction
		return nil
	})
	returned := time.Now()
	if err == nil {
		t.Fatal("WithFence committed after stalling past its lease's TTL")
	}
	at := <-taken
	if !at.Before(returned) {
		t.Fatalf("takeover waited for the stalled transaction (%s after it)", at.Sub(returned))
	}
	t.Logf("stalled fenced write refused (%v); takeover %s before the stall ended", err, returned.Sub(at))
}

// TestWithFenceIdleBound: a WithFence transaction may stay idle for the
// tenure's time left on the server + 100 ms (assert_held's bound), not
// for the TTL the holder knows.
func TestWithFenceIdleBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l := mustAcquire(t, newClient(t, pool, "a"), "idle-bound", time.Minute)
	// The same holder and role re-pin the tenure to one second on the
	// server; the Lease still knows its TTL as a minute.
	if _, err := pool.Exec(ctx, `SELECT pglease.acquire('idle-bound', 'a', interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	var ms int64
	err := pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint`).Scan(&ms)
	})
	if err != nil {
		t.Fatalf("WithFence: %v", err)
	}
	if ms <= 0 || ms > 1100 {
		t.Fatalf("idle_in_transaction_session_timeout inside WithFence: got %d ms, want 1 to 1100 (time left + 100 ms, not the TTL)", ms)
	}
}

// TestAcquireListensAgain: when the listening connection breaks (a
// failover, a killed backend), a blocked Acquire listens again and still
// wakes at the release, not at the 30 s expiry.
func TestAcquireListensAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDirectPool(t)
	owner := newClient(t, pool, "owner")
	waiter := newClient(t, pool, "waiter")
	waiting := waitingHook(waiter)
	l := mustAcquire(t, owner, "jobs", 30*time.Second)

	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "jobs", 30*time.Second)
		done <- err
	}()
	waiting.Await(t, "the blocked Acquire to listen")
	var killed bool
	if err := pool.QueryRow(ctx, `SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE '%LISTEN pglease%' AND pid <> pg_backend_pid()`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listening backend: %v, %v", killed, err)
	}
	// The broken connection wakes the waiter, which tries again and waits
	// (listening again inside that wait); the wait after that is on the
	// new connection, so a release is heard from then on.
	waiting.Await(t, "the waiter to wake at the broken connection")
	waiting.Await(t, "the waiter to listen again")
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		t.Logf("woken %s after the release, on a new LISTEN connection", time.Since(released))
		if time.Since(released) > 10*time.Second {
			t.Fatalf("woke %s after the release: at the expiry, not at the release", time.Since(released))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocked Acquire not woken 20s after the release")
	}
}

// awaitDone waits for Done to close, failing the test after a generous
// liveness bound.
func awaitDone(t *testing.T, l *pglease.Lease, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done not closed: %s", what)
	}
}

// TestDone: Done closes when the lease is released, when a renewal is
// refused, and at the local deadline, never before it.
func TestDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")

	released := mustAcquire(t, c, "released", time.Minute)
	select {
	case <-released.Done():
		t.Fatal("Done closed while the lease is held")
	default:
	}
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, released, "after Release")

	refused := mustAcquire(t, c, "refused", time.Minute)
	if _, released, err := pgleaseadmin.ForceRelease(ctx, pool, "refused"); err != nil || !released {
		t.Fatalf("ForceRelease: released %t, %v", released, err)
	}
	if err := refused.Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew after a force release = %v, want ErrLeaseLost", err)
	}
	awaitDone(t, refused, "after a refused renewal")

	expiring := mustAcquire(t, c, "expiring", 200*time.Millisecond)
	awaitDone(t, expiring, "at the local deadline")
	if time.Now().Before(expiring.Deadline()) {
		t.Fatalf("Done closed %s before the deadline", time.Until(expiring.Deadline()))
	}
}

// TestLeaseRun: Run releases after fn returns and returns fn's error; when
// the lease is lost while fn runs, fn's context ends with a cause matching
// ErrLeaseLost and Run returns a *LostError naming the lease and fence.
func TestLeaseRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")

	l := mustAcquire(t, c, "run", time.Minute)
	errBoom := errors.New("boom")
	if err := l.Run(ctx, func(context.Context) error { return errBoom }); err != errBoom {
		t.Fatalf("Run = %v, want fn's error unchanged", err)
	}
	if st := leaseState(t, pool, "run"); st != pgleaseadmin.Free {
		t.Fatalf("lease after Run is %s, want free (released)", st)
	}

	l = mustAcquire(t, c, "lost", 900*time.Millisecond)
	var cause error
	err := l.Run(ctx, func(fctx context.Context) error {
		if _, released, err := pgleaseadmin.ForceRelease(ctx, pool, "lost"); err != nil || !released {
			t.Errorf("ForceRelease: released %t, %v", released, err)
		}
		select {
		case <-fctx.Done():
			cause = context.Cause(fctx)
		case <-time.After(10 * time.Second):
			return errors.New("fn's context was not cancelled")
		}
		return nil
	})
	if !errors.Is(cause, pglease.ErrLeaseLost) {
		t.Fatalf("fn's context cause = %v, want ErrLeaseLost", cause)
	}
	lost, ok := errors.AsType[*pglease.LostError](err)
	if !ok || !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Run = %v, want a *LostError matching ErrLeaseLost", err)
	}
	if lost.Name != "lost" || lost.Fence != l.Fence() || lost.WorkErr != nil {
		t.Fatalf("LostError = %+v, want lease %q fence %d, no workload error", lost, "lost", l.Fence())
	}
}

// leaseState returns the server's state of lease name.
func leaseState(t *testing.T, pool pglease.DB, name string) pgleaseadmin.State {
	t.Helper()
	leases, err := pgleaseadmin.Leases(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Name == name {
			return l.State
		}
	}
	t.Fatalf("no lease %q in %+v", name, leases)
	return ""
}

// TestSentinels: a missing schema and a missing grant are reported with
// ErrNotMigrated and ErrPermissionDenied, a stale fence with ErrLeaseLost,
// each saying "pglease:" once.
func TestSentinels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bare := newClient(t, pgtest.Pool(t, pgtest.NewDatabase(t)), "")
	_, err := bare.TryAcquire(ctx, "x", time.Minute)
	if !errors.Is(err, pglease.ErrNotMigrated) {
		t.Fatalf("TryAcquire without the schema = %v, want ErrNotMigrated", err)
	}
	requirePrefixOnce(t, err)
	pool := pgtest.NewPool(t)
	role := fmt.Sprintf("pglease_nogrant_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE ROLE `+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP ROLE `+role) })
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
		t.Fatal(err)
	}
	_, err = newClient(t, tx, "").TryAcquire(ctx, "x", time.Minute)
	if !errors.Is(err, pglease.ErrPermissionDenied) {
		t.Fatalf("TryAcquire without the grant = %v, want ErrPermissionDenied", err)
	}
	requirePrefixOnce(t, err)

	err = pglease.WithFence(ctx, pool, "never-acquired", 1, func(pgx.Tx) error { return nil })
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("WithFence with a stale fence = %v, want ErrLeaseLost", err)
	}
	requirePrefixOnce(t, err)
}

// requirePrefixOnce fails unless err says "pglease:" once: the sentinels
// and the SQL's messages start with it, and wrapping them must not repeat
// it ("pglease: pglease: schema ...").
func requirePrefixOnce(t *testing.T, err error) {
	t.Helper()
	if n := strings.Count(err.Error(), "pglease:"); n != 1 {
		t.Fatalf("error %q says %q %d times, want once", err, "pglease:", n)
	}
}
