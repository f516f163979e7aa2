package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

var releaseCommand = &command{
	name:    "release",
	summary: "Force-release a lease whose holder is gone (operator override)",
	usage: `
Usage: pglease release --force NAME --yes [--database URL]

Ends the current tenure of lease NAME, whoever holds it, so that the next
holder need not wait for its TTL to run out (pglease.force_release). The
lease keeps its fence: the next holder gets a larger one, so writes the old
holder fences with it are refused; work it does without fencing is NOT
stopped. Use it when the holder is known to be gone.

Without --yes it changes nothing: it says who holds the lease and what it
would do, and exits with status 2. It needs the privileges of the owner of
schema pglease (pglease_client is not granted force_release).`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db         dbFlag
			force, yes bool
		)
		db.register(fs)
		fs.BoolVar(&force, "force", false, "end the tenure whoever holds it (required: there is no other release from the command line)")
		fs.BoolVar(&yes, "yes", false, "confirm: without it, only say what would be done")
		return func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usagef("release", "want one lease NAME")
			}
			if !force {
				return usagef("release", "only a forced release is possible from the command line (the holder releases its own lease): add --force")
			}
			return a.release(ctx, &db, args[0], yes)
		}
	},
}

func (a *app) release(ctx context.Context, db *dbFlag, name string, yes bool) error {
	pool, err := a.open(ctx, db, "release")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()

	if !yes {
		var (
			holder    *string
			fence     int64
			state     string
			expiresIn time.Duration
		)
		err := pool.QueryRow(ctx, `SELECT holder, fence, state, expires_in FROM pglease.lease_status WHERE name = $1`, name).
			Scan(&holder, &fence, &state, &expiresIn)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return &exitError{code: exitUsage, msg: fmt.Sprintf("release: lease %q does not exist; nothing would be done", name)}
		case err != nil:
			return a.queryError(ctx, "read lease "+fmt.Sprintf("%q", name), err)
		case holder == nil:
			return &exitError{code: exitUsage, msg: fmt.Sprintf("release: lease %q is already free (fence %d); nothing would be done", name, fence)}
		}
		return &exitError{code: exitUsage, msg: fmt.Sprintf(
			"release: refusing without --yes: would end the tenure of lease %q held by %q (fence %d, %s, %s left); "+
				"the next holder gets fence %d, the old holder's fenced writes are refused but its other work is not stopped",
			name, *holder, fence, state, expiresIn.Round(time.Millisecond), fence+1)}
	}

	r, err := pgleaseadmin.ForceRelease(ctx, pool, name)
	if errors.Is(err, pglease.ErrInvalidArgument) {
		return usagef("release", "%s", detail(err))
	}
	if err != nil {
		return a.queryError(ctx, fmt.Sprintf("force release lease %q", name), err)
	}
	if !r.Released {
		fmt.Fprintf(a.stdout, "lease %q was not held (free or unknown): nothing to do\n", name)
		return nil
	}
	fmt.Fprintf(a.stdout, "released lease %q: ended the tenure of %q (fence %d); the next holder gets fence %d\n",
		name, r.Holder, r.Fence, r.Fence+1)
	return nil
}
