package hold_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/pglease/pglease/internal/hold"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests run in synctest bubbles: time is fake and advances only when
// every goroutine of the bubble is blocked, so timer outcomes are exact and
// independent of the machine's load.

var errLost = errors.New("lost")

// tenure is a tenure whose renewals answer from a script of behaviours;
// the hold loop's logic is under test here, the real database paths are in
// the supervisor's and runslots' tests.
type tenure struct {
	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time
	renew    func(ctx context.Context, n int) error
	n        int
}

func newTenure(ttl time.Duration, renew func(ctx context.Context, n int) error) *tenure {
	return &tenure{ttl: ttl, deadline: time.Now().Add(ttl), renew: renew}
}

func (t *tenure) Renew(ctx context.Context) error {
	sent := time.Now()
	t.mu.Lock()
	t.n++
	n := t.n
	t.mu.Unlock()
	if err := t.renew(ctx, n); err != nil {
		return err
	}
	t.mu.Lock()
	t.deadline = sent.Add(t.ttl)
	t.mu.Unlock()
	return nil
}

func (t *tenure) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

func (t *tenure) renewals() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

const (
	renewInterval = 30 * time.Millisecond
	retryDelay    = 10 * time.Millisecond
)

func config() hold.Config {
	return hold.Config{
		RenewInterval: renewInterval,
		RetryDelay:    retryDelay,
		StopTimeout:   time.Second,
		IsLost:        func(err error) bool { return errors.Is(err, errLost) },
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// untilCancelled is a workload that returns when cancelled, reporting when.
func untilCancelled(at chan<- time.Time) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		at <- time.Now()
		return context.Cause(ctx)
	}
}

// TestRenewsWhileWorking: a workload three TTLs long keeps its tenure, with
// a renewal every RenewInterval.
func TestRenewsWhileWorking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTenure(100*time.Millisecond, func(context.Context, int) error { return nil })
		res := hold.Run(context.Background(), tn, config(), func(ctx context.Context) error {
			time.Sleep(295 * time.Millisecond) // the workload's duration, on the bubble's clock
			return ctx.Err()
		})
		if res.Lost || res.Cause != nil || res.WorkErr != nil {
			t.Fatalf("Run = %+v, want a clean return", res)
		}
		if got, want := tn.renewals(), 9; got != want { // at 30, 60, ... 270 ms
			t.Fatalf("%d renewals in 295ms at a 30ms interval, want %d", got, want)
		}
	})
}

// TestRefusedCancels: a refused renewal cancels the workload at once and
// ends the renewals.
func TestRefusedCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		at := make(chan time.Time, 1)
		tn := newTenure(time.Second, func(_ context.Context, n int) error {
			if n == 2 {
				return errLost
			}
			return nil
		})
		res := hold.Run(context.Background(), tn, config(), untilCancelled(at))
		if !res.Lost || !errors.Is(res.Cause, hold.ErrRefused) || !errors.Is(res.Cause, errLost) {
			t.Fatalf("Run = %+v, want lost with ErrRefused wrapping the refusal", res)
		}
		if !errors.Is(res.WorkErr, hold.ErrRefused) {
			t.Fatalf("workload's context cause = %v, want ErrRefused", res.WorkErr)
		}
		if got, want := (<-at).Sub(start), 2*renewInterval; got != want {
			t.Fatalf("workload cancelled %s after the start, want %s (at the refused renewal)", got, want)
		}
		if n := tn.renewals(); n != 2 {
			t.Fatalf("%d renewals, want none after the refusal", n)
		}
	})
}

// TestHangingRenewalDeadline: a renewal that hangs (a blackholed
// connection) cannot keep the workload running past the deadline: the
// workload is cancelled exactly at it, with ErrDeadline.
func TestHangingRenewalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := make(chan time.Time, 1)
		tn := newTenure(200*time.Millisecond, func(ctx context.Context, n int) error {
			if n >= 2 {
				<-ctx.Done() // hangs until its own deadline
				return ctx.Err()
			}
			return nil
		})
		res := hold.Run(context.Background(), tn, config(), untilCancelled(at))
		cancelled := <-at
		if !res.Lost || !errors.Is(res.Cause, hold.ErrDeadline) || errors.Is(res.Cause, hold.ErrNoTime) {
			t.Fatalf("Run = %+v, want lost with ErrDeadline", res)
		}
		if !cancelled.Equal(tn.Deadline()) {
			t.Fatalf("workload cancelled %s after the deadline, want at it", cancelled.Sub(tn.Deadline()))
		}
		if n := tn.renewals(); n != 2 {
			t.Fatalf("%d renewals, want 2: no new renewal while one hangs", n)
		}
	})
}

