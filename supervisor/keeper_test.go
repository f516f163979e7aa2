package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
	"github.com/pglease/pglease/supervisor"
)

// renewCounter is a pgx tracer that counts single renewals and
// renew_holder rounds, and signals every round that ends.
type renewCounter struct {
	single, rounds atomic.Int64
	round          chan struct{} // receives after each round (dropped when full)
}

type renewKind struct{}

func (c *renewCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(data.SQL, "name: LeaseRenew"), strings.Contains(data.SQL, "name: SlotRenew"):
		c.single.Add(1)
	case strings.Contains(data.SQL, "name: HolderRenew"):
		return context.WithValue(ctx, renewKind{}, true)
	}
	return ctx
}

func (c *renewCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(renewKind{}) == nil || data.Err != nil {
		return
	}
	c.rounds.Add(1)
	select {
	case c.round <- struct{}{}:
	default:
	}
}

// keptPool returns a pool on a fresh migrated database whose renewal
// calls are counted, and a running keeper with ttl on it.
func keptPool(t *testing.T, ttl time.Duration) (*pgxpool.Pool, *renewCounter, *pglease.Keeper) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.ClientURL(t, pgtest.NewMigrated(t)))
	if err != nil {
		t.Fatal(err)
	}
	counter := &renewCounter{round: make(chan struct{}, 1)}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counter, startKeeper(t, pool, ttl)
}

// startKeeper runs a keeper with ttl on database until the test ends.
func startKeeper(t *testing.T, database pglease.DB, ttl time.Duration) *pglease.Keeper {
	t.Helper()
	k, err := pglease.NewKeeper(database, pglease.KeeperConfig{TTL: ttl, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Keeper.Serve = %v, want context.Canceled", err)
		}
	})
	return k
}

// waitRounds waits for n more keeper rounds.
func waitRounds(t *testing.T, c *renewCounter, n int) {
	t.Helper()
	for range n {
		select {
		case <-c.round:
		case <-time.After(30 * time.Second):
			t.Fatalf("no keeper round within 30s (%d so far)", c.rounds.Load())
		}
	}
}

