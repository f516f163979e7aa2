package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

// Defaults of pglease run.
const (
	defaultRunTTL = 30 * time.Second
	// maxDefaultGrace caps the default --grace, a quarter of the TTL.
	maxDefaultGrace = 10 * time.Second
	// minRunTTL keeps renewals (every TTL/3) from spinning.
	minRunTTL = 100 * time.Millisecond
)

var runCommand = &command{
	name:    "run",
	summary: "Run a command only while holding a lease and/or a slot (a distributed flock), or within a rate limit",
	usage: `
Usage: pglease run [--lease NAME] [--slot SCOPE:CAPACITY [--units K]] [--ttl 30s]
                   [--wait | --no-wait] [--grace DURATION] [--verbose] [--database URL]
                   [--hold-at-least D] [--once-per WINDOW] [--skip-status N]
                   [--rate KEY [--cost N]] -- COMMAND [ARGS...]

Takes lease NAME (and/or K units, default 1, of the CAPACITY units of
slot scope SCOPE, as one slot; with both, the lease first, then the slot), runs COMMAND while renewing it every TTL/3, and
releases it once COMMAND has exited. COMMAND gets in its environment:

  PGLEASE_HOLDER      the holder identity (host/pid/random)
  PGLEASE_LEASE       the lease name                    (with --lease)
  PGLEASE_FENCE       the lease's fence for this tenure (with --lease)
  PGLEASE_SLOT_SCOPE  the slot scope                    (with --slot)
  PGLEASE_SLOT        the slot number, 1 to CAPACITY    (with --slot)
  PGLEASE_SLOT_FENCE  the slot's fence for this tenure  (with --slot)
  PGLEASE_SLOT_UNITS  the units the slot holds, K       (with --slot)

so that it can fence its own writes (pglease.assert_held(NAME, FENCE) in
the transaction that writes). The rest of pglease's environment passes
through unchanged, PGLEASE_DATABASE_URL, DATABASE_URL and PGPASSWORD
included, so that COMMAND can reach the same database. "--" ends pglease's
flags; it may be left out when COMMAND does not begin with "-".

By default (--no-wait, for cron) it exits at once with status 75 when the
lease is held elsewhere or the scope is full, saying who holds it and for
how long. With --wait it says once on stderr whom it waits for, and waits.

For cron (docs/cron.md), one run per tick across the hosts:
--hold-at-least D keeps the lease held until D after its grant (server
clock), even when COMMAND exits sooner, so hosts whose cron fires within D
skip; choose D longer than the spread of the hosts' start times and
shorter than the interval minus it. --once-per WINDOW runs COMMAND at most
once per WINDOW across the hosts, counting only runs that succeeded (exit
0), recorded in the run ledger ('pglease history NAME'); a run belongs to
the window boundary nearest its start on the server's clock, so hosts
early or late by less than WINDOW/2 count for their tick, and a failed run
leaves the window open (--wait retries it on the other hosts). With either,
a host that does not run COMMAND (the lease is held, or the window is
done) exits 0 silently, or --skip-status N.

With --rate KEY, COMMAND runs only when N tokens (--cost, default 1) of
the rate limit of KEY are granted (pglease.take, docs/limits.md), taken
after the lease and slot and the --once-per window check, just before
COMMAND starts; a token is spent whether COMMAND succeeds or not. When
they are refused, pglease exits 0 silently (or --skip-status N), as a
host skipped by --once-per does; with --wait it says once on stderr how
long, waits until they are there and takes them. --rate works alone too
(no lease or slot: nothing bounds how long COMMAND runs).

SIGINT, SIGTERM and SIGHUP are forwarded to COMMAND's process group; the
lease is released after COMMAND exits, and pglease exits with COMMAND's
status (128+n when it died of signal n). Whatever COMMAND left running
(background jobs, daemons) gets SIGTERM, then SIGKILL after --grace, before
the release.

Nothing COMMAND started outlives the tenure. The local deadline is the
last successful renewal's send time plus TTL minus a tenth: SIGKILL lands
by then, before the server's expiry. The rule for --grace:

  when no renewal has succeeded by then, SIGTERM comes --grace before the
  local deadline and SIGKILL at it; so --grace must be at most half the
  TTL (the other half is for renewals, every TTL/3, retried). It defaults
  to a quarter of the TTL, at most 10s.

When a renewal is refused, SIGTERM comes at once and SIGKILL --grace later
(by the local deadline at the latest). Either way pglease exits 69.

On Linux, COMMAND runs under a reaper: a small process (pglease itself)
that stays with it when pglease dies (SIGKILL, OOM, a panic), is the
subreaper of everything COMMAND starts (setsid'd and double-forked
processes included), puts it in a cgroup of its own where cgroup v2 is
writable, and enforces the deadline itself, even while pglease is stopped
or hung. See 'go doc github.com/pglease/pglease/cmd/pglease' for what it
cannot catch, and for other systems, where only COMMAND's process group is
stopped, by pglease, and nothing stops it if pglease dies. COMMAND runs in
a process group of its own, so it cannot read from the terminal.

Exit status: COMMAND's own; 1 when pglease failed (database error, or the
reaper died: everything was killed); 2 usage error; 69 lease or slot lost,
or no renewal in time: COMMAND and all it started stopped; 75 held
elsewhere or full (--no-wait), command not run (with --once-per or
--hold-at-least: 0, or --skip-status); 0 (or --skip-status) when --rate's
tokens are refused (--no-wait); 126 command not
executable; 127 command not found; 128+n killed by signal n (also when
pglease got signal n while waiting, before COMMAND started).`,
	signals: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			o      runOptions
			db     dbFlag
			slot   string
			units  int
			noWait bool
		)
		db.register(fs)
		fs.StringVar(&o.lease, "lease", "", "lease `NAME` to hold while COMMAND runs")
		fs.StringVar(&slot, "slot", "", "hold one slot of SCOPE, which admits at most CAPACITY holders at once, while COMMAND runs (`SCOPE:CAPACITY`)")
		fs.IntVar(&units, "units", 1, "with --slot: hold `K` of the scope's CAPACITY units (a job needing 4 of 8 GPUs: --slot gpu:8 --units 4); 1 to CAPACITY")
		fs.DurationVar(&o.ttl, "ttl", defaultRunTTL, "time to live of the lease and slot on the server; renewed every TTL/3")
		fs.BoolVar(&o.wait, "wait", false, "wait until the lease (and slot) can be taken")
		fs.BoolVar(&noWait, "no-wait", false, "exit with status 75 at once when held elsewhere (the default)")
		fs.DurationVar(&o.grace, "grace", 0, "time between SIGTERM and SIGKILL when stopping the command; at most TTL/2 (default TTL/4, at most 10s)")
		fs.StringVar(&o.holder, "holder", "", "holder `ID` to take the lease as (default host/pid/random, unique)")
		fs.BoolVar(&o.verbose, "verbose", false, "log acquisitions, renewal problems and releases to standard error")
		fs.BoolVar(&o.verbose, "v", false, "short for --verbose")
		registerCronFlags(fs, &o)
		registerRateFlags(fs, &o)
		return func(ctx context.Context, args []string) error {
			if o.wait && noWait {
				return usagef("run", "--wait and --no-wait contradict each other")
			}
			if slot != "" {
				i := strings.LastIndexByte(slot, ':')
				capacity, err := strconv.Atoi(slot[i+1:])
				if i <= 0 || err != nil || capacity < 1 {
					return usagef("run", "--slot %s: want SCOPE:CAPACITY with CAPACITY a whole number of at least 1", quoteName(slot))
				}
				o.scope, o.capacity = slot[:i], capacity
			}
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if set["units"] && slot == "" {
				return usagef("run", "--units needs --slot SCOPE:CAPACITY")
			}
			if units < 1 || (slot != "" && units > o.capacity) {
				return usagef("run", "--units must be from 1 to the --slot CAPACITY (%d), got %d", o.capacity, units)
			}
			o.units = units
			switch {
			case set["lease"] && o.lease == "":
				return usagef("run", "--lease is empty: give the name of the lease to hold")
			case set["slot"] && slot == "":
				return usagef("run", "--slot is empty: give SCOPE:CAPACITY")
			}
			if err := checkRateFlags(&o, set); err != nil {
				return err
			}
			if o.lease == "" && o.scope == "" && o.rate.key == "" {
				return usagef("run", "name a --lease, a --slot, a --rate KEY, or several")
			}
			if len(args) == 0 {
				return usagef("run", "no COMMAND to run: pglease run --lease NAME -- COMMAND [ARGS...]")
			}
			if o.ttl < minRunTTL || o.ttl > pglease.MaxTTL {
				return usagef("run", "--ttl must be from %s to %s, got %s", minRunTTL, pglease.MaxTTL, o.ttl)
			}
			if !set["grace"] {
				// The default follows the TTL, so that any valid --ttl works
				// without a --grace of its own.
				o.grace = min(o.ttl/4, maxDefaultGrace)
			}
			if o.grace < 0 || o.grace > o.ttl/2 {
				return usagef("run", "--grace must be from 0 to half the --ttl (%s), got %s: SIGTERM comes --grace before the local deadline, "+
					"and renewals need the rest of the TTL; raise --ttl or lower --grace", o.ttl/2, o.grace)
			}
			if err := checkCronFlags(&o, set); err != nil {
				return err
			}
			o.argv = args
			return a.run(ctx, &db, o)
		}
	},
}

