package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/purge"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// purgeTimeout bounds one purge.
const purgeTimeout = 10 * time.Minute

var purgeCommand = &command{
	name:    "purge",
	summary: "Delete leases and slot scopes that have been free for a while",
	usage: `
Usage: pglease purge [--free-for DURATION] [--database URL]

Deletes the leases that have been free (released or expired) for at least
--free-for, the slot scopes whose slots all have, and stale waiter
registrations (pglease.purge), and prints how many rows it deleted. A name
used again after its purge gets a fence larger than any it had: fences
never go backwards. Live tenures are never touched, and their renewals
never wait for a purge.

You rarely need it by hand: supervisors, runslots.Run and pglease run purge
in the background, once per hour across the whole fleet, what has been free
for a day. SQL-only users can schedule pglease.purge with pg_cron, as the
schema owner: docs/upgrading.md#bounded-tables-purge has the cron.schedule
call.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var db dbFlag
		db.register(fs)
		freeFor := fs.Duration("free-for", purge.DefaultFreeFor, "delete what has been free at least this long (0: everything free)")
		return func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("purge", "takes no arguments, got %q", args)
			}
			if *freeFor < 0 {
				return usagef("purge", "--free-for must not be negative, got %s", *freeFor)
			}
			return a.purge(ctx, &db, *freeFor)
		}
	},
}

func (a *app) purge(ctx context.Context, db *dbFlag, freeFor time.Duration) error {
	t, err := a.parseTarget(db, "purge")
	if err != nil {
		return err
	}
	pool, err := a.connect(ctx, t)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := a.requireSchema(ctx, pool, t); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, purgeTimeout)
	defer cancel()
	n, err := pgleaseadmin.Purge(ctx, pool, freeFor)
	if errors.Is(err, pglease.ErrInvalidArgument) {
		return usagef("purge", "%s", detail(err))
	}
	if err != nil {
		return a.queryError(ctx, "purge", err)
	}
	fmt.Fprintf(a.stdout, "purged %d rows free for at least %s from %s\n", n, freeFor, t)
	return nil
}
