package supervisor_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/internal/testing/testsignal"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
	"github.com/pglease/pglease/supervisor"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// interval is one run of a workload, on the test's monotonic clock.
type interval struct {
	holder     string
	fence      int64
	start, end time.Time
}

// recorder records workload runs and fails the test the instant two run
// at once.
type recorder struct {
	t       *testing.T
	mu      sync.Mutex
	running atomic.Int32
	runs    []interval
	want    int           // runs to record before enough closes
	enough  chan struct{} // closed once want runs are recorded
}

// newRecorder returns a recorder that signals once want runs are recorded.
func newRecorder(t *testing.T, want int) *recorder {
	return &recorder{t: t, want: want, enough: make(chan struct{})}
}

func (r *recorder) workload(s *supervisor.Supervisor, d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		if n := r.running.Add(1); n > 1 {
			r.t.Errorf("%d workloads running at once", n)
		}
		iv := interval{holder: s.Holder(), fence: s.Fence(), start: time.Now()}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
		iv.end = time.Now()
		r.running.Add(-1)
		r.mu.Lock()
		r.runs = append(r.runs, iv)
		if len(r.runs) == r.want {
			close(r.enough)
		}
		r.mu.Unlock()
		return nil
	}
}

// check asserts that no two runs overlap and that fences increase with
// every new tenure.
func (r *recorder) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := append([]interval(nil), r.runs...)
	sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1], runs[i]
		if cur.start.Before(prev.end) {
			r.t.Errorf("runs overlap: %s (fence %d) started %s before %s (fence %d) ended",
				cur.holder, cur.fence, prev.end.Sub(cur.start), prev.holder, prev.fence)
		}
		if cur.fence <= prev.fence {
			r.t.Errorf("fence went from %d to %d on takeover by %s", prev.fence, cur.fence, cur.holder)
		}
	}
}

// newSupervisor returns a supervisor of lease name on db, quiet.
func newSupervisor(t *testing.T, db pglease.DB, name string, cfg supervisor.Config) *supervisor.Supervisor {
	t.Helper()
	cfg.Logger = quiet
	s, err := supervisor.NewLease(db, name, cfg)
	if err != nil {
		t.Fatalf("supervisor.NewLease: %v", err)
	}
	return s
}

// newSlotSupervisor returns a supervisor of a slot of want on db, quiet.
func newSlotSupervisor(t *testing.T, db pglease.DB, want runslots.Want, cfg supervisor.Config) *supervisor.Supervisor {
	t.Helper()
	cfg.Logger = quiet
	s, err := supervisor.NewSlot(db, want, cfg)
	if err != nil {
		t.Fatalf("supervisor.NewSlot: %v", err)
	}
	return s
}

// runAll runs each supervisor until ctx ends and waits for all to return.
func runAll(t *testing.T, ctx context.Context, sups []*supervisor.Supervisor, work func(*supervisor.Supervisor) func(context.Context) error) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, s := range sups {
		wg.Go(func() {
			if err := s.Run(ctx, work(s)); !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		})
	}
	return &wg
}

// TestCompeting: two and five supervisors hand the lease around (each
// workload runs ~30 ms, then hands over); never two at once, fences rise.
func TestCompeting(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			rec := newRecorder(t, 4*n)
			var sups []*supervisor.Supervisor
			for range n {
				sups = append(sups, newSupervisor(t, pool, "scheduler", supervisor.Config{
					TTL: 2 * time.Second, RestartDelay: 10 * time.Millisecond,
				}))
			}
			ctx, cancel := context.WithCancel(context.Background())
			wg := runAll(t, ctx, sups, func(s *supervisor.Supervisor) func(context.Context) error {
				return rec.workload(s, 30*time.Millisecond)
			})
			select {
			case <-rec.enough:
			case <-time.After(20 * time.Second):
			}
			cancel()
			wg.Wait()
			rec.check()
			if len(rec.runs) < 4*n {
				t.Fatalf("only %d workload runs in 20s, want ≥ %d", len(rec.runs), 4*n)
			}
			t.Logf("%d supervisors: %d runs, fences %d..%d, no overlap", n, len(rec.runs), rec.runs[0].fence, rec.runs[len(rec.runs)-1].fence)
		})
	}
}

