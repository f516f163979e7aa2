package pglease

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/db"
)

// NotifyChannel is the channel the SQL functions NOTIFY on when a lease or
// slot changes holder. The payload is JSON: {"kind": "lease"|"slot",
// "event": "acquired"|"released", "name": ..., "slot": ..., "fence": ...,
// "holder": ...}.
const NotifyChannel = "pglease"

// Notification is the decoded payload of a NOTIFY on NotifyChannel.
type Notification struct {
	Kind   string `json:"kind"`   // "lease" or "slot"
	Event  string `json:"event"`  // "acquired" or "released"
	Name   string `json:"name"`   // lease name or slot scope
	Slot   *int32 `json:"slot"`   // slot number; nil for leases
	Fence  int64  `json:"fence"`  // fence of the tenure that began or ended
	Holder string `json:"holder"` // holder of that tenure
}

// maxWaitJitter caps the random delay added to a wait for expiry, which
// keeps many waiters from retrying in the same instant.
const maxWaitJitter = 20 * time.Millisecond

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
	w := c.listen(ctx, "lease", name)
	defer w.close(ctx)
	for {
		l, err := c.tryAcquire(ctx, name, ttl)
		held, ok := errors.AsType[*HeldError](err)
		if !ok {
			return l, err
		}
		if err := w.wait(ctx, held.ExpiresIn); err != nil {
			return nil, err
		}
	}
}

// waiter waits for a release of one lease or slot scope, or for a timeout.
type waiter struct {
	kind, name string
	conn       *pgxpool.Conn // nil: no notifications, timeouts only
}

// listen subscribes to NotifyChannel on a pool connection of its own. When
// there is no pool, or LISTEN fails, the waiter only sleeps: waking on expiry
// stays correct, it is just slower after a release.
func (c *Client) listen(ctx context.Context, kind, name string) *waiter {
	w := &waiter{kind: kind, name: name}
	if c.pool == nil {
		return w
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return w
	}
	if err := db.New(conn).NotifyListen(ctx); err != nil {
		conn.Release()
		return w
	}
	w.conn = conn
	return w
}

// wait returns after d (plus jitter), or earlier when a release of the
// waited-for lease or scope is notified. It returns ctx.Err() when ctx ends.
func (w *waiter) wait(ctx context.Context, d time.Duration) error {
	d += rand.N(maxWaitJitter)
	if w.conn == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		n, err := w.conn.Conn().WaitForNotification(wctx)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			if wctx.Err() != nil {
				return nil // waited d: time to try again
			}
			// The listening connection broke: fall back to sleeping.
			w.conn.Release()
			w.conn = nil
			return w.wait(ctx, time.Until(deadlineOf(wctx)))
		}
		var p Notification
		if json.Unmarshal([]byte(n.Payload), &p) == nil &&
			p.Kind == w.kind && p.Name == w.name && p.Event == "released" {
			return nil
		}
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// unlistenTimeout bounds the UNLISTEN that hands a listening connection
// back to the pool.
const unlistenTimeout = 2 * time.Second

// close stops listening and returns the connection to the pool, or closes it
// when it cannot be cleaned.
func (w *waiter) close(ctx context.Context) {
	if w.conn == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlistenTimeout)
	defer cancel()
	if err := db.New(w.conn).NotifyUnlisten(uctx); err != nil {
		// Do not hand a connection that may still be listening back to
		// the pool.
		_ = w.conn.Conn().Close(uctx)
	}
	w.conn.Release()
	w.conn = nil
}
