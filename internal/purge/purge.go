// Package purge runs pglease.purge_due in the background for the
// long-running parts of pglease (the supervisor, runslots.Run, pglease run),
// so that the tables stay bounded without anyone having to remember a cron
// job. The server lets one purge per interval through across every caller
// of the database (pglease.purge_due), so a fleet of a thousand processes
// still purges once an interval.
package purge

import (
	"context"
	"log/slog"
	"time"

	"github.com/pglease/pglease/internal/db"
)

// Defaults of the background purge.
const (
	// DefaultEvery is how often a database is purged, across its fleet.
	DefaultEvery = time.Hour
	// DefaultFreeFor is how long a lease or slot scope must have been free
	// to be purged.
	DefaultFreeFor = 24 * time.Hour
	// callTimeout bounds one purge_due call.
	callTimeout = time.Minute
)

// Loop calls pglease.purge_due(every, freeFor) on q now and then every
// `every` until ctx ends. It never fails: an error (an old schema without
// purge_due, a role without the grant, a lost connection) is logged once at
// warn, then at debug, and retried at the next interval. A purge takes no
// lock a live holder's renewal waits for.
func Loop(ctx context.Context, q db.DBTX, every, freeFor time.Duration, log *slog.Logger) {
	queries := db.New(q)
	warned := false
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, callTimeout)
		removed, err := queries.PurgeDue(callCtx, db.PurgeDueParams{Every: every, FreeFor: freeFor})
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !warned:
			warned = true
			log.Warn("pglease: background purge failed; it is retried every interval (run `pglease purge` by hand, or schedule it: docs/upgrading.md#bounded-tables-purge)",
				"every", every, "error", err)
		case err != nil:
			log.Debug("pglease: background purge failed", "error", err)
		case removed >= 0:
			log.Debug("pglease: purged rows free for longer than free_for", "removed", removed, "free_for", freeFor)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