// TestKeeperSupervisors: twenty supervisors on one keeper (a process
// supervising twenty shards) all lead past several TTLs, with no renewal
// call of their own, only the keeper's rounds; a shutdown releases every
// lease and leaves the keeper empty.
func TestKeeperSupervisors(t *testing.T) {
	t.Parallel()
	// A TTL of 3 s: at 1 s, a round late by a third of a second beside
	// CPU hogs (load average 11) cost every supervisor its lease once; a
	// loss there is right, and this test asks for none.
	const n, ttl = 20, 3 * time.Second
	pool, counter, k := keptPool(t, ttl)
	var leading, cancelled atomic.Int32
	allLead := make(chan struct{})
	var sups []*supervisor.Supervisor
	for i := range n {
		sups = append(sups, newSupervisor(t, pool, fmt.Sprintf("shard/%d", i), supervisor.Config{Keeper: k}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wg := runAll(t, ctx, sups, func(s *supervisor.Supervisor) func(context.Context) error {
		return func(wctx context.Context) error {
			if leading.Add(1) == n {
				close(allLead)
			}
			<-wctx.Done()
			if ctx.Err() == nil {
				cancelled.Add(1)
				t.Errorf("%s: workload cancelled while the keeper runs: %v", s.Holder(), context.Cause(wctx))
			}
			return nil
		}
	})
	select {
	case <-allLead:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d supervisors lead after 30s", leading.Load(), n)
	}
	allLeadAt := time.Now()
	if got := k.Len(); got != n {
		t.Fatalf("Keeper.Len = %d, want %d", got, n)
	}
	// Seven rounds, a third of the TTL apart: every lease outlives its TTL
	// half as long again on the keeper's renewals alone.
	select {
	case <-counter.round: // a round that may have ended before allLead
	default:
	}
	start := counter.rounds.Load()
	waitRounds(t, counter, 7)
	if since := time.Since(allLeadAt); since < 3*ttl/2 {
		t.Fatalf("seven keeper rounds took %s, want at least 1.5×TTL (%s): the rounds are not a third of the TTL apart", since, 3*ttl/2)
	}
	var live int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pglease.lease_status WHERE state = 'held' AND holder = $1`, k.Holder()).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live != n {
		t.Fatalf("%d leases held by the keeper's holder on the server, want %d", live, n)
	}
	if got := counter.single.Load(); got != 0 {
		t.Fatalf("%d single renewals, want 0: the keeper renews", got)
	}
	t.Logf("%d supervisors kept by %d rounds (one call each), 0 single renewals", n, counter.rounds.Load()-start)
	cancel()
	wg.Wait()
	if cancelled.Load() != 0 {
		t.Fatalf("%d workloads cancelled before the shutdown", cancelled.Load())
	}
	if got := k.Len(); got != 0 {
		t.Fatalf("Keeper.Len after the shutdown = %d, want 0 (released)", got)
	}
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pglease.lease_status WHERE state <> 'free'`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live != 0 {
		t.Fatalf("%d leases not free after the shutdown, want 0", live)
	}
}

// TestKeeperSupervisorLost: a force release of one kept supervisor's lease
// cancels its workload with ErrLeaseLost at the keeper's next round, and
// only its; it then takes the lease again with the next fence.
func TestKeeperSupervisorLost(t *testing.T) {
	t.Parallel()
	pool, _, k := keptPool(t, 3*time.Second)
	type run struct {
		fence int64
		cause error
	}
	runs := map[string]chan run{"lost": make(chan run, 4), "kept": make(chan run, 4)}
	var sups []*supervisor.Supervisor
	for _, name := range []string{"lost", "kept"} {
		sups = append(sups, newSupervisor(t, pool, name, supervisor.Config{Keeper: k, RestartDelay: time.Millisecond}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := map[string]chan int64{"lost": make(chan int64, 4), "kept": make(chan int64, 4)}
	wg := runAll(t, ctx, sups, func(s *supervisor.Supervisor) func(context.Context) error {
		name := "lost"
		if s == sups[1] {
			name = "kept"
		}
		return func(wctx context.Context) error {
			started[name] <- s.Fence()
			<-wctx.Done()
			runs[name] <- run{fence: s.Fence(), cause: context.Cause(wctx)}
			return nil
		}
	})
	recvFence := func(name string) int64 {
		select {
		case f := <-started[name]:
			return f
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no workload start within 30s", name)
			return 0
		}
	}
	first := recvFence("lost")
	recvFence("kept")
	forced := time.Now()
	if _, released, err := pgleaseadmin.ForceRelease(context.Background(), pool, "lost"); err != nil || !released {
		t.Fatalf("ForceRelease: released %t, %v", released, err)
	}
	select {
	case r := <-runs["lost"]:
		t.Logf("workload cancelled %s after the force release: %v", time.Since(forced), r.cause)
		if !errors.Is(r.cause, pglease.ErrLeaseLost) || r.fence != first {
			t.Fatalf("cancelled run: fence %d, cause %v; want fence %d, ErrLeaseLost", r.fence, r.cause, first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the force-released supervisor's workload was not cancelled within 30s")
	}
	if again := recvFence("lost"); again != first+1 {
		t.Fatalf("after the loss the supervisor led with fence %d, want %d", again, first+1)
	}
	select {
	case r := <-runs["kept"]:
		t.Fatalf("the other supervisor's workload was cancelled: %v", r.cause)
	default:
	}
	cancel()
	wg.Wait()
}

// TestKeeperSupervisorHandover: supervisors on keepers of their own hand a
// lease over: the leader's workload returns, it releases (leaving its
// keeper), and the standby, woken by the release, leads with the next
// fence.
func TestKeeperSupervisorHandover(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	keepers := []*pglease.Keeper{startKeeper(t, pool, 10*time.Second), startKeeper(t, pool, 10*time.Second)}
	var fences []int64
	var mu sync.Mutex
	led := make(chan *supervisor.Supervisor, 2)
	var sups []*supervisor.Supervisor
	for _, k := range keepers {
		sups = append(sups, newSupervisor(t, pool, "handover", supervisor.Config{Keeper: k, OnExit: supervisor.Return}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range sups {
		wg.Go(func() {
			err := s.Run(ctx, func(context.Context) error {
				mu.Lock()
				fences = append(fences, s.Fence())
				mu.Unlock()
				led <- s
				return nil
			})
			if err != nil {
				t.Errorf("Run = %v, want nil (OnExit Return)", err)
			}
		})
	}
	wg.Wait()
	close(led)
	var holders []string
	for s := range led {
		holders = append(holders, s.Holder())
	}
	if len(fences) != 2 || fences[1] != fences[0]+1 || holders[0] == holders[1] {
		t.Fatalf("runs: fences %v by %v; want two leaders, the second with the next fence", fences, holders)
	}
	for i, k := range keepers {
		if k.Len() != 0 {
			t.Errorf("keeper %d keeps %d tenures after its supervisor released, want 0", i, k.Len())
		}
	}
}

// TestKeeperSharedName: two supervisors of one keeper on one name would
// share the tenure (one holder), so the second Run is refused while the
// first runs, and accepted after it returned.
func TestKeeperSharedName(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	k := startKeeper(t, pool, 5*time.Second)
	first := newSupervisor(t, pool, "one", supervisor.Config{Keeper: k})
	second := newSupervisor(t, pool, "one", supervisor.Config{Keeper: k})
	other := newSlotSupervisor(t, pool, runslots.Want{Scope: "one", Capacity: 2}, supervisor.Config{Keeper: k, OnExit: supervisor.Return})
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- first.Run(ctx, func(wctx context.Context) error { close(leading); <-wctx.Done(); return nil })
	}()
	<-leading
	err := second.Run(context.Background(), func(context.Context) error {
		t.Error("the second supervisor of the name ran its workload")
		return nil
	})
	if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), `lease "one" with this Keeper`) {
		t.Fatalf("second Run = %v, want ErrInvalidArgument naming the lease and the keeper", err)
	}
	// A slot scope of the same name is another tenure: it runs.
	if err := other.Run(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Run of a slot scope with the lease's name = %v, want nil", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Run = %v, want context.Canceled", err)
	}
	ran := make(chan struct{})
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-ran
		cancel()
	}()
	if err := second.Run(ctx, func(wctx context.Context) error { close(ran); <-wctx.Done(); return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Run after the first returned = %v, want context.Canceled", err)
	}
}

// TestKeeperConfigValidation: settings a keeper decides are refused, with
// errors naming the field.
func TestKeeperConfigValidation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	k, err := pglease.NewKeeper(pool, pglease.KeeperConfig{Holder: "k", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  supervisor.Config
		want string
	}{
		{"other holder", supervisor.Config{Keeper: k, Holder: "h"}, `Holder "h" differs from the Keeper's holder "k"`},
		{"renew interval", supervisor.Config{Keeper: k, RenewInterval: time.Second}, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{"retry delay", supervisor.Config{Keeper: k, RetryDelay: time.Second}, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{"ttl over the keeper's", supervisor.Config{Keeper: k, TTL: 3 * time.Second}, "TTL 3s is longer than the Keeper's TTL 2s"},
		{"margin leaving no room", supervisor.Config{Keeper: k, SafetyMargin: 1900 * time.Millisecond}, "Keeper"},
	}
	for _, tc := range cases {
		_, err := supervisor.NewLease(pool, "a", tc.cfg)
		if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalidArgument mentioning %q", tc.name, err, tc.want)
		}
	}
	s, err := supervisor.NewLease(pool, "a", supervisor.Config{Keeper: k})
	if err != nil {
		t.Fatalf("New with a Keeper and defaults = %v", err)
	}
	if s.Holder() != "k" {
		t.Fatalf("Holder = %q, want the keeper's (k)", s.Holder())
	}
}

// TestKeeperStoppedCancelsBeforeExpiry: when the keeper stops renewing, a
// kept supervisor's workload is cancelled at its local deadline, while the
// server still has the lease (the server's clock says so), and the lease is
// not released while the workload runs.
func TestKeeperStoppedCancelsBeforeExpiry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	k, err := pglease.NewKeeper(pool, pglease.KeeperConfig{TTL: 3 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stopKeeper := context.WithCancel(context.Background())
	kept := make(chan error, 1)
	go func() { kept <- k.Serve(kctx) }()
	defer stopKeeper()
	// A wide margin: the check reads the server's clock after the
	// cancellation, so a slow scheduler must not eat it.
	s := newSupervisor(t, pool, "unkept", supervisor.Config{Keeper: k, SafetyMargin: 1500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leading := make(chan struct{}, 1)
	type verdict struct {
		cause error
		left  time.Duration // server's expires_at minus its clock, at the cancellation
	}
	got := make(chan verdict, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(wctx context.Context) error {
			select {
			case leading <- struct{}{}:
			default: // led again after the loss
				<-wctx.Done()
				return nil
			}
			<-wctx.Done()
			var left time.Duration
			err := pool.QueryRow(context.Background(), `SELECT expires_at - clock_timestamp() FROM pglease.leases
				WHERE name = 'unkept' AND holder = $1`, s.Holder()).Scan(&left)
			if err != nil {
				t.Errorf("read the lease at the cancellation: %v", err)
			}
			got <- verdict{context.Cause(wctx), left}
			return nil
		})
	}()
	<-leading
	stopKeeper()
	if err := <-kept; !errors.Is(err, context.Canceled) {
		t.Fatalf("Keeper.Serve = %v, want context.Canceled", err)
	}
	v := <-got
	t.Logf("cancelled with %s left on the server: %v", v.left, v.cause)
	if !errors.Is(v.cause, pglease.ErrLeaseLost) {
		t.Fatalf("cancel cause = %v, want ErrLeaseLost (the deadline passed)", v.cause)
	}
	if v.left <= 0 {
		t.Fatalf("workload cancelled %s after the server's expiry, want before it", -v.left)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// countingListener is a pool whose LISTEN connections are counted.
type countingListener struct {
	*pgxpool.Pool
	dials atomic.Int32
}

func (l *countingListener) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	l.dials.Add(1)
	return pgx.ConnectConfig(ctx, l.Config().ConnConfig.Copy())
}

// TestKeeperSharedListen: ten supervisors of one keeper standing by on
// ten leases held elsewhere wait on one LISTEN connection, and each wakes
// at its own lease's release, long before the holder's expiry.
func TestKeeperSharedListen(t *testing.T) {
	t.Parallel()
	const n = 10
	db := &countingListener{Pool: pgtest.NewDirectPool(t)}
	k := startKeeper(t, db, 5*time.Second)
	owner, err := pglease.New(db.Pool, pglease.Config{Holder: "owner", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held []*pglease.Lease
	seen := make(chan struct{}, n)
	started := make(chan string, n)
	var sups []*supervisor.Supervisor
	for i := range n {
		name := fmt.Sprintf("shard/%d", i)
		l, err := owner.TryAcquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		sups = append(sups, newSupervisor(t, db, name, supervisor.Config{Keeper: k, Observer: func(e supervisor.Event) {
			if e.Kind == supervisor.EventLeaderSeen {
				seen <- struct{}{}
			}
		}}))
	}
	wg := runAll(t, ctx, sups, func(s *supervisor.Supervisor) func(context.Context) error {
		return func(wctx context.Context) error {
			started <- s.Holder()
			<-wctx.Done()
			return nil
		}
	})
	for i := range n {
		select {
		case <-seen:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d supervisors stand by after 30s", i, n)
		}
	}
	if got := db.dials.Load(); got != 1 {
		t.Fatalf("%d LISTEN connections for %d standbys of one keeper, want 1", got, n)
	}
	released := time.Now()
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d supervisors led within 30s of the releases (the TTL is a minute): a wake-up was lost", i, n)
		}
	}
	t.Logf("%d standbys on 1 LISTEN connection led %s after the releases", n, time.Since(released))
	cancel()
	wg.Wait()
}
