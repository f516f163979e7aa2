package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/ratelimit"
)

// fakeDB answers pglease.take as the server would for one limit (GCRA of
// emission e, burst b) on the bubble's clock, or fails with err: for
// Wait's timer logic under testing/synctest, where a real server's
// connection would not let the bubble's clock move.
type fakeDB struct {
	mu    sync.Mutex
	e     time.Duration
	b     int
	tat   time.Time
	takes int
	err   error
}

func (f *fakeDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("fakeDB: Exec")
}

func (f *fakeDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("fakeDB: Query")
}

func (f *fakeDB) QueryRow(_ context.Context, _ string, args ...any) pgx.Row {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return fakeRow{err: f.err}
	}
	f.takes++
	cost := int(args[1].(int32))
	now := time.Now()
	base := later(f.tat, now)
	tol := time.Duration(f.b) * f.e
	next := base.Add(time.Duration(cost) * f.e)
	r := fakeRow{burst: int32(f.b), at: now}
	if next.Sub(now) <= tol {
		f.tat = next
		r.allowed, r.remaining, r.resetIn = true, int32((tol-next.Sub(now))/f.e), next.Sub(now)
		return r
	}
	retry := next.Add(-tol).Sub(now)
	r.remaining, r.resetIn, r.retryIn = int32((tol-base.Sub(now))/f.e), base.Sub(now), &retry
	return r
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

type fakeRow struct {
	allowed          bool
	remaining, burst int32
	retryIn          *time.Duration
	resetIn          time.Duration
	at               time.Time
	err              error
}

func (r fakeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*bool) = r.allowed
	*dest[1].(*int32) = r.remaining
	*dest[2].(**time.Duration) = r.retryIn
	*dest[3].(*time.Duration) = r.resetIn
	*dest[4].(*int32) = r.burst
	*dest[5].(*time.Time) = r.at
	return nil
}

// TestWaitTimer: Wait sleeps exactly each refusal's RetryIn and takes
// again; a context that ends while it sleeps ends it at once with
// ctx.Err() unchanged, after no further take.
func TestWaitTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDB{e: time.Second, b: 2}
		l := newLimiter(t, f, ratelimit.Config{})
		ctx := t.Context()
		start := time.Now()
		for range 2 {
			if err := l.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("two Waits on a full bucket of 2: waited %v, want 0", waited)
		}
		if err := l.WaitN(ctx, "k", 2); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Fatalf("WaitN(2) on an empty bucket: returned after %v, want 2s (its RetryIn)", waited)
		}
		if f.takes != 4 {
			t.Fatalf("takes: got %d, want 4 (one refused, then allowed after one sleep)", f.takes)
		}

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		if err := l.Wait(short, "k"); err != context.DeadlineExceeded {
			t.Fatalf("Wait whose context ends while it sleeps: got %v, want context.DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != 300*time.Millisecond {
			t.Fatalf("Wait returned after %v, want at the context's end, 300ms", waited)
		}
		if f.takes != 5 {
			t.Fatalf("takes: got %d, want 5 (no take after the context ended)", f.takes)
		}
	})
}

// TestErrors: the SQLSTATEs of the limit functions map to the sentinels,
// and errors.As still reaches the *pgconn.PgError.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
	}{
		{"PGL20", ratelimit.ErrNoLimit},
		{"PGL21", ratelimit.ErrCostExceedsBurst},
		{"42501", pglease.ErrPermissionDenied},
		{"22023", pglease.ErrInvalidArgument},
		{"42883", pglease.ErrNotMigrated},
	} {
		f := &fakeDB{err: &pgconn.PgError{Code: tc.code, Message: "pglease.take: test"}}
		_, err := newLimiter(t, f, ratelimit.Config{}).Take(t.Context(), "k", 1)
		if !errors.Is(err, tc.want) {
			t.Errorf("SQLSTATE %s: got %v, want %v", tc.code, err, tc.want)
		}
		if _, ok := errors.AsType[*pgconn.PgError](err); !ok {
			t.Errorf("SQLSTATE %s: errors.As finds no *pgconn.PgError in %v", tc.code, err)
		}
	}
}
