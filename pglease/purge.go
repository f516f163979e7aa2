package pglease

import (
	"context"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/db"
)

// Purge deletes from the database the leases that have been free
// (released or expired) for at least freeFor, the slot scopes whose slots
// all have, and stale waiter registrations, and returns how many rows it
// deleted (pglease.purge). A name or scope used again after its purge gets
// a fence larger than any it had: fences never go backwards across purge.
// Purge takes no lock a live holder's renewal waits for.
//
// The supervisor, runslots' Run and `pglease run` already purge in the
// background, once per hour across the whole fleet; call Purge for a
// schedule of your own. freeFor must not be negative (ErrInvalidArgument).
func Purge(ctx context.Context, database DB, freeFor time.Duration) (int64, error) {
	if freeFor < 0 {
		return 0, fmt.Errorf("%w: freeFor must not be negative, got %s", ErrInvalidArgument, freeFor)
	}
	n, err := db.New(database).Purge(ctx, freeFor)
	if err != nil {
		return 0, interpretError(ctx, err)
	}
	return n, nil
}
