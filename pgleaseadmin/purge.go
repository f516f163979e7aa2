package pgleaseadmin

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// Purge deletes from database the leases that have been free (released or
// expired) for at least freeFor, the slot scopes whose slots all have, and
// stale waiter registrations, and returns how many rows it deleted
// (pglease.purge). A name or scope used again after its purge gets a fence
// larger than any it had: fences never go backwards across purge. Purge
// takes no lock a live holder's renewal waits for.
//
// A supervisor already purges in the background (supervisor.Config.PurgeEvery),
// once per hour across the whole fleet, what has been free for a day; a
// service that holds leases or slots without one calls Purge on a schedule
// of its own (or runs `pglease purge`, or pg_cron's purge_due). freeFor
// must not be negative (pglease.ErrInvalidArgument).
func Purge(ctx context.Context, database pglease.DB, freeFor time.Duration) (int64, error) {
	if freeFor < 0 {
		return 0, tenure.Invalidf("freeFor must not be negative, got %s", freeFor)
	}
	n, err := db.New(database).Purge(ctx, freeFor)
	if err != nil {
		return 0, interpret(ctx, err)
	}
	return n, nil
}
