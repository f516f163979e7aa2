package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/pglease"
)

// Bounds of pglease run's cron flags, as the SQL functions check them.
const (
	// maxWindow is the longest --once-per window (pglease.run_begin).
	maxWindow = 366 * 24 * time.Hour
)

// cronOptions are pglease run's cron flags (docs/cron.md).
type cronOptions struct {
	holdAtLeast time.Duration // --hold-at-least: 0 when not set
	oncePer     time.Duration // --once-per: 0 when not set
	skipStatus  int           // --skip-status
}

// skips reports whether a host that does not run the command (held
// elsewhere, or the window is done) exits with --skip-status.
func (c cronOptions) skips() bool { return c.holdAtLeast > 0 || c.oncePer > 0 }

// registerCronFlags adds the cron flags of pglease run to fs.
func registerCronFlags(fs *flag.FlagSet, o *runOptions) {
	fs.DurationVar(&o.cron.holdAtLeast, "hold-at-least", 0,
		"keep the lease held until at least `D` after its grant (server clock), even when COMMAND exits sooner: one run per cron tick")
	fs.DurationVar(&o.cron.oncePer, "once-per", 0,
		"run COMMAND at most once per `WINDOW` across all hosts, counting only runs that succeeded (the run ledger)")
	fs.IntVar(&o.cron.skipStatus, "skip-status", 0,
		"exit `STATUS` when not running COMMAND because the lease is held, the window is done or the tokens are refused (with --once-per, --hold-at-least or --rate)")
}

// checkCronFlags refuses the cron flags' bad values and combinations; set
// holds the flags given.
func checkCronFlags(o *runOptions, set map[string]bool) error {
	c := o.cron
	switch {
	case set["hold-at-least"] && (c.holdAtLeast <= 0 || c.holdAtLeast > pglease.MaxTTL):
		return usagef("run", "--hold-at-least must be more than 0 and at most %s (the lease's cap), got %s", pglease.MaxTTL, c.holdAtLeast)
	case set["once-per"] && (c.oncePer <= 0 || c.oncePer > maxWindow):
		return usagef("run", "--once-per must be more than 0 and at most %s, got %s", maxWindow, c.oncePer)
	case set["skip-status"] && (c.skipStatus < 0 || c.skipStatus > 255):
		return usagef("run", "--skip-status must be from 0 to 255, got %d", c.skipStatus)
	case set["skip-status"] && !c.skips() && o.rate.key == "":
		return usagef("run", "--skip-status has no meaning without --once-per, --hold-at-least or --rate")
	case c.skips() && o.lease == "":
		return usagef("run", "--once-per and --hold-at-least need a --lease: the job's name")
	case c.holdAtLeast > 0 && o.wait:
		return usagef("run", "--hold-at-least with --wait would run the job again as soon as the hold ends: use one or the other")
	case c.holdAtLeast > 0 && c.oncePer > 0 && c.holdAtLeast >= c.oncePer:
		return usagef("run", "--hold-at-least (%s) must be shorter than the --once-per window (%s), or it would hold the lease into the next window's tick",
			c.holdAtLeast, c.oncePer)
	}
	return nil
}

// skip returns the exit of a host that does not run the command: status
// --skip-status, silent unless -v (being skipped is the expected outcome of
// all hosts but one).
func (r *runner) skip(why string) error {
	r.log.Info("skipped: " + why)
	return &exitError{code: r.o.cron.skipStatus}
}

// oncePer returns the step's around of --once-per for lease name: begin a
// run in the ledger (or skip a window already done), run next, and record
// its end with its exit status, fenced by the tenure. nil without
// --once-per.
func (r *runner) oncePer(name string) func(ctx context.Context, t held, next func() error) error {
	window := r.o.cron.oncePer
	if window <= 0 {
		return nil
	}
	return func(ctx context.Context, t held, next func() error) error {
		q := db.New(r.pool)
		b, err := q.RunBegin(ctx, db.RunBeginParams{Name: name, Holder: r.o.holder, Fence: t.Fence(), RunWindow: window})
		if err != nil {
			return r.a.queryError(ctx, fmt.Sprintf("begin a run of %s", quoteName(name)), err)
		}
		if !b.Run {
			return r.skip(fmt.Sprintf("the window of %s starting %s is done (fence %d, %q)",
				quoteName(name), b.WindowStart.UTC().Format(time.RFC3339), b.DoneFence.Int64, b.DoneHolder.String))
		}
		err = next()
		if _, stopped := errors.AsType[*commandStopped](err); stopped || ctx.Err() != nil {
			return err // lost: the ledger marks the run lost when the next one begins
		}
		status := exitStatus(err)
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.ttl)
		defer cancel()
		e, rerr := q.RunEnd(ectx, db.RunEndParams{Name: name, Holder: r.o.holder, Fence: t.Fence(), ExitStatus: int32(status)})
		switch {
		case rerr != nil:
			fmt.Fprintf(r.a.stderr, "pglease: recording the end of the run of %s failed (the window stays open): %v\n",
				quoteName(name), r.a.scrub(oneLine(detail(rerr))))
		case !e.Recorded:
			fmt.Fprintf(r.a.stderr, "pglease: the run of %s ended after its tenure (fence %d): recorded as %s, the window stays open\n",
				quoteName(name), t.Fence(), e.Outcome.String)
		default:
			r.log.Info("run recorded", "outcome", e.Outcome.String, "window", b.WindowStart.UTC().Format(time.RFC3339))
		}
		return err
	}
}

// exitStatus is the exit status err gives pglease run, 0 to 255.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := errors.AsType[*exitError](err); ok {
		return min(max(e.code, 0), 255)
	}
	return exitFailure
}