// runOptions are the flags of pglease run.
type runOptions struct {
	lease    string
	scope    string
	capacity int
	units    int // of capacity, with scope
	ttl      time.Duration
	grace    time.Duration
	wait     bool
	holder   string
	verbose  bool
	argv     []string
	cron     cronOptions
	rate     rateOptions
}

// held is a lease or slot held around the command.
type held interface {
	tenure.Held
	Release(ctx context.Context) error
	Fence() int64
}

// step takes one lease or slot.
type step struct {
	// take takes it, waiting or not, or returns an *exitError with
	// exitHeld when it is held elsewhere (not waiting).
	take func(ctx context.Context) (held, error)
	// env is what the command learns about the tenure.
	env func(t held) []string
	// describe names the tenure for messages.
	describe func(t held) string
	// around, when set, runs next (the rest, down to the command) under
	// the tenure t: the run ledger of --once-per.
	around func(ctx context.Context, t held, next func() error) error
}

// runner runs one command under a lease and/or slot.
type runner struct {
	a    *app
	o    runOptions
	log  *slog.Logger
	pool *pgxpool.Pool

	// sigCtx ends when a signal arrives before the command has started:
	// waiting for the lease stops then.
	sigCtx    context.Context
	cancelSig context.CancelFunc

	// moved is signalled when a renewal moved a tenure's deadline.
	moved chan struct{}

	mu     sync.Mutex
	signal syscall.Signal // the signal that stopped the waiting, if any
	child  *child         // the command, once started
	levels []level        // the tenures held, outermost first
}

