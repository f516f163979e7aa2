package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pglease/pglease/internal/testing/metrictest"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/ratelimit"
)

const callTimeout = 20 * time.Second

func callContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newLimiter(t testing.TB, db ratelimit.DB, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(db, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func set(t testing.TB, l *ratelimit.Limiter, target string, lim ratelimit.Limit) {
	t.Helper()
	if _, err := l.Set(callContext(t), target, lim); err != nil {
		t.Fatalf("Set(%q, %+v): %v", target, lim, err)
	}
}

func mustTake(t testing.TB, l *ratelimit.Limiter, key string, n int) ratelimit.Decision {
	t.Helper()
	d, err := l.Take(callContext(t), key, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	return d
}

// TestLimiter: Allow, AllowN, Take and Peek against the server; the limit
// by the longest prefix; Set, Unset and Reset; the errors.
func TestLimiter(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := newLimiter(t, pool, ratelimit.Config{})
	ctx := callContext(t)
	set(t, l, "t/", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 3})
	if replaced, err := l.Set(ctx, "t/", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 2}); err != nil || !replaced {
		t.Fatalf("Set of a set target: got %v, %v; want replaced", replaced, err)
	}
	if ok, err := l.Allow(ctx, "t/k"); err != nil || !ok {
		t.Fatalf("Allow of a full key: got %v, %v; want true", ok, err)
	}
	if ok, err := l.AllowN(ctx, "t/k", 2); err != nil || ok {
		t.Fatalf("AllowN(2) with 1 token left: got %v, %v; want false", ok, err)
	}
	d := mustTake(t, l, "t/k", 1)
	if !d.Allowed || d.Remaining != 0 || d.Burst != 2 || d.RetryIn != 0 || d.ResetIn <= time.Hour {
		t.Fatalf("Take of the last token: got %+v, want allowed, 0 left, burst 2, reset in over an hour", d)
	}
	p, err := l.Peek(ctx, "t/k")
	if err != nil || p.Allowed || p.RetryIn <= 0 || p.RetryIn > time.Hour {
		t.Fatalf("Peek of an empty key: got %+v, %v; want refused, retry within the hour", p, err)
	}
	if n, err := l.Reset(ctx, "t/k"); err != nil || n != 1 {
		t.Fatalf("Reset: got %d, %v; want 1 bucket", n, err)
	}
	if d := mustTake(t, l, "t/k", 2); !d.Allowed {
		t.Fatalf("Take after Reset: got %+v, want allowed", d)
	}

	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"Take of a key without a limit", take(l, ctx, "elsewhere", 1), ratelimit.ErrNoLimit},
		{"Take of more than the burst", take(l, ctx, "t/k", 3), ratelimit.ErrCostExceedsBurst},
		{"Take of 0 tokens", take(l, ctx, "t/k", 0), pglease.ErrInvalidArgument},
		{"Take of an empty key", take(l, ctx, "", 1), pglease.ErrInvalidArgument},
		{"Take of a long key", take(l, ctx, strings.Repeat("k", ratelimit.MaxKeyLen+1), 1), pglease.ErrInvalidArgument},
		{"Set with a rate of 0", setErr(l, ctx, "t/", ratelimit.Limit{Per: time.Second, Burst: 1}), pglease.ErrInvalidArgument},
		{"Set beyond a token per microsecond (the server's check)", setErr(l, ctx, "t/", ratelimit.Limit{Rate: 2000, Per: time.Millisecond, Burst: 1}), pglease.ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	if removed, err := l.Unset(ctx, "t/"); err != nil || !removed {
		t.Fatalf("Unset: got %v, %v; want removed", removed, err)
	}
	if _, err := l.Take(ctx, "t/k", 1); !errors.Is(err, ratelimit.ErrNoLimit) {
		t.Fatalf("Take after Unset: got %v, want ErrNoLimit", err)
	}
}

func take(l *ratelimit.Limiter, ctx context.Context, key string, n int) error {
	_, err := l.Take(ctx, key, n)
	return err
}

func setErr(l *ratelimit.Limiter, ctx context.Context, target string, lim ratelimit.Limit) error {
	_, err := l.Set(ctx, target, lim)
	return err
}

// TestTakeTx: a spend in the caller's transaction is not spent when the
// transaction rolls back, and is when it commits.
func TestTakeTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := newLimiter(t, pool, ratelimit.Config{})
	ctx := callContext(t)
	set(t, l, "tx/", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 2})
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.TakeTx(ctx, tx, "tx/k", 2)
		if err != nil || !d.Allowed {
			t.Fatalf("TakeTx: got %+v, %v; want allowed", d, err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.Peek(ctx, "tx/k")
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 2, true: 0}[commit]; p.Remaining != want {
			t.Fatalf("tokens after TakeTx and commit=%v: got %d, want %d", commit, p.Remaining, want)
		}
	}
}

