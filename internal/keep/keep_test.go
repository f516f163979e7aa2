package keep_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pglease/pglease/internal/keep"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errLost = errors.New("lost")

// tenure is a tenure whose renewals answer from a script of behaviours;
// the keep loop's logic is under test here, the real database paths are in
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

func config() keep.Config {
	return keep.Config{
		RenewInterval: 30 * time.Millisecond,
		RetryDelay:    10 * time.Millisecond,
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

func TestRenewsWhileWorking(t *testing.T) {
	tn := newTenure(100*time.Millisecond, func(context.Context, int) error { return nil })
	res := keep.Hold(context.Background(), tn, config(), func(ctx context.Context) error {
		time.Sleep(300 * time.Millisecond) // three TTLs: only renewals keep it
		return ctx.Err()
	})
	if res.Lost || res.Cause != nil || res.WorkErr != nil {
		t.Fatalf("Hold = %+v, want a clean return", res)
	}
	if tn.n < 5 {
		t.Fatalf("%d renewals in 300ms at a 30ms interval, want many", tn.n)
	}
}

func TestRefusedCancels(t *testing.T) {
	at := make(chan time.Time, 1)
	tn := newTenure(time.Second, func(_ context.Context, n int) error {
		if n == 2 {
			return errLost
		}
		return nil
	})
	res := keep.Hold(context.Background(), tn, config(), untilCancelled(at))
	if !res.Lost || !errors.Is(res.Cause, keep.ErrRefused) || !errors.Is(res.Cause, errLost) {
		t.Fatalf("Hold = %+v, want lost with ErrRefused wrapping the refusal", res)
	}
	if !errors.Is(res.WorkErr, keep.ErrRefused) {
		t.Fatalf("workload's context cause = %v, want ErrRefused", res.WorkErr)
	}
	if tn.n != 2 {
		t.Fatalf("%d renewals, want none after the refusal", tn.n)
	}
}

// TestHangingRenewalDeadline: a renewal that hangs (a blackholed
// connection) cannot keep the workload running past the deadline.
func TestHangingRenewalDeadline(t *testing.T) {
	at := make(chan time.Time, 1)
	tn := newTenure(200*time.Millisecond, func(ctx context.Context, n int) error {
		if n >= 2 {
			<-ctx.Done() // hangs until its own deadline
			return ctx.Err()
		}
		return nil
	})
	res := keep.Hold(context.Background(), tn, config(), untilCancelled(at))
	cancelled := <-at
	if !res.Lost || !errors.Is(res.Cause, keep.ErrDeadline) {
		t.Fatalf("Hold = %+v, want lost with ErrDeadline", res)
	}
	if late := cancelled.Sub(tn.Deadline()); late > 50*time.Millisecond {
		t.Fatalf("workload cancelled %s after the deadline, want at it", late)
	}
}

// TestUnknownOutcomeRetried: failures that are not refusals are retried,
// and a success keeps the workload running.
func TestUnknownOutcomeRetried(t *testing.T) {
	errNet := errors.New("connection reset")
	tn := newTenure(300*time.Millisecond, func(_ context.Context, n int) error {
		if n == 2 || n == 3 {
			return errNet
		}
		return nil
	})
	res := keep.Hold(context.Background(), tn, config(), func(context.Context) error {
		time.Sleep(400 * time.Millisecond)
		return nil
	})
	if res.Lost || res.Cause != nil {
		t.Fatalf("Hold = %+v, want the workload to survive two unknown outcomes", res)
	}
}

// TestNoTimeLeft: when renewals keep failing and the next retry could not
// start before the deadline, the workload is cancelled at once, before the
// deadline.
func TestNoTimeLeft(t *testing.T) {
	at := make(chan time.Time, 1)
	tn := newTenure(150*time.Millisecond, func(_ context.Context, n int) error {
		if n >= 2 {
			return errors.New("connection refused")
		}
		return nil
	})
	cfg := config()
	cfg.RetryDelay = 40 * time.Millisecond
	res := keep.Hold(context.Background(), tn, cfg, untilCancelled(at))
	cancelled := <-at
	if !res.Lost || !(errors.Is(res.Cause, keep.ErrNoTime) || errors.Is(res.Cause, keep.ErrDeadline)) {
		t.Fatalf("Hold = %+v, want lost with ErrNoTime", res)
	}
	if cancelled.After(tn.Deadline()) {
		t.Fatalf("cancelled %s after the deadline", cancelled.Sub(tn.Deadline()))
	}
}

// TestParentCancelKeepsRenewing: after the parent ends, the tenure is still
// renewed until the workload returns, and the stuck report fires.
func TestParentCancelKeepsRenewing(t *testing.T) {
	tn := newTenure(100*time.Millisecond, func(context.Context, int) error { return nil })
	cfg := config()
	cfg.StopTimeout = 50 * time.Millisecond
	stuck := make(chan error, 1)
	cfg.OnStuck = func(cause error) { stuck <- cause }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	go func() {
		<-stuck
		time.Sleep(250 * time.Millisecond) // past two TTLs
		close(release)
	}()
	res := keep.Hold(ctx, tn, cfg, func(context.Context) error {
		<-release // ignores its context
		return nil
	})
	if res.Lost || !errors.Is(res.Cause, context.Canceled) {
		t.Fatalf("Hold = %+v, want the parent's cancellation as cause, not lost", res)
	}
	if tn.n < 3 {
		t.Fatalf("%d renewals while the stuck workload ran, want them to go on", tn.n)
	}
}
