//go:build failover

package failover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pglease/pglease/internal/asyncrelease"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleasemigrate"
	"github.com/pglease/pglease/supervisor"
)

// Settings, from the environment.
const (
	// envKeep, when set, leaves the formation running after the tests
	// (failover/env.sh down stops it).
	envKeep = "PGLEASE_FAILOVER_KEEP"
	// envRounds is how many rounds of (switchover, postmaster kill, node
	// loss) each run goes through. Defaults to 1; ignored with -short.
	envRounds = "PGLEASE_FAILOVER_ROUNDS"
	// envTTL is the supervisors' lease TTL. Defaults to 5s.
	envTTL = "PGLEASE_FAILOVER_TTL"
	// envReport, when set, names a file the tests append their figures
	// to, as markdown.
	envReport = "PGLEASE_FAILOVER_REPORT"
)

const (
	leaseName   = "failover-leader"
	supervisors = 3
	// writeEvery paces each leader's fenced writes.
	writeEvery = 10 * time.Millisecond
	// probeEvery paces the availability probe.
	probeEvery = 50 * time.Millisecond
	// settle is how many acknowledged writes on the primary a fault waits
	// for before it is injected, and after the run before the checks.
	settle = 20
	// recoverTimeout bounds the wait for writes on the new primary.
	recoverTimeout = 3 * time.Minute
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "failover: these tests start a pg_auto_failover formation as user postgres "+
			"and kill its processes: run them as root (make test-failover)")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var f formation
	start := time.Now()
	url, err := f.run(ctx, "up")
	if err != nil {
		fmt.Fprintf(os.Stderr, "failover: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "failover: formation up in %s: %s\n", time.Since(start).Round(100*time.Millisecond), url)
	code := m.Run()
	if code != 0 {
		if dir, err := os.MkdirTemp("", "pglease-failover-logs-"); err == nil {
			if _, err := f.run(context.Background(), "save-logs", dir); err == nil {
				fmt.Fprintf(os.Stderr, "failover: the formation's logs are in %s\n", dir)
			}
		}
	}
	if os.Getenv(envKeep) == "" {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if _, err := f.run(dctx, "down"); err != nil {
			fmt.Fprintf(os.Stderr, "failover: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "failover: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	return code
}

// faultKind is a way of losing the primary.
type faultKind string

const (
	// switchover: a planned failover (env.sh switchover).
	switchover faultKind = "switchover"
	// killPostmaster: SIGKILL the primary's postmaster; its keeper lives
	// on and restarts it in place, or, when the monitor fails over first
	// (or just after), rejoins as a secondary by itself.
	killPostmaster faultKind = "kill-postmaster"
	// killNode: SIGKILL the primary's keeper, postmaster and backends (the
	// machine is gone); the node is restarted afterwards and rejoins.
	killNode faultKind = "kill-node"
	// lagThenKill: stop the primary's WAL sender, make the leader hand over
	// so that a new tenure is granted, let it write, then killNode.
	lagThenKill faultKind = "lag-then-kill"
)

// outcome is what one fault cost.
type outcome struct {
	kind     faultKind
	old, new server // the primary before, the server of the first write after
	// settled is the primary once the formation is whole again: it differs
	// from new when the monitor failed over after Postgres was restarted
	// in place.
	settled server
	// engine: from the fault to the first write of the probe on the new
	// primary.
	engine time.Duration
	// recovery: from the fault to the first acknowledged fenced write on
	// the new primary; gap: from the last acknowledged fenced write on the
	// old primary to that one.
	recovery, gap time.Duration
	before, after write // the last fenced write before, the first after
	// lagged (lagThenKill): whether a new tenure was granted and wrote
	// while the standby received nothing.
	lagged string
	// released (killPostmaster, killNode): the release made just before
	// the fault, if the leader's supervisor made one.
	released    release
	hasReleased bool
	// exposed: the next tenure first wrote on the new primary, so the
	// fault came before any durable commit carried the (asynchronous)
	// release, which could then be lost with the primary.
	exposed bool
}

// releaseNote says, for the log, how the release just before the fault
// went.
func (o outcome) releaseNote() string {
	if !o.hasReleased {
		return ""
	}
	next := "the next tenure first wrote on the old primary (its grant carried the release)"
	if o.exposed {
		next = "the next tenure first wrote on the new primary (the release was exposed to the fault)"
	}
	return fmt.Sprintf("; fence %d released by %s just before the fault, %s", o.released.fence, o.released.holder, next)
}

// path says where the primary went.
func (o outcome) path() string {
	p := fmt.Sprintf("%d → %d", o.old.port, o.new.port)
	if o.old.port == o.new.port {
		p = fmt.Sprintf("%d restarted in place", o.old.port)
	}
	if o.settled != o.new {
		p += fmt.Sprintf(", then failed over to %d", o.settled.port)
	}
	return p
}

// scenario is one run: a fresh database, three supervisors, faults.
type scenario struct {
	t       *testing.T
	f       formation
	mode    string // "sync" or "async"
	ttl     time.Duration
	db, url string
	h       *history
	// handovers records the voluntary handovers and their latency.
	handovers []string
	// cancelProbe records the acquire made during lagThenKill through a
	// client that cancels with a CancelRequest (synchronous mode only).
	cancelProbe []string
}

// TestSynchronousStandby runs the leader workload through switchovers,
// postmaster kills and node losses, the last one after stopping the WAL
// sender, with the standby synchronous (pg_auto_failover's default), and
// checks that no grant, fence or acknowledged fenced write is lost, and
// that fenced writes resume within TTL + the engine's failover time.
func TestSynchronousStandby(t *testing.T) {
	s := newScenario(t, "sync")
	outcomes, v := s.run(faults(t))
	s.report(outcomes, v)
	if len(v.violations) > 0 {
		t.Errorf("%d violations with a synchronous standby:\n  %s", len(v.violations), strings.Join(v.violations, "\n  "))
	}
	for _, o := range outcomes {
		if bound := s.ttl + o.engine; o.recovery > bound {
			t.Errorf("%s: fenced writes resumed %s after the fault, want at most TTL + engine failover = %s + %s",
				o.kind, o.recovery.Round(time.Millisecond), s.ttl, o.engine.Round(time.Millisecond))
		}
	}
}

// TestAsynchronousStandby runs the same faults with the standby made
// asynchronous (replication-quorum false on both nodes), the last one
// provoking the loss the docs warn about: the WAL sender is stopped, a new
// tenure is granted and written under, and the primary is killed. It
// reports what was lost, and fails when nothing was, since then the
// provocation did not work.
func TestAsynchronousStandby(t *testing.T) {
	s := newScenario(t, "async")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := s.f.run(ctx, "wait-ready", "150"); err != nil {
			t.Errorf("restoring synchronous replication: %v", err)
			return
		}
		if _, err := s.f.run(ctx, "sync"); err != nil {
			t.Errorf("restoring synchronous replication: %v", err)
		}
	})
	outcomes, v := s.run(faults(t))
	s.report(outcomes, v)
	if len(v.violations) > 0 {
		t.Logf("with an asynchronous standby, as expected, %d violations:\n  %s", len(v.violations), strings.Join(v.violations, "\n  "))
	}
	if v.lostWrites == 0 {
		t.Errorf("an asynchronous failover after a lagging standby lost no acknowledged write: the provocation did not work")
	}
}

// faults returns the faults of one run: $PGLEASE_FAILOVER_ROUNDS rounds
// of (switchover, postmaster kill, node loss), the last node loss made
// after stopping the WAL sender. With -short: a switchover and that.
func faults(t *testing.T) []faultKind {
	if testing.Short() {
		return []faultKind{switchover, lagThenKill}
	}
	rounds := 1
	if s := os.Getenv(envRounds); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count of 1 or more", envRounds, s)
		}
		rounds = n
	}
	var fs []faultKind
	for range rounds {
		fs = append(fs, switchover, killPostmaster, killNode)
	}
	fs[len(fs)-1] = lagThenKill
	return fs
}