// level is a tenure held and the context of the work under it, which is
// cancelled when the tenure is lost.
type level struct {
	what string
	t    held
	ctx  context.Context
}

// deadline returns the earliest local deadline of the tenures held: the
// command must be dead by then.
func (r *runner) deadline() time.Time {
	what, d := r.nearest()
	if what == "" { // --rate alone: no tenure bounds the command
		return time.Now().Add(noDeadline)
	}
	return d
}

// noDeadline is the deadline of a command run under no tenure (--rate
// alone): a century, within the reaper's nanosecond clock.
const noDeadline = 100 * 365 * 24 * time.Hour

// nearest returns the tenure held whose local deadline comes first, and
// that deadline.
func (r *runner) nearest() (what string, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.levels {
		if d := l.t.Deadline(); what == "" || d.Before(deadline) {
			what, deadline = l.what, d
		}
	}
	return what, deadline
}

// renewed tells whoever stops the command that a renewal moved a
// tenure's deadline: it reads the new one with deadline.
func (r *runner) renewed(time.Time) {
	select {
	case r.moved <- struct{}{}:
	default: // a signal is pending already
	}
}

func (a *app) run(ctx context.Context, db *dbFlag, o runOptions) error {
	t, err := a.parseTarget(db, "run")
	if err != nil {
		return err
	}
	o.holder = cmp.Or(o.holder, pglease.NewHolderID())
	r := &runner{a: a, o: o, log: newLogger(a.stderr, o.verbose), moved: make(chan struct{}, 1)}
	r.sigCtx, r.cancelSig = context.WithCancel(ctx)
	defer r.cancelSig()
	stopSignals := r.handleSignals()
	defer stopSignals()

	pool, err := a.connect(r.sigCtx, t)
	if err != nil {
		return r.interrupted(err)
	}
	defer closePool(pool, closeTimeout)
	r.pool = pool
	if err := a.requireSchema(r.sigCtx, pool, t); err != nil {
		return r.interrupted(err)
	}
	steps, err := r.steps()
	if err != nil {
		return err
	}
	return r.interrupted(r.hold(ctx, steps, append(childEnv(os.Environ()), "PGLEASE_HOLDER="+o.holder)))
}

