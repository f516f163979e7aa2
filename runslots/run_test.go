package runslots_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

var errBoom = errors.New("boom")

// fnTimeout bounds how long a test's fn waits for its context to be
// cancelled, so that a Run that fails to cancel fails the test instead of
// hanging it.
const fnTimeout = 20 * time.Second

// TestRunReleases: after fn returns on its own, Run releases the slot and
// returns fn's error unchanged.
func TestRunReleases(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")
	for i, want := range []error{nil, errBoom} {
		var number int
		var fence int64
		err := claimRun(context.Background(), c, "jobs", 2, time.Minute, func(ctx context.Context) error {
			s := runslots.SlotFromContext(ctx)
			if s == nil {
				return errors.New("SlotFromContext: nil in fn's context")
			}
			number, fence = s.Number(), s.Fence()
			if n, err := scopeInUse(pool, "jobs"); err != nil || n != 1 {
				t.Errorf("in use while fn runs = %d (%v), want 1", n, err)
			}
			return want
		})
		if err != want {
			t.Fatalf("Run = %v, want fn's error %v unchanged", err, want)
		}
		if number != 1 || fence != int64(i+1) {
			t.Fatalf("run %d: fn had slot %d fence %d, want slot 1 fence %d", i, number, fence, i+1)
		}
		if st := slotStatus(t, pool, "jobs", 1); st.State != pgleaseadmin.Free {
			t.Fatalf("slot after Run = %+v, want free (released)", st)
		}
	}
	if runslots.SlotFromContext(context.Background()) != nil {
		t.Fatal("SlotFromContext of a plain context is not nil")
	}
}

