package runslots

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/keep"
	"github.com/pglease/pglease/internal/purge"
	"github.com/pglease/pglease/pglease"
)

// minRetryDelay is the shortest pause before Run retries a renewal whose
// outcome is unknown.
const minRetryDelay = 10 * time.Millisecond

// Run claims one of capacity slots of scope for ttl, waiting as Claim does,
// runs fn while renewing the slot, and releases it once fn has returned.
// SlotFromContext(ctx) gives fn the slot (its number and fence); fn must
// not renew or release it.
//
// fn's context is cancelled as soon as the slot can no longer be trusted:
// a renewal is refused, or the slot's Deadline passes without a successful
// renewal (renewals run every ttl/3; one whose outcome is unknown is retried
// after ttl/20, at least 10ms, while the deadline allows). Its cause
// (context.Cause) then matches ErrSlotLost. It is also cancelled when ctx
// ends, with ctx's error as its cause; the slot is renewed until fn returns,
// so it does not lapse while fn winds down. Run never releases the slot, nor
// returns, while fn may still run; if fn has not returned ttl after its
// context was cancelled, Run logs it and keeps waiting.
//
// Run returns:
//   - ctx.Err() unchanged, or another error, when the claim fails; fn has
//     not run;
//   - when the slot was lost while fn ran: an error matching ErrSlotLost
//     (and pglease.ErrLeaseLost), whatever fn returned, even nil. It wraps
//     why fn was cancelled (ctx's error, when ctx ended before the loss)
//     and fn's error unless that is nil or context.Canceled. The slot is
//     not released: it is not ours any more, or will not be once it
//     expires;
//   - otherwise fn's error, unchanged, after releasing the slot. A failed
//     release is logged, not returned: fn finished within the tenure, and
//     the slot frees itself when it expires.
//
// The release runs on a context detached from ctx (so it happens after ctx
// was cancelled too) and bounded by ttl.
//
// A client holds at most one slot per scope, so concurrent Runs of one scope
// on one Client take turns: each waits for the previous one to return
// before it claims. Use one Client per workload that should hold a slot of
// its own.
func (c *Client) Run(ctx context.Context, scope string, capacity int, ttl time.Duration, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("fn must not be nil")
	}
	if err := c.checkClaim(scope, capacity, ttl); err != nil {
		return err
	}
	done, err := c.turns.take(ctx, scope)
	if err != nil {
		return err
	}
	defer done()
	s, err := c.Claim(ctx, scope, capacity, ttl)
	if err != nil {
		return err
	}
	logger := c.logger.With("scope", scope, "slot", s.number, "fence", s.fence, "holder", c.holder)
	if c.pool != nil && c.purge > 0 {
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { purge.Loop(pctx, c.pool, c.purge, purge.DefaultFreeFor, logger) })
		defer wg.Wait()
		defer stop()
	}
	res := keep.Hold(ctx, s, keep.Config{
		RenewInterval: ttl / 3,
		RetryDelay:    max(ttl/20, minRetryDelay),
		StopTimeout:   ttl,
		IsLost:        func(err error) bool { return errors.Is(err, pglease.ErrLeaseLost) },
		Logger:        logger,
	}, func(kctx context.Context) error {
		wctx, stop := workContext(kctx)
		defer stop()
		return fn(context.WithValue(wctx, slotKey{}, s))
	})
	if res.Lost {
		lost := &lostError{scope: scope, slot: s.number, fence: s.fence, cause: res.Cause}
		if !errors.Is(res.WorkErr, context.Canceled) {
			lost.workErr = res.WorkErr
		}
		logger.Warn("runslots: slot lost while the workload ran", "cause", res.Cause)
		return lost
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	if err := s.Release(rctx); err != nil {
		logger.Warn("runslots: release after the workload returned failed; the slot frees when it expires", "err", err)
	}
	return res.WorkErr
}

// workContext returns the context fn runs with: cancelled when kctx (keep's
// workload context) is, with keep's loss causes turned into errors that
// match ErrSlotLost. Call stop once fn has returned.
func workContext(kctx context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(kctx))
	unregister := context.AfterFunc(kctx, func() {
		cause := context.Cause(kctx)
		if isLoss(cause) && !errors.Is(cause, ErrSlotLost) {
			cause = fmt.Errorf("%w: %w", ErrSlotLost, cause)
		}
		cancel(cause)
	})
	return ctx, func() {
		unregister()
		cancel(nil)
	}
}

// slotKey is the context key of the slot Run runs fn with.
type slotKey struct{}

// SlotFromContext returns the slot that Run runs fn with, from fn's
// context, or nil when ctx is not such a context.
func SlotFromContext(ctx context.Context) *Slot {
	s, _ := ctx.Value(slotKey{}).(*Slot)
	return s
}

// isLoss reports whether cause is one of keep's causes for a lost tenure.
func isLoss(cause error) bool {
	return errors.Is(cause, keep.ErrRefused) || errors.Is(cause, keep.ErrDeadline) || errors.Is(cause, keep.ErrNoTime)
}

// turns lets one Run at a time per scope hold this client's slot of it.
type turns struct {
	mu sync.Mutex
	m  map[string]*turn
}

// turn is one scope's token and the number of Runs using it.
type turn struct {
	token chan struct{}
	refs  int
}

// take waits for scope's turn, or returns ctx.Err() unchanged. Call done
// when the turn is over.
func (ts *turns) take(ctx context.Context, scope string) (done func(), err error) {
	ts.mu.Lock()
	if ts.m == nil {
		ts.m = make(map[string]*turn)
	}
	t := ts.m[scope]
	if t == nil {
		t = &turn{token: make(chan struct{}, 1)}
		ts.m[scope] = t
	}
	t.refs++
	ts.mu.Unlock()

	unref := func() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if t.refs--; t.refs == 0 {
			delete(ts.m, scope)
		}
	}
	select {
	case t.token <- struct{}{}:
		return func() { <-t.token; unref() }, nil
	case <-ctx.Done():
		unref()
		return nil, ctx.Err()
	}
}
