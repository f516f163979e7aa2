package runslots

import (
	"context"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/tenure"
)

// Run claims one of capacity slots of scope for ttl, waiting as Claim does,
// and runs fn under it as Slot.Run does: it renews the slot while fn runs,
// cancels fn's context the moment the slot can no longer be trusted (its
// cause then matches ErrSlotLost) or ctx ends, and releases the slot once
// fn has returned. SlotFromContext(ctx) gives fn the slot (its number and
// fence); fn must not renew or release it.
//
// Run returns:
//   - ctx.Err() unchanged, or another error, when the claim fails; fn has
//     not run;
//   - when the slot was lost while fn ran: a *LostError matching
//     ErrSlotLost (and pglease.ErrLeaseLost), whatever fn returned, even
//     nil; the slot is not released;
//   - otherwise fn's error, unchanged, after releasing the slot (a failed
//     release is logged, not returned).
//
// A client holds at most one slot per scope, so concurrent Runs of one scope
// on one Client take turns: each waits for the previous one to return
// before it claims. Use one Client per workload that should hold a slot of
// its own.
func (c *Client) Run(ctx context.Context, scope string, capacity int, ttl time.Duration, fn func(ctx context.Context) error) error {
	if fn == nil {
		return tenure.Invalidf("fn must not be nil")
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
	return s.Run(ctx, fn)
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
