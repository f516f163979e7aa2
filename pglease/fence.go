package pglease

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
)

// rollbackTimeout bounds the rollback after a failed fenced write.
const rollbackTimeout = 5 * time.Second

// Beginner starts transactions: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx
// (which starts a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// WithFence runs fn in a transaction on the lease's client database that
// commits only while this tenure is current. See the package function
// WithFence. In addition, the transaction may stay idle for at most the
// lease's TTL (idle_in_transaction_session_timeout): the lease row stays
// locked until the transaction ends, so a client that stalls inside it
// (paused, or cut off by the network) would otherwise block every takeover
// until its connection dies.
func (l *Lease) WithFence(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return withFence(ctx, l.db, l.t.Name(), l.t.Fence(), l.t.TTL(), fn)
}

// WithFence runs fn in a transaction that first checks, with
// pglease.assert_held, that fence is the current fence of a live tenure of
// lease name, and then commits fn's writes. The check locks the lease row
// until the commit, so no later tenure can begin between the check and the
// commit: the writes are ordered before any takeover. It returns an error
// matching ErrLeaseLost, without calling fn, when the tenure is over; fn's
// own error is returned unchanged after rolling back. Use it from processes
// that only know the fence (a child given PGLEASE_FENCE, say).
//
// Keep the transaction short: while it is open, the lease row is locked, so
// the holder's own renewals and any takeover wait for it.
func WithFence(ctx context.Context, database Beginner, name string, fence int64, fn func(tx pgx.Tx) error) error {
	return withFence(ctx, database, name, fence, 0, fn)
}

// withFence is WithFence, with the transaction's idle timeout set to
// idleTimeout when it is positive.
func withFence(ctx context.Context, database Beginner, name string, fence int64, idleTimeout time.Duration, fn func(tx pgx.Tx) error) (err error) {
	if err := tenure.CheckText("name", name); err != nil {
		return err
	}
	if fence < 0 {
		return tenure.Invalidf("fence must be 0 or more, got %d", fence)
	}
	tx, err := database.Begin(ctx)
	if err != nil {
		return interpretError(ctx, err)
	}
	defer func() {
		if err != nil {
			// A failed rollback leaves nothing to undo: the connection is
			// gone or the transaction already ended.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	q := db.New(tx)
	if idleTimeout > 0 {
		// One round trip: the check and the transaction's idle timeout.
		err = q.LeaseAssertHeldIdleTimeout(ctx, db.LeaseAssertHeldIdleTimeoutParams{
			Name: name, Fence: fence, Timeout: strconv.FormatInt(max(idleTimeout.Milliseconds(), 1), 10),
		})
	} else {
		err = q.LeaseAssertHeld(ctx, db.LeaseAssertHeldParams{Name: name, Fence: fence})
	}
	if err != nil {
		return interpretError(ctx, err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return interpretError(ctx, err)
	}
	return nil
}
