package tenure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pglease/pglease/internal/hold"
)

// Run holds t while fn runs and releases it after fn returns; pglease's
// Lease.Run documents the contract. The policy is Hold's, with the pace of
// the client's Config (Config.Pace), its StopTimeout and OnStuck.
func (t *Tenure) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return Invalidf("fn must not be nil")
	}
	defer t.unwatched()
	c := t.c
	logger := c.cfg.Logger.With(c.kind.Noun, t.name, "fence", t.fence, "holder", c.cfg.Holder)
	if t.slot != 0 {
		logger = logger.With("slot", t.slot)
	}
	renew, retry := c.cfg.Pace(t.ttl)
	res := Hold(ctx, t, HoldConfig{
		TTL:           t.ttl,
		RenewInterval: renew,
		RetryDelay:    retry,
		StopTimeout:   c.cfg.StopTimeout,
		Lost:          c.kind.Lost,
		Logger:        logger,
		OnStuck:       c.cfg.OnStuck,
	}, func(hctx context.Context) error {
		wctx, stop := t.workContext(hctx)
		defer stop()
		return fn(wctx)
	})
	if res.Lost {
		t.endLost(res.Cause)
		workErr := res.WorkErr
		if errors.Is(workErr, context.Canceled) {
			workErr = nil
		}
		logger.Warn(c.kind.Prefix+": "+c.kind.Noun+" lost while the workload ran", "cause", res.Cause)
		return c.kind.LostError(t, res.Cause, workErr)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.ttl)
	defer cancel()
	err := t.Release(rctx)
	if err != nil {
		logger.Warn(c.kind.Prefix+": release after the workload returned failed; the "+c.kind.Noun+" frees when it expires", "err", err)
	}
	if c.cfg.OnRelease != nil {
		c.cfg.OnRelease(err)
	}
	return res.WorkErr
}

// Held is a tenure Hold can hold: a *Tenure, a pglease.Lease or a
// runslots.Slot.
type Held = hold.Tenure

// HoldResult says how a Hold ended (hold.Result documents the fields).
type HoldResult = hold.Result

// Causes of a loss that Hold sets on its workload's context
// (context.Cause) and in HoldResult.Cause.
var (
	// ErrRefused: the server refused a renewal.
	ErrRefused = hold.ErrRefused
	// ErrDeadline: the local deadline passed without a successful renewal.
	ErrDeadline = hold.ErrDeadline
	// ErrNoTime: a renewal failed with no time left to retry before the
	// local deadline.
	ErrNoTime = hold.ErrNoTime
)

// HoldConfig is the renewal policy of one tenure held while a workload
// runs. Zero durations mean their defaults, which derive from TTL by the
// rule of Config.Pace.
type HoldConfig struct {
	// TTL is the tenure's time to live. Required.
	TTL time.Duration
	// RenewInterval is the time between renewals. Defaults to TTL/3.
	RenewInterval time.Duration
	// RetryDelay is the pause before retrying a renewal whose outcome is
	// unknown, while the deadline allows. Defaults to RenewInterval/5.
	RetryDelay time.Duration
	// StopTimeout is how long after cancelling the workload Hold waits
	// before reporting it as stuck (it keeps waiting). Defaults to TTL.
	StopTimeout time.Duration
	// Lost is the kind's lost sentinel: a renewal error matching it is
	// the server's refusal. Required.
	Lost error
	// Logger receives renewal failures and stuck workloads. Required.
	Logger *slog.Logger
	// OnStuck, when set, is called once when the workload has not
	// returned StopTimeout after its context was cancelled.
	OnStuck func(cause error)
	// OnRenew, when set, is called after each successful renewal with the
	// tenure's new deadline, on Hold's goroutine; it must return quickly.
	OnRenew func(deadline time.Time)
}

// Hold runs fn while renewing t by cfg's policy, cancels fn's context the
// moment t is no longer certain (its cause: ctx's error, or one matching
// ErrRefused, ErrDeadline or ErrNoTime), and returns once fn has returned.
// It neither releases nor ends t: Run does that for its own tenures, and
// pglease run for the lease and slot it holds around a command.
func Hold(ctx context.Context, t Held, cfg HoldConfig, fn func(ctx context.Context) error) HoldResult {
	renew, retry := pace(cfg.TTL, cfg.RenewInterval, cfg.RetryDelay)
	return hold.Run(ctx, t, hold.Config{
		RenewInterval: renew,
		RetryDelay:    retry,
		StopTimeout:   cmp.Or(cfg.StopTimeout, cfg.TTL),
		IsLost:        func(err error) bool { return errors.Is(err, cfg.Lost) },
		Logger:        cfg.Logger,
		OnStuck:       cfg.OnStuck,
		OnRenew:       cfg.OnRenew,
	}, fn)
}

// workContext returns the context fn runs with: cancelled when hctx (Hold's
// workload context) is, with Hold's loss causes turned into errors that
// match the kind's lost sentinel. Call stop once fn has returned.
func (t *Tenure) workContext(hctx context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(hctx))
	unregister := context.AfterFunc(hctx, func() {
		cause := context.Cause(hctx)
		if isLoss(cause) && !errors.Is(cause, t.c.kind.Lost) {
			cause = fmt.Errorf("%w: %w", t.c.kind.Lost, cause)
		}
		cancel(cause)
	})
	return ctx, func() {
		unregister()
		cancel(nil)
	}
}

// isLoss reports whether cause is one of Hold's causes for a lost tenure.
func isLoss(cause error) bool {
	return errors.Is(cause, ErrRefused) || errors.Is(cause, ErrDeadline) || errors.Is(cause, ErrNoTime)
}
