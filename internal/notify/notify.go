// Package notify waits for pglease's release notifications (NOTIFY on
// channel "pglease") with a timeout, so that blocked acquires and claims wake
// at a release and otherwise at the holder's expiry.
package notify

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/db"
)

// Channel is the channel the SQL functions NOTIFY on.
const Channel = "pglease"

// Payload is the JSON payload of a NOTIFY on Channel.
type Payload struct {
	Kind   string `json:"kind"`   // "lease" or "slot"
	Event  string `json:"event"`  // "acquired" or "released"
	Name   string `json:"name"`   // lease name or slot scope
	Slot   *int32 `json:"slot"`   // slot number; nil for leases
	Fence  int64  `json:"fence"`  // fence of the tenure that began or ended
	Holder string `json:"holder"` // holder of that tenure
}

// maxJitter caps the random delay added to each wait, which keeps many
// waiters from retrying in the same instant.
const maxJitter = 20 * time.Millisecond

// unlistenTimeout bounds the UNLISTEN that hands a listening connection
// back to the pool.
const unlistenTimeout = 2 * time.Second

// Waiter waits for a release of one lease or slot scope, or for a timeout.
type Waiter struct {
	kind, name string
	conn       *pgxpool.Conn // nil: no notifications, timeouts only
}

// Listen subscribes to Channel on a pool connection of its own, for releases
// of kind ("lease" or "slot") name. With a nil pool, or when LISTEN fails,
// the waiter only sleeps: waking at expiry stays correct, only slower after
// a release. Call it before checking whether the lease is free, so that a
// release in between is not missed, and Close the waiter when done.
func Listen(ctx context.Context, pool *pgxpool.Pool, kind, name string) *Waiter {
	w := &Waiter{kind: kind, name: name}
	if pool == nil {
		return w
	}
	conn, err := pool.Acquire(ctx)
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

// Wait returns after d plus a little jitter, or earlier when a release of
// the waited-for lease or scope is notified. It returns ctx.Err() unchanged
// when ctx ends first.
func (w *Waiter) Wait(ctx context.Context, d time.Duration) error {
	return w.wait(ctx, time.Now().Add(max(d, 0)+rand.N(maxJitter)))
}

func (w *Waiter) wait(ctx context.Context, until time.Time) error {
	if w.conn == nil {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	for {
		n, err := w.conn.Conn().WaitForNotification(wctx)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			if wctx.Err() != nil {
				return nil // the time is up: try again
			}
			// The listening connection broke: fall back to sleeping.
			w.conn.Release()
			w.conn = nil
			return w.wait(ctx, until)
		}
		var p Payload
		if json.Unmarshal([]byte(n.Payload), &p) == nil &&
			p.Kind == w.kind && p.Name == w.name && p.Event == "released" {
			return nil
		}
	}
}

// Close stops listening and returns the connection to the pool, or closes
// it when it cannot be cleaned.
func (w *Waiter) Close(ctx context.Context) {
	if w.conn == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlistenTimeout)
	defer cancel()
	if err := db.New(w.conn).NotifyUnlisten(uctx); err != nil {
		// Never hand a connection that may still be listening back to
		// the pool.
		_ = w.conn.Conn().Close(uctx)
	}
	w.conn.Release()
	w.conn = nil
}