// TestWait: Wait returns once the token is there, having waited about a
// refusal's RetryIn; with a context that ends first it returns ctx.Err()
// unchanged and spends nothing.
func TestWait(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := newLimiter(t, pool, ratelimit.Config{})
	ctx := callContext(t)
	set(t, l, "w/", ratelimit.Limit{Rate: 5, Per: time.Second, Burst: 1}) // 200 ms per token
	// Counted from before the first take was sent: the token comes
	// ResetIn after the server decided it, which is no earlier.
	start := time.Now()
	first := mustTake(t, l, "w/k", 1)
	if err := l.Wait(ctx, "w/k"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if waited := time.Since(start); waited < first.ResetIn-50*time.Millisecond {
		t.Fatalf("Wait returned after %v, before the token came (%v after the first take)", waited, first.ResetIn)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(short, "w/k"); err != context.DeadlineExceeded {
		t.Fatalf("Wait with a context ending first: got %v, want context.DeadlineExceeded unchanged", err)
	}
}

// TestConcurrentLimiters: limiters of 8 goroutines on one key for half a
// second are allowed at most burst + elapsed / emission tokens together.
func TestConcurrentLimiters(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := callContext(t)
	set(t, newLimiter(t, pool, ratelimit.Config{}), "c/", ratelimit.Limit{Rate: 100, Per: time.Second, Burst: 5})
	var (
		mu             sync.Mutex
		first, last    time.Time
		allowed, takes int
		wg             sync.WaitGroup
	)
	end := time.Now().Add(500 * time.Millisecond)
	for range 8 {
		l := newLimiter(t, pool, ratelimit.Config{})
		wg.Go(func() {
			for time.Now().Before(end) {
				d, err := l.Take(ctx, "c/k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				takes++
				if d.Allowed {
					if allowed == 0 || d.At.Before(first) {
						first = d.At
					}
					if d.At.After(last) {
						last = d.At
					}
					allowed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	bound := 5 + int(last.Sub(first)/(10*time.Millisecond)) + 1
	t.Logf("%d takes, %d allowed over %v (bound %d)", takes, allowed, last.Sub(first), bound)
	if allowed > bound {
		t.Fatalf("allowed: got %d, want at most burst + span / emission + 1 = %d", allowed, bound)
	}
}

// TestMetrics: allowed tokens, limited takes and Wait's time, by key only
// with MetricsByName.
func TestMetrics(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	r := metrictest.New(t)
	a := newLimiter(t, pool, ratelimit.Config{MeterProvider: r.Provider})
	b := newLimiter(t, pool, ratelimit.Config{MeterProvider: r.Provider, MetricsByName: true})
	set(t, a, "m/", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 3})
	mustTake(t, a, "m/a", 2)
	mustTake(t, b, "m/b", 3)
	mustTake(t, b, "m/b", 1)
	if err := a.Wait(callContext(t), "m/c"); err != nil {
		t.Fatal(err)
	}
	want := func(want int64, name string, kvs ...attribute.KeyValue) {
		t.Helper()
		if got, _ := r.Sum(t, name, kvs...); got != want {
			t.Errorf("%s%v = %d, want %d; recorded:\n%s", name, kvs, got, want, r.Dump(t))
		}
	}
	want(3, "pglease.ratelimit.allowed")
	want(3, "pglease.ratelimit.allowed", attribute.String("pglease.name", "m/b"))
	want(1, "pglease.ratelimit.limited", attribute.String("pglease.name", "m/b"))
	if _, ok := r.Metrics(t)["pglease.ratelimit.wait.duration"]; !ok {
		t.Errorf("pglease.ratelimit.wait.duration not recorded; recorded:\n%s", r.Dump(t))
	}
}

// TestReserveSettle: a reservation spends its tokens; settling gives back
// what was not used, once.
func TestReserveSettle(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := newLimiter(t, pool, ratelimit.Config{})
	ctx := callContext(t)
	set(t, l, "r/", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10})
	r, err := l.Reserve(ctx, "r/k", 8, time.Minute)
	if err != nil || !r.Allowed || r.ID == 0 || r.Remaining != 2 || !r.ExpiresAt.Equal(r.At.Add(time.Minute)) {
		t.Fatalf("Reserve(8) of 10: got %+v, %v; want reserved, 2 left, expiring a minute after At", r, err)
	}
	if r2, err := l.Reserve(ctx, "r/k", 3, time.Minute); err != nil || r2.Allowed || r2.ID != 0 || r2.RetryIn <= 0 {
		t.Fatalf("Reserve(3) with 2 left: got %+v, %v; want refused", r2, err)
	}
	if ok, err := l.Settle(ctx, "r/k", r.ID, 5); err != nil || !ok {
		t.Fatalf("Settle at 5: got %v, %v; want settled", ok, err)
	}
	if ok, err := l.Settle(ctx, "r/k", r.ID, 5); err != nil || ok {
		t.Fatalf("Settle again: got %v, %v; want false", ok, err)
	}
	if p, err := l.Peek(ctx, "r/k"); err != nil || p.Remaining != 5 {
		t.Fatalf("tokens after settling 5 of 8: got %+v, %v; want 5", p, err)
	}
	if _, err := l.Reserve(ctx, "r/k", 1, 25*time.Hour); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("Reserve with a TTL over 24 h: got %v, want ErrInvalidArgument", err)
	}
}

// TestReserveAll: a reservation over a user, its tenant and their pool is
// all or nothing, and one Settle, given any of the keys, gives the rest
// back at every level.
func TestReserveAll(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := newLimiter(t, pool, ratelimit.Config{})
	ctx := callContext(t)
	set(t, l, "p", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 10})
	set(t, l, "p/t1", ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 6})
	levels := []string{"p/t1/u1", "p/t1", "p"}
	r, err := l.ReserveAll(ctx, levels, 6, time.Minute)
	if err != nil || !r.Allowed || r.ID == 0 || r.RefusedBy != "" || r.Remaining != 0 {
		t.Fatalf("ReserveAll(6): got %+v, %v; want reserved, 0 left at the user", r, err)
	}
	r2, err := l.ReserveAll(ctx, []string{"p/t1/u2", "p/t1", "p"}, 1, time.Minute)
	if err != nil || r2.Allowed || r2.RefusedBy != "p/t1" || r2.ID != 0 || r2.RetryIn <= 0 {
		t.Fatalf("ReserveAll(1) of a spent tenant: got %+v, %v; want refused by p/t1", r2, err)
	}
	if p, err := l.Peek(ctx, "p/t1/u2"); err != nil || p.Remaining != 6 {
		t.Fatalf("the refused user's bucket: got %+v, %v; want 6, untouched", p, err)
	}
	if ok, err := l.Settle(ctx, "p/t1", r.ID, 2); err != nil || !ok {
		t.Fatalf("Settle at 2 through the tenant's key: got %v, %v; want settled", ok, err)
	}
	for key, want := range map[string]int{"p/t1/u1": 4, "p/t1": 4, "p": 8} {
		if p, err := l.Peek(ctx, key); err != nil || p.Remaining != want {
			t.Fatalf("%s after settling 2 of 6: got %+v, %v; want %d left", key, p, err, want)
		}
	}
	if ok, err := l.Settle(ctx, "p/t1/u1", r.ID, 0); err != nil || ok {
		t.Fatalf("Settle again: got %v, %v; want false", ok, err)
	}
	if _, err := l.ReserveAll(ctx, []string{"p/a", "p/a"}, 1, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("ReserveAll of a key twice: got %v, want ErrInvalidArgument", err)
	}
	if _, err := l.ReserveAll(ctx, nil, 1, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("ReserveAll of no key: got %v, want ErrInvalidArgument", err)
	}
	if _, err := l.ReserveAll(ctx, []string{"p/a", "q"}, 1, time.Minute); !errors.Is(err, ratelimit.ErrNoLimit) {
		t.Fatalf("ReserveAll with a key of no limit: got %v, want ErrNoLimit", err)
	}
}
