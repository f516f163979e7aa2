package tenure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/pglease/pglease/internal/keep"
	"github.com/pglease/pglease/internal/purge"
)

// Run keeps t while fn runs and releases it after fn returns; pglease's
// Lease.Run documents the contract. The keep policy is the client's:
// renewals every RenewInterval (default TTL/3), a renewal whose outcome is
// unknown retried after RetryDelay (default TTL/20, at least 10ms) while
// the deadline allows, a stuck workload reported after StopTimeout
// (default TTL).
func (t *Tenure) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return Invalidf("fn must not be nil")
	}
	c := t.c
	logger := c.cfg.Logger.With(c.kind.Noun, t.name, "fence", t.fence, "holder", c.cfg.Holder)
	if t.slot != 0 {
		logger = logger.With("slot", t.slot)
	}
	if c.pool != nil && c.purge > 0 {
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { purge.Loop(pctx, c.pool, c.purge, purge.DefaultFreeFor, logger) })
		defer wg.Wait()
		defer stop()
	}
	renew := cmp.Or(c.cfg.RenewInterval, t.ttl/3)
	res := keep.Hold(ctx, t, keep.Config{
		RenewInterval: renew,
		RetryDelay:    cmp.Or(c.cfg.RetryDelay, max(t.ttl/20, minRetryDelay)),
		StopTimeout:   cmp.Or(c.cfg.StopTimeout, t.ttl),
		IsLost:        func(err error) bool { return errors.Is(err, c.kind.Lost) },
		Logger:        logger,
		OnStuck:       c.cfg.OnStuck,
	}, func(kctx context.Context) error {
		wctx, stop := t.workContext(kctx)
		defer stop()
		return fn(wctx)
	})
	if res.Lost {
		t.end()
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

// workContext returns the context fn runs with: cancelled when kctx (keep's
// workload context) is, with keep's loss causes turned into errors that
// match the kind's lost sentinel. Call stop once fn has returned.
func (t *Tenure) workContext(kctx context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(kctx))
	unregister := context.AfterFunc(kctx, func() {
		cause := context.Cause(kctx)
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

// isLoss reports whether cause is one of keep's causes for a lost tenure.
func isLoss(cause error) bool {
	return errors.Is(cause, keep.ErrRefused) || errors.Is(cause, keep.ErrDeadline) || errors.Is(cause, keep.ErrNoTime)
}
