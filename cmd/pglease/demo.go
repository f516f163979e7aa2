package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/pgleasemigrate"
	"github.com/pglease/pglease/supervisor"
)

const (
	// demoTimeout bounds the whole demo, starting a server included.
	demoTimeout = 2 * time.Minute
	// demoStepTimeout bounds each step the demo waits for.
	demoStepTimeout = 15 * time.Second
	// demoDatabase is the database the demo creates on a server it found
	// (with a random suffix) or started.
	demoDatabase = "pglease_demo"
)

var demoCommand = &command{
	name:    "demo",
	summary: "Show leader election, a crash and a handover with three in-process instances",
	usage: `
Usage: pglease demo [--database URL] [--ttl 1s]

Runs three supervised instances of one workload in this process, each with a
connection pool of its own, and prints a timeline:

  1. instance-1 takes the lease and runs the workload; the others stand by;
  2. the leader is cut off the database (its backends are terminated with
     pg_terminate_backend and its reconnections refused): its workload is
     cancelled before its tenure ends on the server, and a standby takes
     over with a larger fence after it has ended;
  3. the new leader shuts down gracefully: it releases the lease and the
     last standby takes over at once.

With a database named by --database, PGLEASE_DATABASE_URL, DATABASE_URL
or the PG* variables, it applies the pglease migrations there if the schema
is missing and uses a lease named demo-<random>, deleted at the end when
allowed. Without one, it looks for a server as 'make test' does: a local
server on 127.0.0.1:5432 or the Unix sockets (as user postgres), else a
throwaway cluster from the local initdb and pg_ctl; never Docker. It
creates a database of its own there and drops it (or removes the cluster)
at the end. Its first line says which server it uses.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db  dbFlag
			ttl time.Duration
		)
		db.register(fs)
		fs.DurationVar(&ttl, "ttl", time.Second, "lease TTL of the instances")
		return func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("demo", "unexpected argument %q", args[0])
			}
			if ttl < 100*time.Millisecond || ttl > time.Minute {
				return usagef("demo", "--ttl must be from 100ms to 1m, got %s", ttl)
			}
			return a.demo(ctx, &db, ttl)
		}
	},
}

func (a *app) demo(ctx context.Context, db *dbFlag, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	connString, from := a.connString(db)
	var (
		lease   = "demo"
		where   string
		cleanup func(ctx context.Context, pool *pgxpool.Pool)
	)
	if connString == "" && len(pgserver.LibpqEnv()) == 0 {
		srv, err := pgserver.Find(ctx, pgserver.Options{})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return failf("demo: %v; or pass --database URL", err)
		}
		defer func() {
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer scancel()
			if err := srv.Stop(sctx); err != nil {
				fmt.Fprintf(a.stderr, "pglease: demo: stop %s: %v\n", srv.Source, err)
			}
		}()
		name, removed := demoDatabase, "the cluster is removed at the end"
		if !srv.Started() {
			name, removed = demoDatabase+"_"+randomHex(), "dropped at the end"
		}
		fmt.Fprintf(a.stdout, "pglease demo: no database named (--database, %s, %s, PG*): using %s, PostgreSQL %s; "+
			"creating database %s there and installing the pglease schema in it (%s)\n",
			envDatabaseURL, envFallbackURL, srv.Source, srv.Version, name, removed)
		if connString, err = pgserver.CreateDatabase(ctx, srv.URL, name); err != nil {
			return failf("demo: %v", err)
		}
		if !srv.Started() {
			defer func() {
				dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer dcancel()
				if err := pgserver.DropDatabase(dctx, srv.URL, name); err != nil {
					fmt.Fprintf(a.stderr, "pglease: demo: %v\n", err)
				}
			}()
		}
		where = fmt.Sprintf("%s, PostgreSQL %s", srv.Source, srv.Version)
		db = &dbFlag{value: connString}
	} else {
		lease = "demo-" + randomHex()
		cleanup = func(ctx context.Context, pool *pgxpool.Pool) {
			// The demo's own lease row; nobody else knows its name, so its
			// fence protects nothing. Left in place without the privilege.
			if _, err := pool.Exec(ctx, `DELETE FROM pglease.leases WHERE name = $1`, lease); err != nil {
				fmt.Fprintf(a.stdout, "left lease %q in the database (cannot delete it: %s)\n", lease, oneLine(err.Error()))
			}
		}
	}
	t, err := a.parseTarget(db, "demo")
	if err != nil {
		return err
	}
	if where == "" {
		where = t.String()
		source := ""
		if t.connString != "" {
			source = " (from " + from + ")" // a PG* target names its variables itself
		}
		fmt.Fprintf(a.stdout, "pglease demo: using %s%s; installing the pglease schema there if it is missing "+
			"(pglease migrate up), and using lease %q, deleted at the end\n", where, source, lease)
	}
	pool, err := a.connect(ctx, t)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := inspectSchema(ctx, pool)
	if err != nil {
		return a.queryError(ctx, "inspect schema pglease", err)
	}
	if !st.schema {
		if err := pgleasemigrate.Up(ctx, connString); err != nil {
			return a.migrateError(ctx, t, pgleasemigrate.Table, "demo: migrate up", err)
		}
		fmt.Fprintf(a.stdout, "applied the pglease migrations to %s\n", t)
	} else if err := a.requireSchema(ctx, pool, t); err != nil {
		return err
	}

	d := &demo{
		out:   a.stdout,
		ttl:   ttl,
		lease: lease,
		app:   "pglease-demo-" + lease,
		admin: pool,
		base:  t.cfg,
		start: time.Now(),
		ev:    make(chan demoEvent, 64),
		quit:  make(chan struct{}),
	}
	fmt.Fprintf(a.stdout, "pglease demo: three instances share lease %q (TTL %s) on %s\n\n", lease, ttl, where)
	err = d.run(ctx)
	if cleanup != nil {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
		cleanup(cctx, pool)
		ccancel()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return failf("demo: did not finish within %s", demoTimeout)
	}
	return err
}

// demo is one run of the demonstration.
type demo struct {
	out   io.Writer
	ttl   time.Duration
	lease string
	app   string // application_name prefix of the instances' connections
	admin *pgxpool.Pool
	base  *pgxpool.Config
	start time.Time
	ev    chan demoEvent
	quit  chan struct{} // closed when the timeline is no longer read

	instances []*instance
	running   atomic.Int32 // workloads running now
	overlap   atomic.Bool  // two workloads ran at once
}

// instance is one supervised instance.
type instance struct {
	n      int
	name   string
	pool   *pgxpool.Pool
	cut    atomic.Bool // refuse new connections
	sup    *supervisor.Supervisor
	cancel context.CancelFunc
	done   chan error
}

// demoEvent is a supervisor event, or the start or stop of a workload.
type demoEvent struct {
	at    time.Time
	inst  *instance
	ev    supervisor.Event
	work  string // "start" or "stop" for workload events, else ""
	cause error  // why the workload stopped
}

var errCut = errors.New("demo: this instance is cut off the database")

func (d *demo) elapsed(t time.Time) time.Duration { return t.Sub(d.start) }

// line prints one line of the timeline.
func (d *demo) line(at time.Time, who, format string, args ...any) {
	fmt.Fprintf(d.out, "%7dms  %-10s  %s\n", d.elapsed(at).Milliseconds(), who, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	defer func() {
		close(d.quit) // nobody reads the timeline any more
		for _, inst := range d.instances {
			inst.stop()
			inst.pool.Close()
		}
	}()
	for i := 1; i <= 3; i++ {
		inst, err := d.newInstance(ctx, i)
		if err != nil {
			return err
		}
		d.instances = append(d.instances, inst)
	}
	i1, i2, i3 := d.instances[0], d.instances[1], d.instances[2]
	d.start = time.Now()
	fmt.Fprintf(d.out, "%9s  %-10s  %s\n", "time", "who", "what")

	// 1. instance-1 leads, the others stand by.
	i1.begin(ctx, d)
	if err := d.await(ctx, "instance-1 to take the lease", func(e demoEvent) bool {
		if e.inst == i1 && e.ev.Kind == supervisor.EventAcquired {
			d.line(e.at, i1.name, "took the lease, fence %d: workload running", e.ev.Fence)
			return true
		}
		return false
	}); err != nil {
		return err
	}
	i2.begin(ctx, d)
	i3.begin(ctx, d)
	seen := map[*instance]bool{}
	if err := d.await(ctx, "the standbys to see the leader", func(e demoEvent) bool {
		if e.ev.Kind == supervisor.EventLeaderSeen {
			seen[e.inst] = true
		}
		return seen[i2] && seen[i3]
	}); err != nil {
		return err
	}
	if err := d.pause(ctx, d.ttl); err != nil { // a few renewals
		return err
	}

	// 2. Cut the leader off: its backends are terminated and it cannot
	// reconnect, like a process on the wrong side of a partition.
	cutAt, expiry, n, err := d.cut(ctx, i1)
	if err != nil {
		return err
	}
	d.line(cutAt, "demo", "cut instance-1 off the database: %d backend(s) terminated, reconnects refused; the server ends its tenure in %dms",
		n, expiry.Sub(cutAt).Milliseconds())
	var (
		lostAt   time.Time
		next     *instance
		takenAt  time.Time
		newFence int64
	)
	if err := d.await(ctx, "instance-1 to lose the lease and a standby to take over", func(e demoEvent) bool {
		switch {
		case e.inst == i1 && e.work == "stop":
			lostAt = e.at
			d.line(e.at, i1.name, "leader cut off -> workload cancelled %dms before expiry (%v)", expiry.Sub(e.at).Milliseconds(), e.cause)
		case e.inst != i1 && e.ev.Kind == supervisor.EventAcquired:
			next, takenAt, newFence = e.inst, e.at, e.ev.Fence
			d.line(e.at, e.inst.name, "took over, fence %d, %dms after expiry", e.ev.Fence, e.at.Sub(expiry).Milliseconds())
		}
		return !lostAt.IsZero() && next != nil
	}); err != nil {
		return err
	}
	i1.stop() // the cut-off instance exits
	other := i2
	if next == i2 {
		other = i3
	}
	if err := d.pause(ctx, d.ttl); err != nil {
		return err
	}

	// 3. Graceful handover: the leader shuts down and releases.
	stopAt := time.Now()
	d.line(stopAt, "demo", "stopping %s (graceful shutdown)", next.name)
	next.cancel()
	var releasedAt, handedAt time.Time
	if err := d.await(ctx, next.name+" to release and "+other.name+" to take over", func(e demoEvent) bool {
		switch {
		case e.inst == next && e.ev.Kind == supervisor.EventReleased:
			releasedAt = e.at
			d.line(e.at, next.name, "workload stopped; released the lease, fence %d", e.ev.Fence)
		case e.inst == other && e.ev.Kind == supervisor.EventAcquired:
			handedAt = e.at
			d.line(e.at, other.name, "took over, fence %d, %dms after the release", e.ev.Fence, e.at.Sub(releasedAt).Milliseconds())
		}
		return !releasedAt.IsZero() && !handedAt.IsZero()
	}); err != nil {
		return err
	}
	if d.overlap.Load() {
		return failf("demo: two workloads ran at once: the cut-off instance ran past its safety margin " +
			"(the machine stalled it for more than a quarter of the TTL?); try a longer --ttl")
	}
	fmt.Fprintf(d.out, "\nsummary:\n")
	fmt.Fprintf(d.out, "  crash:    the cut-off leader stopped its work %dms before its tenure ended on the server;\n"+
		"            %s started with fence %d %dms after it ended: never two leaders at once\n",
		expiry.Sub(lostAt).Milliseconds(), next.name, newFence, takenAt.Sub(expiry).Milliseconds())
	fmt.Fprintf(d.out, "  handover: %s took over %dms after %s released the lease (no wait for the TTL)\n",
		other.name, handedAt.Sub(releasedAt).Milliseconds(), next.name)
	return nil
}

// newInstance opens instance n's pool and supervisor.
func (d *demo) newInstance(ctx context.Context, n int) (*instance, error) {
	inst := &instance{n: n, name: fmt.Sprintf("instance-%d", n)}
	cfg := d.base.Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("%s-%d", d.app, n)
	cfg.MaxConns = 4
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if inst.cut.Load() {
			return errCut
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, failf("demo: open pool: %v", err)
	}
	inst.pool = pool
	inst.sup, err = supervisor.NewLease(pool, d.lease, supervisor.Config{
		TTL: d.ttl,
		// A wide margin: the demo must not depend on the machine being
		// idle, and a stall past the margin is the overlap it shows away.
		SafetyMargin: d.ttl / 4,
		Holder:       fmt.Sprintf("%s/%s", inst.name, randomHex()),
		Logger:       slog.New(slog.DiscardHandler),
		RestartDelay: d.ttl,
		Observer: func(e supervisor.Event) {
			d.send(demoEvent{at: time.Now(), inst: inst, ev: e})
		},
	})
	if err != nil {
		pool.Close()
		return nil, failf("demo: %s", detail(err))
	}
	return inst, nil
}

// randomHex returns 8 random hex digits.
func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// begin starts the instance's supervisor.
func (inst *instance) begin(ctx context.Context, d *demo) {
	ctx, inst.cancel = context.WithCancel(ctx)
	inst.done = make(chan error, 1)
	go func() {
		inst.done <- inst.sup.Run(ctx, func(ctx context.Context) error {
			if d.running.Add(1) > 1 {
				d.overlap.Store(true)
			}
			d.send(demoEvent{at: time.Now(), inst: inst, work: "start"})
			<-ctx.Done()
			stopped := time.Now()
			d.running.Add(-1)
			d.send(demoEvent{at: stopped, inst: inst, work: "stop", cause: context.Cause(ctx)})
			return nil
		})
	}()
}

// stop stops the instance's supervisor, if it runs, and waits for it.
func (inst *instance) stop() {
	if inst.cancel == nil {
		return
	}
	inst.cancel()
	<-inst.done
	inst.cancel = nil
}

// send delivers an event to the timeline, or drops it once nobody reads
// the timeline any more.
func (d *demo) send(e demoEvent) {
	select {
	case d.ev <- e:
	case <-d.quit:
	}
}

// await prints the events that are of interest until done says the step is
// over, or fails after demoStepTimeout.
func (d *demo) await(ctx context.Context, what string, done func(demoEvent) bool) error {
	timeout := time.NewTimer(demoStepTimeout)
	defer timeout.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return failf("demo: waited %s for %s", demoStepTimeout, what)
		case e := <-d.ev:
			d.print(e)
			if done(e) {
				return nil
			}
		}
	}
}

// print prints the events that every step shows: a standby seeing a new
// leader. Each step prints the events it waits for itself.
func (d *demo) print(e demoEvent) {
	if e.ev.Kind == supervisor.EventLeaderSeen && e.ev.Holder != "" {
		d.line(e.at, e.inst.name, "standing by: %s leads with fence %d", holderName(e.ev.Holder), e.ev.Fence)
	}
}

// holderName returns the instance part of a holder identity.
func holderName(holder string) string {
	name, _, _ := strings.Cut(holder, "/")
	return name
}

// pause waits d, or until ctx ends, printing the events that arrive.
func (d *demo) pause(ctx context.Context, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case e := <-d.ev:
			d.print(e)
		}
	}
}

// cut cuts inst off the database: new connections are refused and its
// backends terminated. It returns when the cut was complete, the local time
// at which the server ends inst's tenure (from the server's expires_in, read
// after the cut, when no renewal can succeed any more), and the number of
// backends terminated.
func (d *demo) cut(ctx context.Context, inst *instance) (at, expiry time.Time, n int, err error) {
	inst.cut.Store(true)
	var version int
	if err := d.admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return at, expiry, 0, failf("demo: %v", err)
	}
	terminate := `pg_catalog.pg_terminate_backend(a.pid)`
	if version >= 140000 {
		terminate = `pg_catalog.pg_terminate_backend(a.pid, 5000)` // waits until it has exited
	}
	err = d.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE `+terminate+`)
		FROM pg_catalog.pg_stat_activity AS a
		WHERE a.application_name = $1 AND a.pid <> pg_catalog.pg_backend_pid()`,
		fmt.Sprintf("%s-%d", d.app, inst.n)).Scan(&n)
	if err != nil {
		return at, expiry, 0, failf("demo: terminate the backends of %s: %v", inst.name, err)
	}
	var left time.Duration
	sent := time.Now()
	if err := d.admin.QueryRow(ctx, `SELECT expires_in FROM pglease.lease_status WHERE name = $1`, d.lease).Scan(&left); err != nil {
		return at, expiry, 0, failf("demo: read the lease: %v", err)
	}
	at = sent.Add(time.Since(sent) / 2) // when the server computed left
	return at, at.Add(left), n, nil
}