// closeTimeout bounds closing the pool when pglease run exits: after a
// partition, pgx sends each broken connection's cancel request into the
// void for up to 15 s. The process exit closes the sockets anyway.
const closeTimeout = time.Second

// closePool closes pool, waiting at most timeout.
func closePool(pool *pgxpool.Pool, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// interrupted turns err into the exit for a signal that stopped the waiting
// before the command started, if there was one.
func (r *runner) interrupted(err error) error {
	r.mu.Lock()
	sig := r.signal
	r.mu.Unlock()
	if sig != 0 && err != nil && (errors.Is(err, context.Canceled) || r.sigCtx.Err() != nil) {
		return &exitError{code: exitSignal + int(sig), msg: fmt.Sprintf("got %s before the command started: not running it", signalName(sig))}
	}
	return err
}

// steps returns what to take, in order: the lease, then the slot.
func (r *runner) steps() ([]step, error) {
	var steps []step
	if r.o.lease != "" {
		c, err := pglease.New(r.pool, pglease.Config{Holder: r.o.holder})
		if err != nil {
			return nil, usagef("run", "%s", detail(err))
		}
		name := r.o.lease
		steps = append(steps, step{
			take: func(ctx context.Context) (held, error) {
				l, err := c.TryAcquire(ctx, name, r.o.ttl, pglease.WithHoldAtLeast(r.o.cron.holdAtLeast))
				if refused, ok := errors.AsType[*pglease.HeldError](err); ok {
					if r.o.cron.skips() && !r.o.wait {
						return nil, r.skip(fmt.Sprintf("lease %s is held by %q (fence %d) for another %s",
							quoteName(name), refused.Holder, refused.Fence, refused.ExpiresIn.Round(time.Millisecond)))
					}
					if !r.o.wait {
						return nil, &exitError{code: exitHeld, msg: fmt.Sprintf(
							"lease %s is held by %q (fence %d) for another %s: not running the command (exit %d; --wait to wait)",
							quoteName(name), refused.Holder, refused.Fence, refused.ExpiresIn.Round(time.Millisecond), exitHeld)}
					}
					fmt.Fprintf(r.a.stderr, "pglease: waiting for the lease %s, held by %q (fence %d) for another %s (--wait)\n",
						quoteName(name), refused.Holder, refused.Fence, refused.ExpiresIn.Round(time.Millisecond))
					l, err = c.Acquire(ctx, name, r.o.ttl, pglease.WithHoldAtLeast(r.o.cron.holdAtLeast))
					c.CloseIdle() // the command needs no LISTEN connection
				}
				if err != nil {
					return nil, r.takeError(ctx, fmt.Sprintf("acquire lease %s", quoteName(name)), err)
				}
				return l, nil
			},
			env: func(t held) []string {
				return []string{"PGLEASE_LEASE=" + name, "PGLEASE_FENCE=" + strconv.FormatInt(t.Fence(), 10)}
			},
			describe: func(t held) string { return fmt.Sprintf("lease %s (fence %d)", quoteName(name), t.Fence()) },
			around:   r.oncePer(name),
		})
	}
	if r.o.scope != "" {
		c, err := runslots.New(r.pool, runslots.Config{Holder: r.o.holder, Logger: r.log})
		if err != nil {
			return nil, usagef("run", "%s", detail(err))
		}
		scope, capacity := r.o.scope, r.o.capacity
		steps = append(steps, step{
			take: func(ctx context.Context) (held, error) {
				s, err := c.TryClaim(ctx, runslots.Want{Scope: scope, Capacity: capacity, Units: r.o.units}, r.o.ttl)
				if full, ok := errors.AsType[*runslots.FullError](err); ok {
					if !r.o.wait {
						return nil, &exitError{code: exitHeld, msg: fmt.Sprintf(
							"scope %s is full: %s: not running the command (exit %d; --wait to wait)",
							quoteName(scope), r.scopeFull(ctx, full), exitHeld)}
					}
					fmt.Fprintf(r.a.stderr, "pglease: waiting for a slot of scope %s: %s (--wait)\n",
						quoteName(scope), r.scopeFull(ctx, full))
					s, err = c.Claim(ctx, runslots.Want{Scope: scope, Capacity: capacity, Units: r.o.units}, r.o.ttl)
					c.CloseIdle() // the command needs no LISTEN connection
				}
				if err != nil {
					return nil, r.takeError(ctx, fmt.Sprintf("claim a slot of scope %s", quoteName(scope)), err)
				}
				return s, nil
			},
			env: func(t held) []string {
				s := t.(*runslots.Slot)
				return []string{"PGLEASE_SLOT_SCOPE=" + scope, "PGLEASE_SLOT=" + strconv.Itoa(s.Number()),
					"PGLEASE_SLOT_FENCE=" + strconv.FormatInt(s.Fence(), 10),
					"PGLEASE_SLOT_UNITS=" + strconv.Itoa(s.Units())}
			},
			describe: func(t held) string {
				return fmt.Sprintf("slot %d of scope %s (fence %d)", t.(*runslots.Slot).Number(), quoteName(scope), t.Fence())
			},
		})
	}
	return steps, nil
}

// scopeFull says why a claim was refused with full: the units in use (the
// live holders, for claims of one unit) and the capacity, the one in force
// when it is below the one asked: a scope's capacity is the smallest its
// live holders claimed with, so a claim of capacity 8 is refused while two
// holders of capacity 2 live.
func (r *runner) scopeFull(ctx context.Context, full *runslots.FullError) string {
	inUse := fmt.Sprintf("%d holders", full.InUse)
	if r.o.units > 1 {
		inUse = fmt.Sprintf("%d units in use", full.InUse)
	}
	capacity := fmt.Sprintf("for capacity %d", full.Capacity)
	if full.InUse+r.o.units <= full.Capacity {
		// The capacity asked would have admitted the claim.
		if inForce := r.scopeCapacity(ctx, full.Scope); inForce > 0 && inForce < full.Capacity {
			capacity = fmt.Sprintf("with capacity %d in force (%d asked; a scope's capacity is the smallest its live holders claimed with)",
				inForce, full.Capacity)
		}
	}
	return fmt.Sprintf("%s %s, the earliest expires in %s", inUse, capacity, full.RetryIn.Round(time.Millisecond))
}

// scopeCapacity returns the capacity in force in scope as pglease.metrics
// reports it, or 0 when it cannot be read.
func (r *runner) scopeCapacity(ctx context.Context, scope string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := pgleaseadmin.ReadMetrics(ctx, r.pool, pgleaseadmin.Filter{Names: "^" + regexp.QuoteMeta(scope) + "$", MaxNames: 1})
	if err != nil {
		r.log.Debug("read the capacity in force", "scope", scope, "error", err)
		return 0
	}
	for _, s := range m.Scopes {
		if s.Scope == scope {
			return s.Capacity
		}
	}
	return 0
}

// takeError explains a failure to take a lease or slot.
func (r *runner) takeError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, pglease.ErrInvalidArgument) {
		return usagef("run", "%s: %s", what, detail(err))
	}
	return r.a.queryError(ctx, what, err)
}