// TestUnknownOutcomeRetried: failures that are not refusals are retried
// after RetryDelay, and a success keeps the workload running.
func TestUnknownOutcomeRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errNet := errors.New("connection reset")
		var mu sync.Mutex
		var attempts []time.Duration
		start := time.Now()
		tn := newTenure(300*time.Millisecond, func(_ context.Context, n int) error {
			mu.Lock()
			attempts = append(attempts, time.Since(start))
			mu.Unlock()
			if n == 2 || n == 3 {
				return errNet
			}
			return nil
		})
		res := hold.Run(context.Background(), tn, config(), func(context.Context) error {
			time.Sleep(115 * time.Millisecond)
			return nil
		})
		if res.Lost || res.Cause != nil {
			t.Fatalf("Run = %+v, want the workload to survive two unknown outcomes", res)
		}
		// 30 ok, 60 fails, 70 fails (retry), 80 ok (retry), 110 ok.
		want := []time.Duration{30, 60, 70, 80, 110}
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != len(want) {
			t.Fatalf("renewals at %v, want at %v ms", attempts, want)
		}
		for i := range want {
			if attempts[i] != want[i]*time.Millisecond {
				t.Fatalf("renewals at %v, want at %v ms", attempts, want)
			}
		}
	})
}

// TestNoTimeLeft: when renewals keep failing and the next retry could not
// start before the deadline, the workload is cancelled at once with
// ErrNoTime, a retry delay before the deadline.
func TestNoTimeLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := make(chan time.Time, 1)
		tn := newTenure(150*time.Millisecond, func(_ context.Context, n int) error {
			if n >= 2 {
				return errors.New("connection refused")
			}
			return nil
		})
		cfg := config()
		cfg.RetryDelay = 40 * time.Millisecond
		res := hold.Run(context.Background(), tn, cfg, untilCancelled(at))
		cancelled := <-at
		if !res.Lost || !errors.Is(res.Cause, hold.ErrNoTime) || errors.Is(res.Cause, hold.ErrDeadline) {
			t.Fatalf("Run = %+v, want lost with ErrNoTime", res)
		}
		// Renewed at 30 (deadline 180); failures at 60, 100, 140: at 140
		// only 40ms, one retry delay, is left.
		if early := tn.Deadline().Sub(cancelled); early != cfg.RetryDelay {
			t.Fatalf("cancelled %s before the deadline, want %s", early, cfg.RetryDelay)
		}
	})
}

// TestParentCancelKeepsRenewing: after the parent ends, the tenure is still
// renewed until the workload returns, and the stuck report fires once, at
// StopTimeout.
func TestParentCancelKeepsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tn := newTenure(100*time.Millisecond, func(context.Context, int) error { return nil })
		cfg := config()
		cfg.StopTimeout = 50 * time.Millisecond
		stuck := make(chan time.Time, 2)
		cfg.OnStuck = func(error) { stuck <- time.Now() }
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := hold.Run(ctx, tn, cfg, func(context.Context) error {
			time.Sleep(295 * time.Millisecond) // ignores its context, past two TTLs
			return nil
		})
		if res.Lost || !errors.Is(res.Cause, context.Canceled) {
			t.Fatalf("Run = %+v, want the parent's cancellation as cause, not lost", res)
		}
		if got, want := tn.renewals(), 9; got != want {
			t.Fatalf("%d renewals while the stuck workload ran, want %d (they go on)", got, want)
		}
		if len(stuck) != 1 {
			t.Fatalf("stuck reported %d times, want once", len(stuck))
		}
		if got := (<-stuck).Sub(start); got != cfg.StopTimeout {
			t.Fatalf("stuck reported %s after the cancellation, want %s", got, cfg.StopTimeout)
		}
	})
}

// TestOnRenewReportsDeadlines: OnRenew gets the deadline each successful
// renewal moved the tenure to, and nothing for a failed one.
func TestOnRenewReportsDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tn := newTenure(300*time.Millisecond, func(_ context.Context, n int) error {
			if n == 2 {
				return errors.New("connection reset")
			}
			return nil
		})
		cfg := config()
		var got []time.Duration // appended on Run's goroutine, which is this one
		cfg.OnRenew = func(deadline time.Time) { got = append(got, deadline.Sub(start)) }
		res := hold.Run(context.Background(), tn, cfg, func(context.Context) error {
			time.Sleep(85 * time.Millisecond)
			return nil
		})
		if res.Lost || res.Cause != nil {
			t.Fatalf("Run = %+v, want a clean return", res)
		}
		// 30 ok (deadline 330), 60 fails, 70 ok (retry; deadline 370).
		want := []time.Duration{330 * time.Millisecond, 370 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Fatalf("OnRenew deadlines %v after the start, want %v", got, want)
		}
	})
}

// TestReturnEndsHangingRenewal: when the workload returns while a renewal
// hangs (a dead connection, or a Keeper's next round that may never come),
// Run ends that renewal and returns at once, not at the deadline, and the
// tenure is not reported lost: the caller releases it.
func TestReturnEndsHangingRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hanging := make(chan struct{})
		tn := newTenure(time.Second, func(ctx context.Context, n int) error {
			close(hanging)
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		res := hold.Run(context.Background(), tn, config(), func(context.Context) error {
			<-hanging
			return nil
		})
		if took := time.Since(start); took != renewInterval {
			t.Fatalf("Run returned %s after it started, want at the hanging renewal's start (%s)", took, renewInterval)
		}
		if res.Lost || res.Cause != nil || res.WorkErr != nil {
			t.Fatalf("Run = %+v, want not lost, no cause", res)
		}
	})
}