// TestGracefulHandover: the standby's workload starts within a few tens of
// milliseconds of the leader's release (NOTIFY path; the TTL is 30 s).
func TestGracefulHandover(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	const rounds = 10
	var latencies []time.Duration
	for i := range rounds {
		released := make(chan time.Time, 1)
		started := make(chan time.Time, 1)
		leaderCtx, stopLeader := context.WithCancel(context.Background())
		leader := newSupervisor(t, pool, fmt.Sprint("handover-", i), supervisor.Config{
			TTL: 30 * time.Second,
			Observer: func(e supervisor.Event) {
				if e.Kind == supervisor.EventReleased {
					released <- time.Now()
				}
			},
		})
		leading := make(chan struct{})
		leaderDone := make(chan error, 1)
		go func() {
			leaderDone <- leader.Run(leaderCtx, func(ctx context.Context) error {
				close(leading)
				<-ctx.Done()
				return nil
			})
		}()
		<-leading
		standby := newSupervisor(t, pool, fmt.Sprint("handover-", i), supervisor.Config{TTL: 30 * time.Second})
		waiting := testsignal.New[struct{}]()
		supervisor.SetWaitingHook(standby, func() { waiting.Send(struct{}{}) })
		standbyCtx, stopStandby := context.WithCancel(context.Background())
		standbyDone := make(chan error, 1)
		go func() {
			standbyDone <- standby.Run(standbyCtx, func(ctx context.Context) error {
				started <- time.Now()
				<-ctx.Done()
				return nil
			})
		}()
		waiting.Await(t, "the standby to stand by, listening for the release")
		stopLeader()
		if err := <-leaderDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("leader Run = %v, want context.Canceled", err)
		}
		var rel, st time.Time
		select {
		case rel = <-released:
		case <-time.After(10 * time.Second):
			t.Fatal("leader never released")
		}
		select {
		case st = <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("standby never started after the release")
		}
		latencies = append(latencies, st.Sub(rel))
		if standby.Fence() != 2 {
			t.Errorf("standby fence = %d, want 2", standby.Fence())
		}
		stopStandby()
		<-standbyDone
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("release → standby workload start over %d handovers: min %s, median %s, max %s",
		rounds, latencies[0], latencies[rounds/2], latencies[rounds-1])
	if latencies[rounds/2] > time.Second {
		t.Fatalf("median handover %s, want far below the 30s TTL (woken by NOTIFY)", latencies[rounds/2])
	}
}

// proxiedPool returns a pool to the test database through a fault proxy.
func proxiedPool(t *testing.T, dbURL string) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(faultproxy.PostgresTarget(cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	pcfg := cfg.Copy()
	p.Route(&pcfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		pool.Close()
	})
	return pool, p
}

// TestCrashCancelsBeforeExpiry: the leader's connection is blackholed, so
// its renewals hang. It must cancel its own workload before the server's
// expiry (a positive margin, measured), and a standby takes over after it.
func TestCrashCancelsBeforeExpiry(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewMigrated(t)
	pool := pgtest.Pool(t, dbURL)
	leaderPool, proxy := proxiedPool(t, dbURL)
	// The margin is the workload's: cancelAt is when the workload's
	// goroutine saw its context end, which a starved scheduler delays past
	// the supervisor's cancel (by 161 ms once, at a load average of 11
	// with the race detector, in make test-repeat, where the default
	// TTL/10 = 150 ms was too little). A deployment sizes SafetyMargin
	// the same way: above its worst scheduling delay.
	const ttl, margin = 1500 * time.Millisecond, 600 * time.Millisecond

	for round := range 3 {
		name := fmt.Sprint("crash-", round)
		cancelled := make(chan time.Time, 1)
		leading := make(chan struct{})
		leader := newSupervisor(t, leaderPool, name, supervisor.Config{TTL: ttl, SafetyMargin: margin})
		ctx, cancel := context.WithCancel(context.Background())
		leaderDone := make(chan error, 1)
		var runs atomic.Int32
		go func() {
			leaderDone <- leader.Run(ctx, func(wctx context.Context) error {
				if runs.Add(1) == 1 {
					close(leading)
				}
				<-wctx.Done()
				select {
				case cancelled <- time.Now():
				default:
				}
				return nil
			})
		}()
		<-leading
		time.Sleep(ttl / 2) // let a renewal or two happen (time is the subject)
		proxy.Blackhole()
		var cancelAt time.Time
		select {
		case cancelAt = <-cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("leader's workload not cancelled within 10s of the blackhole")
		}
		var expiresAt time.Time
		if err := pool.QueryRow(context.Background(),
			`SELECT expires_at FROM pglease.lease_status WHERE name = $1`, name).Scan(&expiresAt); err != nil {
			t.Fatal(err)
		}
		// Same machine: the server's clock is this clock.
		margin := expiresAt.Sub(cancelAt)
		t.Logf("round %d: workload cancelled %s before the server's expiry", round, margin)
		if margin <= 0 {
			t.Fatalf("workload cancelled %s AFTER the server's expiry", -margin)
		}

		standby := newSupervisor(t, pool, name, supervisor.Config{TTL: ttl})
		started := make(chan time.Time, 1)
		sctx, scancel := context.WithCancel(context.Background())
		sdone := make(chan error, 1)
		go func() {
			sdone <- standby.Run(sctx, func(wctx context.Context) error {
				started <- time.Now()
				<-wctx.Done()
				return nil
			})
		}()
		select {
		case at := <-started:
			if at.Before(expiresAt) {
				t.Fatalf("standby started %s before the leader's lease expired", expiresAt.Sub(at))
			}
			t.Logf("round %d: standby took over %s after expiry", round, at.Sub(expiresAt))
		case <-time.After(10 * time.Second):
			t.Fatal("standby never took over")
		}
		if standby.Fence() <= 1 {
			t.Fatalf("standby fence %d, want > leader's", standby.Fence())
		}
		scancel()
		<-sdone
		cancel()
		proxy.Resume()
		<-leaderDone
	}
}