// hold takes steps[0] and holds it while doing the rest under it, and at
// the bottom runs the command with env. The parent context ends only when
// an outer tenure is lost.
func (r *runner) hold(parent context.Context, steps []step, env []string) error {
	if len(steps) == 0 {
		if r.o.rate.key != "" {
			tctx, cancel := context.WithCancel(parent)
			stop := context.AfterFunc(r.sigCtx, cancel)
			err := r.takeRate(tctx)
			stop()
			cancel()
			if err != nil {
				return err
			}
		}
		return r.runChild(parent, env)
	}
	st := steps[0]
	// Taking stops when an outer tenure is lost or a signal arrives.
	tctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(r.sigCtx, cancel)
	t, err := st.take(tctx)
	stop()
	cancel()
	if err != nil {
		return err
	}
	desc := st.describe(t)
	log := r.log.With("tenure", desc, "holder", r.o.holder)
	log.Info("acquired")
	res := tenure.Hold(parent, t, tenure.HoldConfig{
		TTL:         r.o.ttl,
		StopTimeout: r.o.grace + r.o.ttl,
		Lost:        pglease.ErrLeaseLost, // runslots.ErrSlotLost matches it
		Logger:      log,
		OnRenew:     r.renewed,
	}, func(wctx context.Context) error {
		r.mu.Lock()
		r.levels = append(r.levels, level{what: desc, t: t, ctx: wctx})
		r.mu.Unlock()
		next := func() error { return r.hold(wctx, steps[1:], append(env, st.env(t)...)) }
		if st.around != nil {
			return st.around(wctx, t, next)
		}
		return next()
	})
	if stopped, ok := errors.AsType[*commandStopped](res.WorkErr); ok {
		if !res.Lost && stopped.why == whyDeadline {
			// Stopped --grace before the deadline, with renewals failing:
			// try to hand the tenure back, for as long as it is ours.
			r.release(parent, t, desc, log, time.Until(t.Deadline()))
		}
		// The cause was said when the stopping began.
		what, _ := r.nearest()
		reason := ": no renewal succeeded in time"
		if stopped.why != whyDeadline {
			what, _ = r.lossCause()
			reason = " lost"
		}
		return &exitError{code: exitLost, msg: fmt.Sprintf("%s%s: the command and everything it started were stopped (exit %d); "+
			"hint: `pglease status` shows who holds it now", what, reason, exitLost)}
	}
	if res.Lost {
		r.mu.Lock()
		started := r.child != nil
		r.mu.Unlock()
		if !started { // lost while taking the slot
			return &exitError{code: exitLost, msg: fmt.Sprintf("%s lost (%v) before the command started (exit %d)", desc, res.Cause, exitLost)}
		}
		// A renewal in flight when the command exited was refused.
		return &exitError{code: exitLost, msg: fmt.Sprintf("%s lost (%v) as the command exited: it may have run without it (exit %d)", desc, res.Cause, exitLost)}
	}
	r.release(parent, t, desc, log, r.o.ttl)
	return res.WorkErr
}

