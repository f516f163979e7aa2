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
	summary: "Ask a lease's holder to hand over, or force-release a lease whose holder is gone",
	usage: `
Usage: pglease release --request NAME [--to HOLDER [--reserve DURATION]] [--database URL]
       pglease release --force NAME --yes [--database URL]

With --request it asks the holder of lease NAME to hand over
(pglease.request_release): the holder learns it at its next renewal, or at
once when it observes the lease (a supervisor does), stops its workload,
releases, and stands by. Nothing is cut off: a holder that never releases
keeps the lease. With --to, the next grant is reserved for HOLDER (a
holder waiting for the lease, as every supervisor standby is) for
--reserve (default 10s, at most 1h) after the tenure ends; then anyone may
acquire. A second request of the same tenure changes nothing. It needs
role pglease_operator (docs/leadership.md); exit status 1 when nobody
holds the lease or HOLDER is not waiting for it.

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
			db                  dbFlag
			force, yes, request bool
			to                  string
			reserve             time.Duration
		)
		db.register(fs)
		fs.BoolVar(&force, "force", false, "end the tenure whoever holds it")
		fs.BoolVar(&request, "request", false, "ask the holder to hand over (pglease_operator)")
		fs.StringVar(&to, "to", "", "with --request: the preferred next holder")
		fs.DurationVar(&reserve, "reserve", 0, "with --to: how long the next grant is reserved for it (default 10s)")
		fs.BoolVar(&yes, "yes", false, "confirm: without it, only say what would be done")
		return func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usagef("release", "want one lease NAME")
			}
			switch {
			case force && request:
				return usagef("release", "--force and --request exclude each other")
			case request:
				if reserve < 0 || reserve > pgleaseadmin.MaxReserve || (reserve != 0 && to == "") {
					return usagef("release", "--reserve must be from 0 to %s, and only with --to", pgleaseadmin.MaxReserve)
				}
				if yes {
					return usagef("release", "--yes is for --force: a request cuts nothing off")
				}
				return a.requestRelease(ctx, &db, args[0], pgleaseadmin.ReleaseRequest{To: to, Reserve: reserve})
			case to != "" || reserve != 0:
				return usagef("release", "--to and --reserve are for --request")
			case !force:
				return usagef("release", "the holder releases its own lease: add --request to ask it to, or --force to end its tenure")
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

	ended, released, err := pgleaseadmin.ForceRelease(ctx, pool, name)
	if errors.Is(err, pglease.ErrInvalidArgument) {
		return usagef("release", "%s", detail(err))
	}
	if err != nil {
		return a.queryError(ctx, fmt.Sprintf("force release lease %q", name), err)
	}
	if !released {
		fmt.Fprintf(a.stdout, "lease %q was not held (free or unknown): nothing to do\n", name)
		return nil
	}
	fmt.Fprintf(a.stdout, "released lease %q: ended the tenure of %q (fence %d); the next holder gets fence %d\n",
		name, ended.Holder, ended.Fence, ended.Fence+1)
	return nil
}

// requestRelease asks the holder of lease name to hand over.
func (a *app) requestRelease(ctx context.Context, db *dbFlag, name string, req pgleaseadmin.ReleaseRequest) error {
	pool, err := a.open(ctx, db, "release")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	asked, requested, err := pgleaseadmin.RequestRelease(ctx, pool, name, req)
	switch {
	case errors.Is(err, pglease.ErrInvalidArgument):
		return usagef("release", "%s", detail(err))
	case errors.Is(err, pgleaseadmin.ErrNotHeld), errors.Is(err, pgleaseadmin.ErrNotCandidate):
		return failf("release: %s", detail(err))
	case errors.Is(err, pglease.ErrPermissionDenied) && ctx.Err() == nil:
		// Its words name pglease_operator, not queryError's pglease_client.
		return failf("request the release of lease %q: %s", name, detail(err))
	case err != nil:
		return a.queryError(ctx, fmt.Sprintf("request the release of lease %q", name), err)
	case !requested:
		fmt.Fprintf(a.stdout, "lease %q: a release of the tenure of %q (fence %d) was already requested; the first request stands\n",
			name, asked.Holder, asked.Fence)
	case req.To != "":
		fmt.Fprintf(a.stdout, "lease %q: asked %q (fence %d) to hand over to %q\n", name, asked.Holder, asked.Fence, req.To)
	default:
		fmt.Fprintf(a.stdout, "lease %q: asked %q (fence %d) to hand over\n", name, asked.Holder, asked.Fence)
	}
	return nil
}
