// Package hold runs a workload while a lease or slot tenure is held,
// renewing it, and cancels the workload the moment the tenure is no longer
// certain. It is the timer logic of internal/tenure's Hold (so of
// Lease.Run, Slot.Run, the supervisor and pglease run), which applies the
// defaults.
package hold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pglease/pglease/internal/sqlerr"
)

// Tenure is a lease or slot tenure being held.
type Tenure interface {
	// Renew extends the tenure. An error for which Config.IsLost is true is
	// the server's refusal; any other error leaves the outcome unknown.
	Renew(ctx context.Context) error
	// Deadline is the local monotonic time after which the tenure must be
	// assumed gone. It moves forward with each successful Renew.
	Deadline() time.Time
}

// Config tunes Run. The durations, IsLost and Logger are required (no
// defaults here: internal/tenure's Hold applies them); the callbacks are
// optional.
type Config struct {
	// RenewInterval is the time between successful renewals.
	RenewInterval time.Duration
	// RetryDelay is the time before retrying a renewal whose outcome is
	// unknown (connection error, timeout).
	RetryDelay time.Duration
	// StopTimeout is how long after cancelling to wait for the workload
	// before reporting it as stuck (Run keeps waiting).
	StopTimeout time.Duration
	// IsLost reports whether a renewal error is the server's refusal.
	IsLost func(error) bool
	// Logger receives renewal failures and stuck workloads.
	Logger *slog.Logger
	// OnStuck, when set, is called once when the workload has not returned
	// StopTimeout after its context was cancelled.
	OnStuck func(cause error)
	// OnRenew, when set, is called after each successful renewal, on
	// Run's goroutine, with the deadline the renewal moved t to. It must
	// return quickly: the deadline timer is re-armed after it returns.
	OnRenew func(deadline time.Time)
}

// Causes of cancellation, set as the workload context's cause
// (context.Cause).
var (
	// ErrRefused: the server refused a renewal; the tenure is over.
	ErrRefused = errors.New("renewal refused by the server: the tenure is over")
	// ErrDeadline: the local deadline passed before a renewal succeeded.
	ErrDeadline = errors.New("local deadline passed without a successful renewal")
	// ErrNoTime: a renewal failed and no retry could finish before the
	// local deadline.
	ErrNoTime = errors.New("renewal failed and no time is left to retry before the local deadline")
)

// Result says how a Run ended.
type Result struct {
	// WorkErr is what the workload returned.
	WorkErr error
	// Cause is why the workload was cancelled: ctx's error when the parent
	// ended, an error matching ErrRefused, ErrDeadline or ErrNoTime when the
	// tenure was lost; nil when the workload returned on its own.
	Cause error
	// Lost is true when the tenure must be considered gone (do not release
	// it, do not renew it).
	Lost bool
}