// release releases t, waiting at most timeout.
func (r *runner) release(parent context.Context, t held, desc string, log *slog.Logger, timeout time.Duration) {
	if timeout <= 0 {
		return
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	defer rcancel()
	if err := t.Release(rctx); err != nil {
		fmt.Fprintf(r.a.stderr, "pglease: release %s failed (it expires by itself within %s): %v\n", desc, r.o.ttl, r.a.scrub(oneLine(detail(err))))
	} else {
		log.Info("released")
	}
}

// lossCause says which tenure was lost and why, once the command's context
// has ended: the outermost level whose work context ended.
func (r *runner) lossCause() (what string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.levels {
		if l.ctx.Err() != nil {
			return l.what, context.Cause(l.ctx)
		}
	}
	return "the lease", errors.New("unknown cause")
}

// maxQuoted is the longest name messages quote in full.
const maxQuoted = 64

// quoteName quotes a lease or scope name for a message, cut short when too
// long to read (names may be up to 256 bytes).
func quoteName(name string) string {
	if len(name) <= maxQuoted {
		return strconv.Quote(name)
	}
	cut := 48
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(name[:cut]), len(name))
}

// causeText says in a few words why a tenure was lost.
func causeText(cause error) string {
	switch {
	case errors.Is(cause, tenure.ErrRefused):
		return "the server refused a renewal: the tenure was ended, force-released or expired"
	case errors.Is(cause, tenure.ErrDeadline):
		return "no renewal succeeded before the local deadline"
	case errors.Is(cause, tenure.ErrNoTime):
		return "a renewal failed with no time left to retry before the local deadline"
	}
	return oneLine(cause.Error())
}

// Why the command was stopped, as the reaper reports it.
const (
	whyExited   = "exited"   // the command exited by itself; what it left running was stopped
	whyDeadline = "deadline" // only --grace was left before the local deadline
	whyLost     = "lost"     // pglease said stop: the tenure was lost
	whyOrphaned = "orphaned" // pglease died: nobody renews the tenure
)

// commandStopped is the command's result when it was stopped because its
// tenure was lost, or would have been before it could stop in time.
type commandStopped struct {
	status int    // what the command exited with
	why    string // whyLost, whyDeadline or whyOrphaned
}

func (e *commandStopped) Error() string {
	return fmt.Sprintf("command stopped (%s; its exit status %d)", e.why, e.status)
}

// childEnv returns env without the variables pglease run sets, so that a
// nested run does not pass on its parent's tenure.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env)+6)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PGLEASE_HOLDER", "PGLEASE_LEASE", "PGLEASE_FENCE", "PGLEASE_SLOT_SCOPE", "PGLEASE_SLOT", "PGLEASE_SLOT_FENCE", "PGLEASE_SLOT_UNITS":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// newLogger returns the logger of the lease keeping: warnings always (a
// renewal that failed, a command that does not stop), the rest with --verbose (-v).
func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			if len(groups) == 0 && a.Key == slog.MessageKey {
				a.Value = slog.StringValue("pglease: " + a.Value.String())
			}
			return a
		},
	}))
}