// TestRefusedRenewalCancels: an operator's force release makes the next
// renewal refused; the workload is cancelled at that renewal.
func TestRefusedRenewalCancels(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	lostEvent := make(chan struct{}, 1)
	s := newSupervisor(t, pool, "refused", supervisor.Config{
		TTL: 3 * time.Second, RenewInterval: 100 * time.Millisecond,
		Observer: func(e supervisor.Event) {
			if e.Kind == supervisor.EventLost {
				select {
				case lostEvent <- struct{}{}:
				default:
				}
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{}, 1)
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(wctx context.Context) error {
			select {
			case leading <- struct{}{}:
			default:
			}
			<-wctx.Done()
			select {
			case cause <- context.Cause(wctx):
			default:
			}
			return nil
		})
	}()
	<-leading
	forced := time.Now()
	if _, released, err := pgleaseadmin.ForceRelease(context.Background(), pool, "refused"); err != nil || !released {
		t.Fatalf("ForceRelease: released %t, %v", released, err)
	}
	select {
	case err := <-cause:
		took := time.Since(forced)
		t.Logf("workload cancelled %s after the force release (cause: %v)", took, err)
		if !errors.Is(err, pglease.ErrLeaseLost) {
			t.Fatalf("cancel cause = %v, want ErrLeaseLost", err)
		}
		if took > 2*time.Second {
			t.Fatalf("cancelled %s after the refusal became possible, want about one RenewInterval (100ms)", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("workload not cancelled after a refused renewal")
	}
	select {
	case <-lostEvent:
	case <-time.After(10 * time.Second):
		t.Fatal("no EventLost")
	}
	cancel()
	<-done
}

// TestParentCancelReleases: cancelling Run's context stops the workload,
// releases the lease and returns ctx.Err().
func TestParentCancelReleases(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	s := newSupervisor(t, pool, "shutdown", supervisor.Config{TTL: 30 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(wctx context.Context) error {
			close(leading)
			<-wctx.Done()
			return nil
		})
	}()
	<-leading
	if !s.IsLeader() || s.Fence() != 1 {
		t.Fatalf("IsLeader %v, Fence %d; want true, 1", s.IsLeader(), s.Fence())
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if s.IsLeader() || s.Fence() != 0 {
		t.Fatalf("after Run: IsLeader %v, Fence %d; want false, 0", s.IsLeader(), s.Fence())
	}
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT state FROM pglease.lease_status WHERE name = 'shutdown'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "free" {
		t.Fatalf("lease state after shutdown = %s, want free (released)", state)
	}
}

// TestStuckWorkloadReported: a workload that ignores its context is
// reported after StopTimeout; the lease is kept (renewed) until it returns,
// then released.
func TestStuckWorkloadReported(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	stuck := make(chan error, 1)
	s := newSupervisor(t, pool, "stuck", supervisor.Config{
		TTL: time.Second, StopTimeout: 300 * time.Millisecond,
		Observer: func(e supervisor.Event) {
			if e.Kind == supervisor.EventStuck {
				stuck <- e.Err
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	unblock := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(context.Context) error {
			close(leading)
			<-unblock // ignores its context
			return nil
		})
	}()
	<-leading
	cancelled := time.Now()
	cancel()
	select {
	case err := <-stuck:
		t.Logf("stuck workload reported %s after cancel (cause %v)", time.Since(cancelled), err)
	case <-time.After(5 * time.Second):
		t.Fatal("stuck workload not reported")
	}
	// Well past the 1 s TTL, the lease must still be held: renewals go on
	// while the workload may run.
	time.Sleep(1500 * time.Millisecond)
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT state FROM pglease.lease_status WHERE name = 'stuck'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "held" {
		t.Fatalf("lease state while the stuck workload runs = %s, want held", state)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the workload still runs", err)
	default:
	}
	close(unblock)
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// TestHardStop: with Config.HardStop, a workload that ignores its
// cancelled context after a refused renewal makes the process exit
// (status 70, EventHardStop just before); a shutdown never does.
func TestHardStop(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	events := make(chan supervisor.Event, 4)
	observe := func(e supervisor.Event) {
		if e.Kind == supervisor.EventHardStop || e.Kind == supervisor.EventStuck {
			events <- e
		}
	}
	s := newSupervisor(t, pool, "hard-stop", supervisor.Config{
		TTL: 3 * time.Second, RenewInterval: 100 * time.Millisecond,
		HardStop: 50 * time.Millisecond, StopTimeout: 10 * time.Second, Observer: observe,
	})
	exited := make(chan int, 1)
	supervisor.SetExitHook(s, func(code int) { exited <- code })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	unblock := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(context.Context) error {
			close(leading)
			<-unblock // ignores its context
			return nil
		})
	}()
	<-leading
	if _, _, err := pgleaseadmin.ForceRelease(context.Background(), pool, "hard-stop"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	select {
	case e := <-events:
		if e.Kind != supervisor.EventHardStop || !errors.Is(e.Err, pglease.ErrLeaseLost) || e.Fence != 1 {
			t.Fatalf("event %v (fence %d, err %v), want EventHardStop of fence 1 caused by ErrLeaseLost", e.Kind, e.Fence, e.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no EventHardStop after the refused renewal")
	}
	select {
	case code := <-exited:
		if code != supervisor.HardStopExitCode {
			t.Fatalf("exit code %d, want %d", code, supervisor.HardStopExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process was not stopped")
	}
	close(unblock)
	cancel()
	<-done

	// A shutdown is not a lost tenure: the stuck report comes (after
	// StopTimeout), the exit does not.
	s2 := newSupervisor(t, pool, "hard-stop-shutdown", supervisor.Config{
		TTL: 3 * time.Second, HardStop: 50 * time.Millisecond,
		StopTimeout: 250 * time.Millisecond, Observer: observe,
	})
	supervisor.SetExitHook(s2, func(code int) { exited <- code })
	ctx2, cancel2 := context.WithCancel(context.Background())
	leading2 := make(chan struct{})
	unblock2 := make(chan struct{})
	go func() {
		done <- s2.Run(ctx2, func(context.Context) error {
			close(leading2)
			<-unblock2
			return nil
		})
	}()
	<-leading2
	cancel2()
	select {
	case e := <-events:
		if e.Kind != supervisor.EventStuck {
			t.Fatalf("event %v after a shutdown, want EventStuck only", e.Kind)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no EventStuck after the shutdown")
	}
	select {
	case code := <-exited:
		t.Fatalf("a shutdown stopped the process (exit %d)", code)
	default:
	}
	close(unblock2)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after shutdown = %v, want context.Canceled", err)
	}
}

func TestExitPolicies(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	boom := errors.New("boom")

	// Return: Run returns the workload's error and the lease is released.
	s := newSupervisor(t, pool, "exit-return", supervisor.Config{TTL: 5 * time.Second, OnExit: supervisor.Return})
	if err := s.Run(context.Background(), func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Run with OnExit Return = %v, want the workload's error", err)
	}

	// Restart: the workload runs again under the same tenure.
	s = newSupervisor(t, pool, "exit-restart", supervisor.Config{
		TTL: 5 * time.Second, OnExit: supervisor.Restart, RestartDelay: 10 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	fences := make(chan int64, 10)
	err := s.Run(ctx, func(context.Context) error {
		fences <- s.Fence()
		if runs.Add(1) == 3 {
			cancel()
		}
		return boom
	})
	if err != context.Canceled {
		t.Fatalf("Run with OnExit Restart = %v, want context.Canceled", err)
	}
	close(fences)
	for f := range fences {
		if f != 1 {
			t.Fatalf("restarted workload ran with fence %d, want the same tenure (1)", f)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	cases := []struct {
		name string
		cfg  supervisor.Config
		want string
	}{
		{"negative ttl", supervisor.Config{TTL: -time.Second}, "TTL must not be negative"},
		{"renew too slow", supervisor.Config{TTL: time.Second, RenewInterval: 950 * time.Millisecond}, "RenewInterval"},
		{"margin too big", supervisor.Config{TTL: time.Second, SafetyMargin: time.Second}, "SafetyMargin"},
		{"ttl too long", supervisor.Config{TTL: 25 * time.Hour}, "TTL must be from 1µs to 24h0m0s"},
		{"bad policy", supervisor.Config{OnExit: 7}, "OnExit"},
		{"retry slower than renewals", supervisor.Config{TTL: time.Second, RetryDelay: time.Hour}, "RetryDelay"},
		{"holder too long", supervisor.Config{Holder: strings.Repeat("h", 300)}, "Holder must be 1 to"},
		{"hard stop past the margin", supervisor.Config{TTL: time.Second, HardStop: 100 * time.Millisecond}, "HardStop"},
		{"negative hard stop", supervisor.Config{HardStop: -time.Second}, "HardStop must not be negative"},
	}
	for _, tc := range cases {
		_, err := supervisor.NewLease(pool, "a", tc.cfg)
		if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewLease = %v, want ErrInvalidArgument mentioning %q", tc.name, err, tc.want)
		}
		_, err = supervisor.NewSlot(pool, runslots.Want{Scope: "a", Capacity: 1}, tc.cfg)
		if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewSlot = %v, want ErrInvalidArgument mentioning %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name, lease string
		want        runslots.Want
		cfg         supervisor.Config
		err         string
	}{
		{"empty name", "", runslots.Want{Scope: "a", Capacity: 1}, supervisor.Config{}, "name must be 1 to"},
		{"name with NUL", "a\x00b", runslots.Want{Scope: "a", Capacity: 1}, supervisor.Config{}, "name must not contain NUL"},
		{"value too long", "a", runslots.Want{Scope: "a", Capacity: 1}, supervisor.Config{Value: strings.Repeat("v", pglease.MaxValueLen+1)}, "Value must be at most"},
		{"scope not UTF-8", "a", runslots.Want{Scope: "a\xffb", Capacity: 1}, supervisor.Config{}, "want.Scope must be valid UTF-8"},
		{"no capacity", "a", runslots.Want{Scope: "b"}, supervisor.Config{}, "want.Capacity must be from 1 to"},
		{"capacity too large", "a", runslots.Want{Scope: "b", Capacity: 2_000_000}, supervisor.Config{}, "want.Capacity must be from 1 to 1000000"},
		{"units over the capacity", "a", runslots.Want{Scope: "b", Capacity: 2, Units: 3}, supervisor.Config{}, "want.Units must be from 1 to want.Capacity (2)"},
		{"value of a slot", "a", runslots.Want{Scope: "b", Capacity: 1}, supervisor.Config{Value: "v"}, "Value is published with a lease only"},
	} {
		_, lerr := supervisor.NewLease(pool, tc.lease, tc.cfg)
		_, serr := supervisor.NewSlot(pool, tc.want, tc.cfg)
		if err := cmp.Or(lerr, serr); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: NewLease = %v, NewSlot = %v, want ErrInvalidArgument mentioning %q", tc.name, lerr, serr, tc.err)
		}
	}
}

// TestSlotVariant: five supervisors share a scope of capacity 2: never more
// than two workloads at once, and two do run together. Until two have run
// together, a workload waits for a second one (which only a second slot
// lets start), so that the pairing does not depend on how closely the
// supervisors' claims follow each other (behind a pooler, a refused claim
// sleeps until the holder's expiry).
func TestSlotVariant(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var running, peak atomic.Int32
	var runs atomic.Int32
	enough := make(chan struct{}) // closed at the 20th run
	paired := make(chan struct{}) // closed when two workloads run at once
	var pairOnce sync.Once
	var sups []*supervisor.Supervisor
	for range 5 {
		sups = append(sups, newSlotSupervisor(t, pool, runslots.Want{Scope: "gpu-pool", Capacity: 2}, supervisor.Config{
			TTL: 2 * time.Second, RestartDelay: 10 * time.Millisecond,
		}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	wg := runAll(t, ctx, sups, func(s *supervisor.Supervisor) func(context.Context) error {
		return func(ctx context.Context) error {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if n > 2 {
				t.Errorf("%d workloads running in a scope of capacity 2", n)
			}
			if n == 2 {
				pairOnce.Do(func() { close(paired) })
			}
			if runs.Add(1) == 20 {
				close(enough)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-paired:
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			return nil
		}
	})
	select {
	case <-enough:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for 20 slot-guarded runs")
	}
	cancel()
	wg.Wait()
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak.Load())
	}
	t.Logf("%d runs, peak %d of capacity 2", runs.Load(), peak.Load())
}