// Run runs work with a context of its own while renewing t every
// RenewInterval, and returns once work has returned. It cancels work's
// context as soon as any of these happens:
//   - a renewal is refused (IsLost);
//   - a renewal fails and the next attempt could not start before the
//     deadline;
//   - t's Deadline passes while no renewal has succeeded (also while one
//     hangs: renewals run on their own goroutine, bounded by the deadline);
//   - ctx ends.
//
// After ctx ends, renewals go on until work returns, so the tenure does not
// lapse while the workload winds down. Once work has returned, a renewal
// in flight is ended (its context cancelled) and Run returns. Run never
// releases the tenure; the caller does that once it has returned with Lost
// false.
func Run(ctx context.Context, t Tenure, cfg Config, work func(context.Context) error) Result {
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	done := make(chan error, 1)
	go func() { done <- work(workCtx) }()

	h := holding{t: t, cfg: cfg, cancelWork: cancelWork, renewDone: make(chan error, 1)}
	h.deadline = time.NewTimer(time.Until(t.Deadline()))
	defer h.deadline.Stop()
	h.next = time.NewTimer(cfg.RenewInterval)
	defer h.next.Stop()
	var stuck <-chan time.Time // armed once the workload is cancelled
	parentDone := ctx.Done()

	for {
		select {
		case err := <-done:
			if h.renewing {
				// The workload is over, and the caller releases the tenure
				// by compare-and-set whatever this renewal does: end it
				// rather than wait for a hanging call (or a Keeper's next
				// round) until the deadline. A verdict it already has
				// still counts.
				h.cancelRenew()
				if rerr := <-h.renewDone; errors.Is(rerr, context.Canceled) {
					h.renewing = false
				} else {
					h.renewed(rerr)
				}
			}
			return Result{WorkErr: err, Cause: h.cause, Lost: h.lost}
		case <-parentDone:
			parentDone = nil
			h.stop(ctx.Err(), false)
		case <-h.deadline.C:
			h.stop(ErrDeadline, true)
		case <-h.next.C:
			if !h.lost && !h.renewing {
				h.renew()
			}
		case err := <-h.renewDone:
			h.renewed(err)
		case <-stuck:
			stuck = nil
			cfg.Logger.Error("workload has not returned after its context was cancelled; still waiting",
				"stop_timeout", cfg.StopTimeout, "cause", h.cause)
			if cfg.OnStuck != nil {
				cfg.OnStuck(h.cause)
			}
		}
		if h.cause != nil && h.stuckTimer == nil {
			h.stuckTimer = time.NewTimer(cfg.StopTimeout)
			defer h.stuckTimer.Stop()
			stuck = h.stuckTimer.C
		}
	}
}

// holding is Run's state; it lives on Run's goroutine only.
type holding struct {
	t           Tenure
	cfg         Config
	cancelWork  context.CancelCauseFunc
	deadline    *time.Timer
	next        *time.Timer
	renewDone   chan error
	renewing    bool
	cancelRenew context.CancelFunc // ends the renewal in flight
	lost        bool
	cause       error
	stuckTimer  *time.Timer
}

// stop cancels the workload with cause (the first cause wins).
func (h *holding) stop(cause error, lost bool) {
	if lost {
		h.lost = true
		h.deadline.Stop()
	}
	if h.cause == nil {
		h.cause = cause
		h.cancelWork(cause)
	}
}

// renew starts one renewal on its own goroutine, bounded by the deadline
// and ended early when the workload returns.
func (h *holding) renew() {
	h.renewing = true
	rctx, cancel := context.WithDeadline(context.Background(), h.t.Deadline())
	h.cancelRenew = cancel
	go func() {
		defer cancel()
		h.renewDone <- h.t.Renew(rctx)
	}()
}

// renewed handles a renewal's outcome.
func (h *holding) renewed(err error) {
	h.renewing = false
	if h.lost {
		return
	}
	switch {
	case err == nil:
		deadline := h.t.Deadline()
		if h.cfg.OnRenew != nil {
			h.cfg.OnRenew(deadline)
		}
		left := time.Until(deadline)
		h.cfg.Logger.Debug("renewed", "deadline_in", left)
		h.deadline.Reset(left)
		h.next.Reset(h.cfg.RenewInterval)
	case h.cfg.IsLost(err):
		h.stop(fmt.Errorf("%w: %w", ErrRefused, sqlerr.Unprefixed(err)), true)
	default:
		left := time.Until(h.t.Deadline())
		if left <= 0 {
			// A renewal that hung until the deadline ends the same instant
			// the deadline timer fires: the deadline is the cause either way.
			h.stop(fmt.Errorf("%w: %w", ErrDeadline, sqlerr.Unprefixed(err)), true)
			return
		}
		h.cfg.Logger.Warn("renewal failed, outcome unknown; retrying", "err", err, "deadline_in", left)
		if left <= h.cfg.RetryDelay {
			h.stop(fmt.Errorf("%w: %w", ErrNoTime, sqlerr.Unprefixed(err)), true)
			return
		}
		h.next.Reset(h.cfg.RetryDelay)
	}
}
