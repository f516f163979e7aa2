//go:build proof

package proof

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// runFleet runs each supervisor with its workload until ctx ends, and
// returns a function that waits for them all and checks that Run returned
// the context's error.
func runFleet(t *testing.T, ctx context.Context, sups []*supervisor.Supervisor, work func(i int, s *supervisor.Supervisor) func(context.Context) error) (wait func()) {
	var wg sync.WaitGroup
	for i, s := range sups {
		wg.Go(func() {
			if err := s.Run(ctx, work(i, s)); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Run of %s = %v, want the context's error", s.Holder(), err)
			}
		})
	}
	return wg.Wait
}

// TestFaultTerminateBackends runs three supervisors of one lease, each on a
// pool of its own, while a killer terminates one of their backends (pool
// connections and the LISTEN connection alike, found by application_name)
// every 50-200ms. Workloads hold the lease 100-300ms and hand it over, or
// are cancelled when a renewal cannot be confirmed in time.
func TestFaultTerminateBackends(t *testing.T) {
	const (
		runFor = 6 * time.Second
		ttl    = 600 * time.Millisecond
		app    = "pglease-proof-term"
	)
	url := pgtest.NewMigrated(t)
	installAudit(t, url)
	admin := openPool(t, url, 2, "pglease-proof-killer")
	f := newFleet("term")
	var sups []*supervisor.Supervisor
	var pools []*pgxpool.Pool
	for i := range 3 {
		p := openPool(t, url, 4, fmt.Sprintf("%s-%d", app, i))
		pools = append(pools, p)
		sups = append(sups, newSupervisor(t, p, f.name, supervisor.Config{
			TTL: ttl, RestartDelay: 20 * time.Millisecond, Holder: fmt.Sprintf("term-%d", i),
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	wait := runFleet(t, ctx, sups, func(i int, s *supervisor.Supervisor) func(context.Context) error {
		return f.workload(s, pools[i], time.Duration(100+rand.IntN(200))*time.Millisecond)
	})

	var killed, attempts atomic.Int64
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for ctx.Err() == nil {
			sleep(ctx, time.Duration(50+rand.IntN(150))*time.Millisecond)
			attempts.Add(1)
			var n int
			err := admin.QueryRow(context.Background(), `
				SELECT count(pg_terminate_backend(pid)) FROM (
					SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND application_name LIKE $1
					ORDER BY random() LIMIT 1) AS victim`, app+"-%").Scan(&n)
			if err == nil {
				killed.Add(int64(n))
			}
		}
	}()
	wait()
	<-killerDone
	res := f.check(t, admin)
	t.Logf("terminate: %d backends terminated in %s (%d attempts); %s", killed.Load(), runFor, attempts.Load(), res)
	if res.runs < 3 {
		t.Errorf("only %d workload runs in %s, want at least 3", res.runs, runFor)
	}
	if killed.Load() < 10 {
		t.Errorf("only %d backends terminated, want at least 10", killed.Load())
	}
}

// TestFaultProxy puts a fault proxy in front of one supervisor ("cut"),
// the other ("direct") reaching the server straight.
//
// blackhole: while cut leads, its traffic is blackholed (sockets stay
// open, bytes stop). Its workload must be cancelled before its lease
// expires on the server, direct must take over only after that, and once
// the traffic flows again a fenced write under cut's old fence must be
// refused. Three rounds.
//
// flapping: the proxy alternates blackholes of 0-250ms with 0-100ms of
// flow for several seconds while both compete for the lease (a slow,
// jittery network), holding it 50-200ms at a time.
func TestFaultProxy(t *testing.T) {
	t.Run("blackhole", func(t *testing.T) {
		t.Parallel()
		const ttl = 500 * time.Millisecond
		dbURL := pgtest.NewMigrated(t)
		installAudit(t, dbURL)
		proxy, proxied := newProxy(t, dbURL)
		cutPool := openPool(t, proxied, 4, "pglease-proof-cut")
		directPool := openPool(t, dbURL, 4, "pglease-proof-direct")
		f := newFleet("blackhole")
		var (
			mu     sync.Mutex
			events []supervisor.Event
		)
		observe := func(e supervisor.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
		cut := newSupervisor(t, cutPool, f.name, supervisor.Config{TTL: ttl, Holder: "cut", RestartDelay: 20 * time.Millisecond, Observer: observe})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cutDone := make(chan error, 1)
		go func() { cutDone <- cut.Run(ctx, f.workload(cut, cutPool, 0)) }()

		var (
			takeovers []time.Duration
			stuckTx   []int // cut's sessions idle in a transaction, 2 TTLs after the cut
			blocked   []int // direct's sessions waiting for a lock then
			stalled   int   // rounds where the connections had to be cut
		)
		for round := range 3 {
			waitFor(t, 30*time.Second, "cut to lead", cut.IsLeader)
			waitFor(t, 30*time.Second, "cut's workload to write", func() bool { return f.writes() > 0 })
			fence := cut.Fence()
			direct := newSupervisor(t, directPool, f.name, supervisor.Config{TTL: ttl, Holder: fmt.Sprintf("direct-%d", round), Observer: observe})
			dctx, dcancel := context.WithCancel(ctx)
			directDone := make(chan error, 1)
			go func() { directDone <- direct.Run(dctx, f.workload(direct, directPool, 0)) }()

			proxy.Blackhole()
			cutAt := time.Now()
			time.Sleep(2 * ttl)
			stuckTx = append(stuckTx, idleInTx(t, directPool, "pglease-proof-cut"))
			blocked = append(blocked, lockWaits(t, directPool, "pglease-proof-direct"))
			// A fenced write cut off between assert_held and its commit
			// keeps its FOR SHARE lock on the lease row for as long as the
			// server keeps the session, and every takeover waits for it.
			// On a real partition that lasts until the server's TCP
			// keepalive drops the session; here, after 10 TTLs, cut the
			// connections to stand for it.
			if !waitUntil(10*ttl, direct.IsLeader) {
				stalled++
				proxy.CutAll()
			}
			waitFor(t, time.Minute, "direct to take over", direct.IsLeader)
			takeovers = append(takeovers, time.Since(cutAt))
			waitFor(t, 30*time.Second, "cut's workload to return", func() bool { return !cut.IsLeader() })
			proxy.Resume()

			// The cut-off holder's fenced writes are refused now.
			wctx, wcancel := context.WithTimeout(context.Background(), callTimeout)
			err := pglease.WithFence(wctx, cutPool, f.name, fence, func(tx pgx.Tx) error {
				_, err := tx.Exec(wctx, writeSQL, f.name, fence, "cut")
				return err
			})
			wcancel()
			if !errors.Is(err, pglease.ErrLeaseLost) {
				t.Errorf("round %d: fenced write under cut's old fence %d after the takeover = %v, want ErrLeaseLost", round, fence, err)
			}
			// Hand the lease back to cut for the next round.
			dcancel()
			if err := <-directDone; !errors.Is(err, context.Canceled) {
				t.Errorf("direct Run = %v, want context.Canceled", err)
			}
		}
		cancel()
		if err := <-cutDone; !errors.Is(err, context.Canceled) {
			t.Errorf("cut Run = %v, want context.Canceled", err)
		}
		res := f.check(t, directPool)
		mu.Lock()
		lost := 0
		for _, e := range events {
			if e.Kind == supervisor.EventLost && e.Holder == "cut" {
				lost++
			}
		}
		mu.Unlock()
		if lost < 3 {
			t.Errorf("cut lost its lease %d times, want 3 (one per blackhole)", lost)
		}
		t.Logf("blackhole: 3 rounds, takeover %v after the cut (TTL %s); 2 TTLs after the cut, cut's sessions idle in a transaction %v and direct's sessions waiting for a lock %v; takeover stalled past 10 TTLs (connections then cut) in %d/3 rounds; cut's stale fenced writes refused 3/3; %s",
			roundAll(takeovers), ttl, stuckTx, blocked, stalled, res)
	})

	t.Run("flapping", func(t *testing.T) {
		t.Parallel()
		const (
			ttl    = 600 * time.Millisecond
			runFor = 6 * time.Second
		)
		dbURL := pgtest.NewMigrated(t)
		installAudit(t, dbURL)
		proxy, proxied := newProxy(t, dbURL)
		cutPool := openPool(t, proxied, 4, "pglease-proof-flap")
		directPool := openPool(t, dbURL, 4, "pglease-proof-direct")
		f := newFleet("flapping")
		sups := []*supervisor.Supervisor{
			newSupervisor(t, cutPool, f.name, supervisor.Config{TTL: ttl, Holder: "flap", RestartDelay: 20 * time.Millisecond}),
			newSupervisor(t, directPool, f.name, supervisor.Config{TTL: ttl, Holder: "direct", RestartDelay: 20 * time.Millisecond}),
		}
		pools := []*pgxpool.Pool{cutPool, directPool}
		ctx, cancel := context.WithTimeout(context.Background(), runFor)
		defer cancel()
		wait := runFleet(t, ctx, sups, func(i int, s *supervisor.Supervisor) func(context.Context) error {
			return f.workload(s, pools[i], time.Duration(50+rand.IntN(150))*time.Millisecond)
		})
		flaps := 0
		for ctx.Err() == nil {
			proxy.Blackhole()
			sleep(ctx, time.Duration(rand.IntN(250))*time.Millisecond)
			proxy.Resume()
			flaps++
			sleep(ctx, time.Duration(rand.IntN(100))*time.Millisecond)
		}
		proxy.Resume()
		wait()
		res := f.check(t, directPool)
		t.Logf("flapping: %d blackholes of 0-250ms in %s; %s", flaps, runFor, res)
		if res.runs < 3 {
			t.Errorf("only %d workload runs, want at least 3", res.runs)
		}
	})
}

// waitUntil polls cond every 5ms until it holds (true) or timeout passes
// (false).
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// idleInTx returns the number of sessions of application app that are idle
// in a transaction.
func idleInTx(t *testing.T, pool *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND state = 'idle in transaction'`, app).Scan(&n); err != nil {
		t.Errorf("pg_stat_activity: %v", err)
	}
	return n
}

// lockWaits returns the number of sessions of application app waiting
// for a lock.
func lockWaits(t *testing.T, pool *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
		t.Errorf("pg_stat_activity: %v", err)
	}
	return n
}

// writes returns the number of fenced writes that committed.
func (f *fleet) writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writesOK
}

// newProxy starts a fault proxy to the server of dbURL and returns it with
// dbURL pointed at it. The proxy is closed when the test ends.
func newProxy(t *testing.T, dbURL string) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return p, u.String()
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
