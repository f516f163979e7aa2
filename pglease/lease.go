package pglease

import (
	"context"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/asyncrelease"
	"github.com/pglease/pglease/internal/db"
)

// Lease is one tenure of a named lease, identified by its fence. It is safe
// for concurrent use.
type Lease struct {
	c      *Client
	name   string
	fence  int64
	ttl    time.Duration
	margin time.Duration

	mu       sync.Mutex
	deadline time.Time // monotonic; see Deadline
}

// TryAcquire takes the lease name for ttl, or returns at once. It returns a
// *HeldError (errors.Is ErrLeaseHeld) when another holder has a live tenure.
// When this client already holds the lease, it gets the same tenure (same
// fence) back with its expiry re-pinned to ttl from now: retrying after a
// lost reply never creates a second tenure.
func (c *Client) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := checkText("name", name); err != nil {
		return nil, err
	}
	if err := c.checkTTL(ttl); err != nil {
		return nil, err
	}
	return c.tryAcquire(ctx, name, ttl)
}

func (c *Client) tryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	sent := time.Now()
	row, err := c.q.LeaseAcquire(ctx, db.LeaseAcquireParams{Name: name, Holder: c.holder, Ttl: ttl})
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	if !row.Acquired {
		return nil, &HeldError{Name: name, Holder: row.Holder, Fence: row.Fence, ExpiresIn: row.ExpiresIn}
	}
	l := &Lease{c: c, name: name, fence: row.Fence, ttl: ttl, margin: c.marginFor(ttl)}
	l.deadline = sent.Add(ttl - l.margin)
	return l, nil
}

// Name returns the lease name.
func (l *Lease) Name() string { return l.name }

// Fence returns this tenure's fence: larger than that of every earlier
// tenure of the lease. Pass it along with writes to fence them (WithFence).
func (l *Lease) Fence() int64 { return l.fence }

// Holder returns the identity holding this tenure.
func (l *Lease) Holder() string { return l.c.holder }

// TTL returns the time to live each acquire or renew grants.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Deadline returns the local time after which the lease must be assumed
// gone: when the last successful acquire or renew request was sent, plus the
// TTL, minus the safety margin. The server's expiry is at least TTL after it
// received that request, so it is later than Deadline. Deadline carries Go's
// monotonic clock reading: compare it with time.Now or time.Until only (wall
// clock steps do not move it), and do not serialise it.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Renew extends the tenure by the lease's TTL from now, and moves Deadline.
// It returns ErrLeaseLost when the server refused: the lease expired, was
// released or taken over, and the work it guards must stop. Any other error
// (a connection failure, a timeout) leaves the outcome unknown: the renewal
// may or may not have happened. Renewing is idempotent, so retry while
// Deadline allows; only ErrLeaseLost is a verdict.
func (l *Lease) Renew(ctx context.Context) error {
	sent := time.Now()
	row, err := l.c.q.LeaseRenew(ctx, db.LeaseRenewParams{
		Name: l.name, Holder: l.c.holder, Fence: l.fence, Ttl: l.ttl,
	})
	if err != nil {
		return interpretError(ctx, err)
	}
	if !row.Renewed {
		return ErrLeaseLost
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := sent.Add(l.ttl - l.margin); d.After(l.deadline) {
		l.deadline = d
	}
	return nil
}

// Release ends the tenure so that others can acquire the lease at once
// (waiters are notified). The lease keeps its fence: the next tenure gets a
// larger one. Release returns ErrLeaseLost when the tenure had already ended
// (expired or taken over): anything done after Deadline was unprotected.
//
// On a pool, or a connection outside a transaction block, the release
// commits without waiting for its WAL flush (one flush per tenure instead
// of two): a release lost in a crash leaves the lease held until its
// expiry, and every later grant's durable commit carries the release with
// it. Inside a pgx.Tx it commits with the transaction, as durable as it is.
func (l *Lease) Release(ctx context.Context) error {
	var (
		released bool
		err      error
	)
	if asyncrelease.OK(l.c.db) {
		released, err = l.c.q.LeaseReleaseAsync(ctx, db.LeaseReleaseAsyncParams{
			Name: l.name, Holder: l.c.holder, Fence: l.fence,
		})
	} else {
		released, err = l.c.q.LeaseRelease(ctx, db.LeaseReleaseParams{
			Name: l.name, Holder: l.c.holder, Fence: l.fence,
		})
	}
	if err != nil {
		return interpretError(ctx, err)
	}
	if !released {
		return ErrLeaseLost
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = time.Now()
	return nil
}
