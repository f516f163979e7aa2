package pglease

import (
	"context"
	"errors"
	"time"

	"github.com/pglease/pglease/internal/notify"
)

// NotifyChannel is the channel the SQL functions NOTIFY on when a lease or
// slot that someone waits for is released (a refused acquire or claim
// registers its caller as a waiter until the holder's expiry). The payload
// is JSON: {"kind": "lease"|"slot", "event": "released", "name": ...,
// "slot": ..., "fence": ..., "holder": ...}. Releases nobody waits for send
// nothing: a NOTIFY makes its transaction commit under a cluster-wide lock.
const NotifyChannel = notify.Channel

// Acquire takes the lease name for ttl, waiting while another holder has it.
// It wakes as soon as the holder releases (a NOTIFY, when the client was
// built on a *pgxpool.Pool) and otherwise sleeps until the holder's reported
// expiry, then tries again. It returns ctx.Err() unchanged when ctx ends
// first. Errors other than the lease being held (connection failures, bad
// arguments) are returned at once.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := checkText("name", name); err != nil {
		return nil, err
	}
	if err := c.checkTTL(ttl); err != nil {
		return nil, err
	}
	// Try before listening: a free lease needs no LISTEN connection. Once
	// refused, listen, then try again before waiting, so that a release
	// between the first try and the LISTEN is not missed.
	l, err := c.tryAcquire(ctx, name, ttl)
	if _, ok := errors.AsType[*HeldError](err); !ok {
		return l, err
	}
	w := notify.Listen(ctx, c.pool, "lease", name)
	defer w.Close(ctx)
	for {
		l, err := c.tryAcquire(ctx, name, ttl)
		held, ok := errors.AsType[*HeldError](err)
		if !ok {
			return l, err
		}
		if c.waiting != nil {
			c.waiting(name)
		}
		if err := w.Wait(ctx, held.ExpiresIn); err != nil {
			return nil, err
		}
	}
}
