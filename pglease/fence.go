package pglease

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/db"
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
// WithFence.
func (l *Lease) WithFence(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return WithFence(ctx, l.c.db, l.name, l.fence, fn)
}

// WithFence runs fn in a transaction that first checks, with
// pglease.assert_held, that fence is the current fence of a live tenure of
// lease name, and then commits fn's writes. The check locks the lease row
// until the commit, so no later tenure can begin between the check and the
// commit: the writes are ordered before any takeover. It returns an error
// matching ErrLeaseLost, without calling fn, when the tenure is over; fn's
// own error is returned unchanged after rolling back. Use it from processes
// that only know the fence (a child given PGLEASE_FENCE, say).
func WithFence(ctx context.Context, database Beginner, name string, fence int64, fn func(tx pgx.Tx) error) (err error) {
	if err := checkText("name", name); err != nil {
		return err
	}
	if fence < 0 {
		return invalidf("fence must be 0 or more, got %d", fence)
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
	if err := db.New(tx).LeaseAssertHeld(ctx, db.LeaseAssertHeldParams{Name: name, Fence: fence}); err != nil {
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