// TestRunRenews: a Run that lasts several TTLs keeps its slot. (The TTL
// leaves room for a fresh backend's first calls, which compile the PL/pgSQL
// functions and can take tens of milliseconds under -race.)
func TestRunRenews(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")
	const ttl = 2 * time.Second
	err := claimRun(context.Background(), c, "long", 1, ttl, func(ctx context.Context) error {
		s := runslots.SlotFromContext(ctx)
		first := s.Deadline()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		timeout := time.After(fnTimeout)
		for s.Deadline().Sub(first) < 2*ttl {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-timeout:
				return errors.New("the slot was not renewed")
			case <-tick.C:
			}
		}
		st, err := findSlot(pool, "long", s.Number())
		if err != nil {
			return err
		}
		if st.State != pgleaseadmin.Held || st.Fence != s.Fence() {
			return fmt.Errorf("slot after several TTLs = %+v, want held with fence %d", st, s.Fence())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRunLost: when a renewal is refused (the fence was moved on, as by a
// takeover), fn's context is cancelled with a cause matching ErrSlotLost,
// and Run returns an error matching ErrSlotLost whatever fn returns.
func TestRunLost(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		name    string
		ret     func(ctx context.Context) error
		wantErr error // also matched, besides ErrSlotLost
	}{
		{"fn returns nil", func(context.Context) error { return nil }, nil},
		{"fn returns ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, nil},
		{"fn returns its own error", func(context.Context) error { return errBoom }, errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, pool, "")
			scope := "lost/" + tc.name
			started := make(chan *runslots.Slot, 1)
			var cause error
			err := runAsync(c, scope, 900*time.Millisecond, func(ctx context.Context) error {
				started <- runslots.SlotFromContext(ctx)
				select {
				case <-ctx.Done():
					cause = context.Cause(ctx)
				case <-time.After(fnTimeout):
					return errors.New("fn's context was not cancelled")
				}
				return tc.ret(ctx)
			}, func() {
				s := <-started
				bumpFence(t, pool, scope, s.Number())
			})
			if !errors.Is(cause, runslots.ErrSlotLost) || !errors.Is(cause, pglease.ErrLeaseLost) {
				t.Fatalf("fn's context cause = %v, want ErrSlotLost matching pglease.ErrLeaseLost", cause)
			}
			if !errors.Is(err, runslots.ErrSlotLost) || !errors.Is(err, pglease.ErrLeaseLost) {
				t.Fatalf("Run = %v, want ErrSlotLost matching pglease.ErrLeaseLost", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run = %v, want it to wrap %v", err, tc.wantErr)
			}
			if errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, must not match context.Canceled: ctx was not cancelled", err)
			}
			t.Logf("Run returned: %v", err)
			// Not released: the row still has this holder, with the moved fence.
			if st := slotStatus(t, pool, scope, 1); st.Holder != c.Holder() || st.Fence != 2 {
				t.Fatalf("slot after loss = %+v, want holder %q fence 2 untouched", st, c.Holder())
			}
		})
	}
}

// TestRunDeadline: when renewals hang (the slot row stays locked, so no
// renewal can complete and none can be refused), fn's context is cancelled
// by the local deadline alone, with a cause matching ErrSlotLost: not
// before the deadline less one retry delay (the no-time-to-retry rule), and
// within a generous liveness bound after it. The exact timing is pinned by
// internal/hold's tests on a fake clock.
func TestRunDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")
	const (
		ttl        = 600 * time.Millisecond
		retryDelay = ttl / 20 // Run's retry delay for this TTL
		liveness   = 10 * time.Second
	)
	started := make(chan *runslots.Slot, 1)
	var cause error
	var cancelledAt time.Time
	var deadline time.Time
	err := runAsync(c, "hang", ttl, func(ctx context.Context) error {
		started <- runslots.SlotFromContext(ctx)
		select {
		case <-ctx.Done():
			cancelledAt, cause = time.Now(), context.Cause(ctx)
		case <-time.After(fnTimeout):
			return errors.New("fn's context was not cancelled")
		}
		return nil
	}, func() {
		s := <-started
		deadline = s.Deadline()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Errorf("begin the locking transaction: %v", err)
			return
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(ctx, `SELECT 1 FROM pglease.slots WHERE scope = 'hang' FOR UPDATE`); err != nil {
			t.Errorf("lock the slot row: %v", err)
		}
	})
	if !errors.Is(cause, runslots.ErrSlotLost) {
		t.Fatalf("fn's context cause = %v, want ErrSlotLost", cause)
	}
	if !errors.Is(err, runslots.ErrSlotLost) {
		t.Fatalf("Run = %v, want ErrSlotLost", err)
	}
	// The deadline only moves forward, so the one read before the lock is
	// a lower bound for the one the cancellation met.
	if early := deadline.Sub(cancelledAt); early > retryDelay {
		t.Fatalf("fn cancelled %s before the local deadline, want at most one retry delay (%s)", early, retryDelay)
	}
	if late := cancelledAt.Sub(deadline); late > liveness {
		t.Fatalf("fn cancelled %s after the local deadline, want within %s", late, liveness)
	}
	t.Logf("cancelled %s after the local deadline; Run returned: %v", cancelledAt.Sub(deadline), err)
}

// TestRunParentCancel: when ctx ends, fn's context is cancelled with ctx's
// error as its cause, the slot is kept while fn winds down, and released
// after fn returns.
func TestRunParentCancel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var cause error
	done := make(chan error, 1)
	go func() {
		done <- claimRun(ctx, c, "stop", 1, time.Minute, func(fctx context.Context) error {
			close(started)
			select {
			case <-fctx.Done():
				cause = context.Cause(fctx)
			case <-time.After(fnTimeout):
				return errors.New("fn's context was not cancelled")
			}
			if st, err := findSlot(pool, "stop", 1); err != nil || st.State != pgleaseadmin.Held {
				t.Errorf("slot while fn winds down = %+v (%v), want held", st, err)
			}
			return fctx.Err()
		})
	}()
	<-started
	cancel()
	err := <-done
	if err != context.Canceled || cause != context.Canceled {
		t.Fatalf("Run = %v, cause %v; want fn's context.Canceled and cause context.Canceled", err, cause)
	}
	if st := slotStatus(t, pool, "stop", 1); st.State != pgleaseadmin.Free {
		t.Fatalf("slot after Run = %+v, want free (released on a detached context)", st)
	}
}

// runAsync runs Run in a goroutine, calls inject, and returns Run's error.
func runAsync(c *runslots.Client, scope string, ttl time.Duration, fn func(context.Context) error, inject func()) error {
	done := make(chan error, 1)
	go func() { done <- claimRun(context.Background(), c, scope, 1, ttl, fn) }()
	inject()
	return <-done
}