func newScenario(t *testing.T, mode string) *scenario {
	ttl := 5 * time.Second
	if s := os.Getenv(envTTL); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", envTTL, s, err)
		}
		ttl = d
	}
	return &scenario{t: t, mode: mode, ttl: ttl, db: "pglease_failover_" + mode, h: newHistory()}
}

// run prepares the database, starts the probe and the supervisors, injects
// faults, stops everything and checks the history.
func (s *scenario) run(faults []faultKind) ([]outcome, verdict) {
	t := s.t
	ctx := t.Context()
	if _, err := s.f.run(ctx, "wait-ready", "150"); err != nil {
		t.Fatal(err)
	}
	ssn, err := s.f.run(ctx, s.mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s mode: %s", s.mode, ssn)
	s.prepare(ctx)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	s.startProbe(runCtx, &wg)
	for i := range supervisors {
		s.startSupervisor(runCtx, &wg, i+1)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := time.Now()
	if err := s.h.wait(wctx, func() bool { return s.h.ackedSince(started, server{}, 0) >= settle }); err != nil {
		t.Fatalf("no leader wrote %d times within a minute: %v\n%s", settle, err, s.f.state(ctx))
	}

	s.handover(ctx, "before any failover")

	var outcomes []outcome
	for i, kind := range faults {
		o := s.inject(ctx, kind)
		t.Logf("fault %d/%d %-15s %s: engine %s, fenced writes resumed after %s (gap %s); fence %d (%s) -> %d (%s)%s",
			i+1, len(faults), o.kind, o.path(), o.engine.Round(time.Millisecond),
			o.recovery.Round(time.Millisecond), o.gap.Round(time.Millisecond),
			o.before.fence, o.before.holder, o.after.fence, o.after.holder, o.lagged)
		outcomes = append(outcomes, o)
	}

	// Let the formation settle, see the leader write on the final primary,
	// then stop every supervisor before reading the log.
	if _, err := s.f.run(ctx, "wait-ready", "150"); err != nil {
		t.Fatal(err)
	}
	mark := time.Now()
	wctx, cancel = context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	if err := s.h.wait(wctx, func() bool { return s.h.ackedSince(mark, server{}, 0) >= settle }); err != nil {
		t.Fatalf("no fenced writes after the last fault: %v\n%s", err, s.f.state(ctx))
	}
	s.handover(ctx, "after the failovers")
	stop()
	wg.Wait()
	logged := s.readLog(ctx)
	return outcomes, s.h.check(logged)
}

// prepare creates the test database afresh, applies the migrations through
// the multi-host URL and creates the log tables.
func (s *scenario) prepare(ctx context.Context) {
	t := s.t
	admin, err := s.f.url(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	if err := execOnce(ctx, admin,
		"DROP DATABASE IF EXISTS "+s.db+" WITH (FORCE)",
		"CREATE DATABASE "+s.db); err != nil {
		t.Fatal(err)
	}
	if s.url, err = s.f.url(ctx, s.db); err != nil {
		t.Fatal(err)
	}
	// pgx tries the hosts in order and gives up at a server that says the
	// database does not exist (3D000): wait until the standby has replayed
	// CREATE DATABASE (synchronous commit waits for its flush, not replay).
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(time.Minute); ; {
		var one int
		err := queryOnce(ctx, s.url, "SELECT 1", &one)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("database %s unreachable through %s: %v", s.db, s.url, err)
		}
		<-tick.C
	}
	if err := pgleasemigrate.Up(ctx, s.url); err != nil {
		t.Fatalf("migrate through %s: %v", s.url, err)
	}
	if err := execOnce(ctx, s.url,
		`CREATE TABLE fenced_log (
			seq    bigint PRIMARY KEY,
			fence  bigint NOT NULL,
			holder text NOT NULL,
			at     timestamptz NOT NULL DEFAULT clock_timestamp())`,
		`CREATE TABLE probe_log (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	); err != nil {
		t.Fatal(err)
	}
}

// newPool returns a pool on the multi-host URL, closed when the test ends.
func (s *scenario) newPool(ctx context.Context, maxConns int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(pool.Close)
	return pool
}

// startProbe writes to the primary every probeEvery through a pool of its
// own, recording which server committed each write.
func (s *scenario) startProbe(ctx context.Context, wg *sync.WaitGroup) {
	pool := s.newPool(ctx, 1)
	wg.Go(func() {
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			var srv server
			err := pool.QueryRow(qctx, "INSERT INTO probe_log DEFAULT VALUES RETURNING "+serverSQL).Scan(&srv.port, &srv.boot)
			cancel()
			if err == nil {
				s.h.probe(srv)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

// startSupervisor runs supervisor i, on a pool of its own, whose workload
// writes to the fenced log in a loop.
func (s *scenario) startSupervisor(ctx context.Context, wg *sync.WaitGroup, i int) {
	pool := s.newPool(ctx, 4)
	if !asyncrelease.OK(pool) {
		s.t.Fatal("a supervisor on a pool would release synchronously: the releases under test are the asynchronous ones")
	}
	holder := fmt.Sprintf("sup-%d", i)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("mode", s.mode)
	sup, err := supervisor.NewLease(pool, leaseName, supervisor.Config{
		TTL:    s.ttl,
		Holder: holder,
		Logger: logger,
		Observer: func(e supervisor.Event) {
			switch e.Kind {
			case supervisor.EventAcquired:
				s.h.grant(e.Holder, e.Fence)
			case supervisor.EventReleased:
				s.h.release(e.Holder, e.Fence)
			case supervisor.EventLost:
				s.h.lose(lostCause(e.Err))
			}
		},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	workload := func(ctx context.Context) error {
		fence := sup.Fence()
		gen := s.h.handover.Load()
		ten := s.h.start(holder, fence)
		defer s.h.end(ten)
		tick := time.NewTicker(writeEvery)
		defer tick.Stop()
		for ctx.Err() == nil && s.h.handover.Load() == gen {
			seq := s.h.seq.Add(1)
			var srv server
			err := pglease.WithFence(ctx, pool, leaseName, fence, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx,
					"INSERT INTO fenced_log (seq, fence, holder) VALUES ($1, $2, $3) RETURNING "+serverSQL,
					seq, fence, holder).Scan(&srv.port, &srv.boot)
			})
			switch {
			case err == nil:
				s.h.ack(write{at: time.Now(), holder: holder, fence: fence, seq: seq, srv: srv})
			case errors.Is(err, pglease.ErrLeaseLost):
				s.h.writeFailed(true)
				return err // the tenure is over: hand over
			case ctx.Err() == nil:
				s.h.writeFailed(false)
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		return nil
	}
	wg.Go(func() {
		if err := sup.Run(ctx, workload); err != nil && !errors.Is(err, context.Canceled) {
			s.t.Errorf("%s: Run: %v", holder, err)
		}
	})
}

func lostCause(err error) string {
	s := fmt.Sprint(err)
	if i := strings.Index(s, ":"); i > 0 {
		s = s[:i]
	}
	return s
}

// inject waits for the formation to be whole and the leader to write, loses
// the primary in the given way, and measures until fenced writes resume
// on the new primary.
func (s *scenario) inject(ctx context.Context, kind faultKind) outcome {
	t := s.t
	o := outcome{kind: kind}
	if _, err := s.f.run(ctx, "wait-ready", "150"); err != nil {
		t.Fatal(err)
	}
	var ssn string
	if err := queryOnce(ctx, s.url, "SELECT "+serverSQL+", current_setting('synchronous_standby_names')",
		&o.old.port, &o.old.boot, &ssn); err != nil {
		t.Fatal(err)
	}
	if (s.mode == "sync") != (ssn != "") {
		t.Fatalf("%s mode, but synchronous_standby_names = %q on the primary", s.mode, ssn)
	}
	mark := time.Now()
	wctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	if err := s.h.wait(wctx, func() bool { return s.h.ackedSince(mark, o.old, 0) >= settle }); err != nil {
		t.Fatalf("%s: no fenced writes on the primary (port %d) before the fault: %v\n%s", kind, o.old.port, err, s.f.state(ctx))
	}

	// Ready for the fault: both nodes in their goal state and the standby
	// streaming (a primary restarted in place by the previous fault may
	// not have its standby back yet).
	if _, err := s.f.run(ctx, "wait-ready", "150"); err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	var t0 time.Time
	restart := 0
	switch kind {
	case switchover:
		t0 = time.Now()
		if _, err := s.f.run(ctx, "switchover"); err != nil {
			t.Fatal(err)
		}
	case killPostmaster:
		o.released, o.hasReleased = s.releaseNow(ctx)
		t0 = time.Now()
		if _, err := s.f.run(ctx, "kill-postmaster"); err != nil {
			t.Fatal(err)
		}
	case killNode:
		o.released, o.hasReleased = s.releaseNow(ctx)
		t0 = time.Now()
		n, err := s.f.node(ctx, "kill-node")
		if err != nil {
			t.Fatal(err)
		}
		restart = n
	case lagThenKill:
		o.lagged = s.lag(ctx)
		t0 = time.Now()
		n, err := s.f.node(ctx, "kill-node")
		if err != nil {
			t.Fatal(err)
		}
		restart = n
	}

	wctx, cancel = context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	var (
		first write
		probe probeWrite
	)
	err := s.h.wait(wctx, func() bool {
		var okW, okP bool
		first, okW = s.h.firstAckOn(t0, o.old)
		probe, okP = s.h.firstProbeOn(t0, o.old)
		return okW && okP
	})
	if err != nil {
		t.Fatalf("%s: no fenced write on a new primary %s after the fault: %v\n%s", kind, recoverTimeout, err, s.f.state(ctx))
	}
	s.h.mu.Lock()
	o.before, _ = s.h.lastAckBefore(first.at)
	if o.hasReleased {
		o.exposed = true
		if next, ok := s.h.firstGrantAfter(o.released.at); ok {
			w, ok := s.h.firstAckUnder(next.fence)
			o.exposed = !ok || w.srv != o.old
		}
	}
	s.h.mu.Unlock()
	o.lagged += o.releaseNote()
	o.after, o.new = first, first.srv
	o.engine = probe.at.Sub(t0)
	o.recovery = first.at.Sub(t0)
	o.gap = first.at.Sub(o.before.at)
	if restart != 0 {
		if _, err := s.f.run(ctx, "start-node", strconv.Itoa(restart)); err != nil {
			t.Fatal(err)
		}
	}
	if kind == lagThenKill && s.mode == "sync" {
		s.checkCancelProbe(ctx)
	}
	if _, err := s.f.run(ctx, "wait-ready", "150"); err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	if err := queryOnce(ctx, s.url, "SELECT "+serverSQL, &o.settled.port, &o.settled.boot); err != nil {
		t.Fatal(err)
	}
	return o
}

// handover makes the leader's workload return, so that its supervisor
// releases the lease, and records how long until the next grant: a
// standby woken by the release NOTIFY takes over at once, one that is not
// only at the expiry it last saw (or its retry backoff).
func (s *scenario) handover(ctx context.Context, when string) {
	s.h.mu.Lock()
	before, _ := s.h.lastGrant()
	s.h.mu.Unlock()
	asked := time.Now()
	s.h.handover.Add(1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var g grant
	err := s.h.wait(wctx, func() bool {
		var ok bool
		g, ok = s.h.lastGrant()
		return ok && g.fence > before.fence
	})
	if err != nil {
		s.t.Fatalf("handover %s: no new grant within a minute: %v", when, err)
	}
	// The supervisors' LISTEN connections (one per pool with a standby).
	var listening int
	err = queryOnce(ctx, s.url, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%LISTEN pglease%'`, &listening)
	if err != nil {
		s.t.Fatal(err)
	}
	s.handovers = append(s.handovers, fmt.Sprintf("handover %s: fence %d (%s) -> %d (%s) granted %s after the leader was asked to return; %d LISTEN connections on the primary",
		when, before.fence, before.holder, g.fence, g.holder, g.at.Sub(asked).Round(time.Millisecond), listening))
	s.t.Log(s.handovers[len(s.handovers)-1])
}

// releaseNow makes the leader's workload return and waits until its
// supervisor has released the lease, so that the fault that follows races
// the next grant: the release commits on the pool without waiting for its
// WAL flush or the standby, and may be lost with the primary. It returns
// false when the tenure ended otherwise (the lease was lost, and a new
// grant came without a release).
func (s *scenario) releaseNow(ctx context.Context) (release, bool) {
	s.h.mu.Lock()
	n := len(s.h.releases)
	before, _ := s.h.lastGrant()
	s.h.mu.Unlock()
	s.h.handover.Add(1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := s.h.wait(wctx, func() bool {
		g, _ := s.h.lastGrant()
		return len(s.h.releases) > n || g.fence > before.fence
	})
	if err != nil {
		s.t.Fatalf("no release nor new grant within a minute of asking the leader (fence %d) to return: %v", before.fence, err)
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if len(s.h.releases) > n {
		return s.h.releases[n], true
	}
	return release{}, false
}

// lag stops the primary's WAL sender, so that the standby receives
// nothing more, and makes the leader hand over so that a new tenure is
// granted and written under (in asynchronous mode; in synchronous mode
// every commit now waits, and none is acknowledged). It returns what
// happened, for the log.
func (s *scenario) lag(ctx context.Context) string {
	t := s.t
	s.h.mu.Lock()
	before, _ := s.h.lastGrant()
	s.h.mu.Unlock()
	if _, err := s.f.run(ctx, "stop-sender"); err != nil {
		t.Fatal(err)
	}
	if s.mode == "sync" {
		s.cancelledAcquire(ctx)
	}
	s.h.handover.Add(1)
	// Bounded: in synchronous mode no grant can be acknowledged. One TTL
	// lets the old tenure expire; a second lets the others try for it.
	wctx, cancel := context.WithTimeout(ctx, 2*s.ttl)
	defer cancel()
	var g grant
	err := s.h.wait(wctx, func() bool {
		var ok bool
		g, ok = s.h.lastGrant()
		return ok && g.fence > before.fence && s.h.ackedSince(g.at, server{}, g.fence) >= 5
	})
	s.h.mu.Lock()
	n := s.h.ackedSince(g.at, server{}, g.fence)
	s.h.mu.Unlock()
	if err != nil {
		return fmt.Sprintf("; standby lagging: no new tenure acknowledged within %s (last grant fence %d)", 2*s.ttl, before.fence)
	}
	return fmt.Sprintf("; standby lagging: fence %d granted to %s and %d writes acknowledged before the kill", g.fence, g.holder, n)
}

// cancelledAcquire acquires a lease through a client that cancels a
// statement with a CancelRequest (as psql, JDBC's query timeout or
// pg_cancel_backend do), while the standby receives nothing: Postgres
// then ends the commit's wait for the standby with a WARNING and reports
// success, although the commit is on the primary only.
func (s *scenario) cancelledAcquire(ctx context.Context) {
	cfg, err := pgx.ParseConfig(s.url)
	if err != nil {
		s.t.Fatal(err)
	}
	var warnings []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { warnings = append(warnings, n.Message) }
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 5 * time.Second}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	var (
		acquired bool
		fence    int64
	)
	err = conn.QueryRow(qctx, "SELECT acquired, fence FROM pglease.acquire('cancel-probe', 'canceller', '1 hour')").
		Scan(&acquired, &fence)
	s.cancelProbe = append(s.cancelProbe,
		fmt.Sprintf("acquire cancelled while waiting for the standby: acquired=%v fence=%d err=%v warnings=%q",
			acquired, fence, err, warnings))
}

// checkCancelProbe records what the new primary knows of the cancelled
// acquire.
func (s *scenario) checkCancelProbe(ctx context.Context) {
	var state string
	err := queryOnce(ctx, s.url,
		"SELECT coalesce((SELECT state || ' fence ' || fence || ' by ' || holder FROM pglease.lease_status WHERE name = 'cancel-probe'), 'absent')",
		&state)
	s.cancelProbe = append(s.cancelProbe, fmt.Sprintf("after the failover, lease cancel-probe on the new primary: %s (err %v)", state, err))
}

// readLog reads the fenced log table on the final primary.
func (s *scenario) readLog(ctx context.Context) map[int64]loggedRow {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT seq, fence, holder FROM fenced_log")
	if err != nil {
		s.t.Fatal(err)
	}
	logged := map[int64]loggedRow{}
	var (
		seq int64
		row loggedRow
	)
	_, err = pgx.ForEachRow(rows, []any{&seq, &row.fence, &row.holder}, func() error {
		logged[seq] = row
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return logged
}

// report logs the figures, and appends them to $PGLEASE_FAILOVER_REPORT.
func (s *scenario) report(outcomes []outcome, v verdict) {
	s.h.mu.Lock()
	refused, failed, lost := s.h.refused, s.h.failed, maps.Clone(s.h.lost)
	releases := len(s.h.releases)
	s.h.mu.Unlock()
	var engine, recovery, gap []time.Duration
	counts := map[faultKind]int{}
	var releasedBefore, exposed int
	for _, o := range outcomes {
		engine = append(engine, o.engine)
		recovery = append(recovery, o.recovery)
		gap = append(gap, o.gap)
		counts[o.kind]++
		if o.hasReleased {
			releasedBefore++
		}
		if o.exposed {
			exposed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### %s standby, TTL %s\n\n", s.mode, s.ttl)
	fmt.Fprintf(&b, "| fault | primary (port) | engine failover | fenced writes resumed | write gap | fence before → after |\n|---|---|---|---|---|---|\n")
	for _, o := range outcomes {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d (%s) → %d (%s)%s |\n", o.kind, o.path(),
			o.engine.Round(time.Millisecond), o.recovery.Round(time.Millisecond), o.gap.Round(time.Millisecond),
			o.before.fence, o.before.holder, o.after.fence, o.after.holder, o.lagged)
	}
	fmt.Fprintf(&b, "\nfailovers survived: %d (%v); grants checked: %d (%d of them the previous fence again, to the same holder); tenures: %d; "+
		"acknowledged fenced writes checked: %d (refused %d, unknown outcome %d); leases lost by supervisors: %v\n",
		len(outcomes), counts, v.grants, v.resumed, v.tenures, v.acked, refused, failed, lost)
	fmt.Fprintf(&b, "releases performed: %d, all asynchronous (each supervisor releases through its pool, so the release commits "+
		"with synchronous_commit off: no wait for its WAL flush nor for the standby); %d of them just before a kill, "+
		"%d of those with the next tenure's first write on the new primary (the release exposed to the crash)\n",
		releases, releasedBefore, exposed)
	fmt.Fprintf(&b, "violations: %d (fence granted twice %d, fence backwards %d, overlapping tenures %d, "+
		"acknowledged writes lost %d, writes under another's fence %d)\n",
		len(v.violations), v.doubleGrants, v.backwards, v.overlaps, v.lostWrites, v.foreignWrites)
	fmt.Fprintf(&b, "engine failover p50 %s max %s; fenced writes resumed p50 %s max %s; write gap p50 %s max %s; bound TTL + engine\n",
		percentile(engine, 50).Round(time.Millisecond), maxOf(engine).Round(time.Millisecond),
		percentile(recovery, 50).Round(time.Millisecond), maxOf(recovery).Round(time.Millisecond),
		percentile(gap, 50).Round(time.Millisecond), maxOf(gap).Round(time.Millisecond))
	for _, c := range append(slices.Clone(s.handovers), s.cancelProbe...) {
		fmt.Fprintf(&b, "%s\n", c)
	}
	for _, line := range v.violations {
		fmt.Fprintf(&b, "- %s\n", line)
	}
	s.t.Log("\n" + b.String())
	if path := os.Getenv(envReport); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			s.t.Errorf("report: %v", err)
			return
		}
		defer f.Close()
		if _, err := f.WriteString(b.String() + "\n"); err != nil {
			s.t.Errorf("report: %v", err)
		}
	}
}
