package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/purge"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
)

// Supervisor runs a workload only while it holds a lease (or a slot), and
// cancels it the moment that is no longer certain. Create it with NewLease
// or NewSlot; call Run once.
type Supervisor struct {
	cfg    Config
	name   string // lease name or slot scope
	kind   string // "lease" or "slot"
	log    *slog.Logger
	leader atomic.Bool
	fence  atomic.Int64
	pool   *pgxpool.Pool // non-nil when the database is a pool: purges run on it
	take   func(ctx context.Context) (held, error)
	idle   func() // closes the client's idle LISTEN connection
	m      *meters

	hmu  sync.Mutex
	work *working // the workload running now, for Healthy

	// On Run's goroutine only (the clients call back on it):
	current held    // the tenure held now, for events
	seen    refusal // the last holder reported while standing by

	// waiting, when set by a test, is called each time a standby has been
	// refused and is about to wait (listening for releases).
	waiting func()
	// exit ends the process for Config.HardStop: os.Exit, or a test's hook.
	exit func(code int)
}

// runKey is a keeper's lease or slot scope.
type runKey struct {
	keeper     *pglease.Keeper
	kind, name string
}

// running is the runKeys of the Runs with a Keeper running in this
// process.
var running runSet

// runSet is a set of runKeys, safe for concurrent use.
type runSet struct {
	mu   sync.Mutex
	keys map[runKey]struct{}
}

// add adds key and reports whether it was absent.
func (r *runSet) add(key runKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[key]; ok {
		return false
	}
	if r.keys == nil {
		r.keys = map[runKey]struct{}{}
	}
	r.keys[key] = struct{}{}
	return true
}

func (r *runSet) remove(key runKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.keys, key)
}

// held is a lease or slot held: both hold themselves with Run while a
// workload runs.
type held interface {
	Run(ctx context.Context, fn func(ctx context.Context) error) error
	Fence() int64
	Deadline() time.Time
}

// refusal identifies the holder a standby saw.
type refusal struct {
	holder string // empty for a full slot scope
	fence  int64
	value  string // the holder's value (Config.Value of a leader)
}

// NewLease returns a Supervisor that runs its workload while it holds
// lease name in the pglease schema of database: at most one supervisor of
// a name runs its workload at a time. With a *pgxpool.Pool, standbys wake
// at a release notification; with a *pgx.Conn or pgx.Tx, at the holder's
// expiry. It does not take ownership of database. It refuses an invalid
// name or Config with an error matching pglease.ErrInvalidArgument that
// names it.
func NewLease(database pglease.DB, name string, cfg Config) (*Supervisor, error) {
	if err := tenure.CheckText("name", name); err != nil {
		return nil, err
	}
	if len(cfg.Value) > pglease.MaxValueLen {
		return nil, tenure.Invalidf("Value must be at most %d bytes long, got %d bytes", pglease.MaxValueLen, len(cfg.Value))
	}
	s, err := newSupervisor(database, "lease", name, cfg)
	if err != nil {
		return nil, err
	}
	c, err := pglease.New(database, pglease.Config{
		Holder: s.cfg.Holder, SafetyMargin: s.cfg.SafetyMargin, Logger: s.cfg.Logger,
		RenewInterval: s.cfg.RenewInterval, RetryDelay: s.cfg.RetryDelay, StopTimeout: s.cfg.StopTimeout,
		OnStuck: s.stuck, OnRelease: s.released, OnWait: s.refused, Keeper: s.cfg.Keeper,
		MeterProvider: s.cfg.MeterProvider, MetricsByName: true,
	})
	if err != nil {
		return nil, err
	}
	s.take = func(ctx context.Context) (held, error) {
		return c.Acquire(ctx, name, s.cfg.TTL, pglease.WithValue(s.cfg.Value), pglease.WatchReleaseRequests())
	}
	s.idle = c.CloseIdle
	return s, nil
}

// NewSlot returns a Supervisor that runs its workload while it holds a
// slot of want.Scope (want.Units units of want.Capacity, as
// runslots.Client.Claim takes them): up to Capacity supervisors of a scope,
// claiming one unit each, run their workloads at once. Otherwise it is
// NewLease's supervisor, with a slot for a lease; Config.Value is refused.
func NewSlot(database pglease.DB, want runslots.Want, cfg Config) (*Supervisor, error) {
	if err := tenure.CheckClaim("want", want.Scope, want.Capacity, want.Units); err != nil {
		return nil, err
	}
	if cfg.Value != "" {
		return nil, tenure.Invalidf("Value is published with a lease only: use NewLease, or leave Value empty")
	}
	s, err := newSupervisor(database, "slot", want.Scope, cfg)
	if err != nil {
		return nil, err
	}
	c, err := runslots.New(database, runslots.Config{
		Holder: s.cfg.Holder, SafetyMargin: s.cfg.SafetyMargin, Logger: s.cfg.Logger,
		RenewInterval: s.cfg.RenewInterval, RetryDelay: s.cfg.RetryDelay, StopTimeout: s.cfg.StopTimeout,
		OnStuck: s.stuck, OnRelease: s.released, OnWait: s.refused, Keeper: s.cfg.Keeper,
		MeterProvider: s.cfg.MeterProvider, MetricsByName: true,
	})
	if err != nil {
		return nil, err
	}
	s.take = func(ctx context.Context) (held, error) { return c.Claim(ctx, want, s.cfg.TTL) }
	s.idle = c.CloseIdle
	return s, nil
}

// newSupervisor returns the supervisor of kind ("lease" or "slot") and
// name, with cfg's defaults applied; its caller sets take and idle.
func newSupervisor(database pglease.DB, kind, name string, cfg Config) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pool, _ := database.(*pgxpool.Pool)
	s := &Supervisor{cfg: cfg, kind: kind, name: name, pool: pool, exit: os.Exit}
	s.log = cfg.Logger.With(kind, name, "holder", cfg.Holder)
	s.m = newMeters(cfg.MeterProvider, kind, name)
	return s, nil
}

// IsLeader reports whether this supervisor holds the lease and runs the
// workload now. For health and status endpoints.
func (s *Supervisor) IsLeader() bool { return s.leader.Load() }

// Fence returns the fence of the tenure this supervisor holds, or 0 when it
// holds none.
func (s *Supervisor) Fence() int64 { return s.fence.Load() }

// Holder returns this supervisor's holder identity.
func (s *Supervisor) Holder() string { return s.cfg.Holder }

// Run stands by until it takes the lease, runs workload with a context of
// its own while renewing the lease (pglease.Lease.Run), and cancels that
// context as soon as: a renewal is refused; a renewal fails and no retry
// could finish before the local deadline; the local deadline passes while a
// renewal hangs; or ctx ends. After cancelling, it waits for workload to
// return (reporting it after StopTimeout, but never releasing the lease
// while it may still run), releases the lease if still held, and stands by
// again; or, when ctx has ended, returns ctx.Err(). What happens when
// workload returns on its own is set by Config.OnExit. Errors while
// standing by (database down) are logged and retried with capped backoff.
// No goroutine started by Run outlives it. The connection it LISTENs on
// while standing by is closed once it leads, and when Run returns (a
// Keeper's shared connection stays open); while it leads a lease, it
// observes the lease on one such connection, to hear a release request at
// once (EventReleaseRequested, docs/leadership.md). With a Keeper, Run returns an
// error matching pglease.ErrInvalidArgument at once while another Run in
// this process runs with the same keeper and lease (or scope): sharing the
// keeper's holder, both would hold the one tenure and run their workloads
// together.
func (s *Supervisor) Run(ctx context.Context, workload func(ctx context.Context) error) error {
	if k := s.cfg.Keeper; k != nil {
		key := runKey{keeper: k, kind: s.kind, name: s.name}
		if !running.add(key) {
			return tenure.Invalidf("another Run in this process runs %s %q with this Keeper (holder %q): "+
				"the supervisors of a keeper share its holder, so give each %s a keeper of its own", s.kind, s.name, k.Holder(), s.kind)
		}
		defer running.remove(key)
	}
	if s.pool != nil && s.cfg.PurgeEvery > 0 {
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { purge.Loop(pctx, s.pool, s.cfg.PurgeEvery, purge.DefaultFreeFor, s.log) })
		defer wg.Wait()
		defer stop()
	}
	defer s.idle()
	s.m.leading.Add(ctx, 0, s.m.base.Add...) // the series exists from the start
	for {
		t, err := s.standby(ctx)
		if err != nil {
			return err
		}
		s.idle() // a leader listens only for release requests, from before its grant
		if done, err := s.hold(ctx, t, workload); done {
			return err
		}
	}
}

// hold runs the workload under t until it must stand by again (done false)
// or Run must return err (done true).
func (s *Supervisor) hold(ctx context.Context, t held, workload func(context.Context) error) (done bool, err error) {
	log := s.log.With("fence", t.Fence())
	s.current = t
	s.fence.Store(t.Fence())
	s.leader.Store(true)
	s.m.lead(true, transAcquired)
	lost := false
	defer func() {
		s.leader.Store(false)
		s.fence.Store(0)
		s.current = nil
		tr := transReleased
		if lost {
			tr = transLost
		}
		s.m.lead(false, tr)
	}()
	log.Info("acquired; starting workload")
	s.observe(EventAcquired, nil)

	run := workload
	if s.cfg.OnExit == Restart {
		run = func(ctx context.Context) error {
			for {
				err := workload(ctx)
				if ctx.Err() != nil {
					return err
				}
				log.Info("workload returned; restarting it", "workload_err", err, "after", s.cfg.RestartDelay)
				if sleep(ctx, s.cfg.RestartDelay) != nil {
					return nil
				}
			}
		}
	}
	if s.cfg.HardStop > 0 {
		run = s.withHardStop(run, s.event(EventHardStop, nil))
	}
	var asked atomic.Bool
	run = s.onRequest(t, run, &asked)
	err = t.Run(ctx, s.watch(t, run))
	if cause, workErr, ok := lossOf(err); ok {
		lost = true
		log.Warn(s.kind+" lost; workload cancelled", "cause", cause, "workload_err", workErr)
		s.observe(EventLost, cause)
		return false, nil
	}
	switch {
	case ctx.Err() != nil: // ctx ended: shut down
		return true, ctx.Err()
	case asked.Load():
		log.Info("handed over on request; standing by", "workload_err", err, "after", s.cfg.RestartDelay)
		return false, sleep(ctx, s.cfg.RestartDelay)
	case s.cfg.OnExit == Return:
		log.Info("workload returned; released, returning", "workload_err", err)
		return true, err
	}
	log.Info("workload returned; released, standing by", "workload_err", err)
	if err := sleep(ctx, s.cfg.RestartDelay); err != nil {
		return true, err
	}
	return false, nil
}

// released reports Run's release of the held tenure.
func (s *Supervisor) released(err error) {
	if err != nil {
		s.log.Warn("release failed; the lease will expire on its own", "fence", s.current.Fence(), "err", err)
		return
	}
	s.log.Info("released", "fence", s.current.Fence())
	s.observe(EventReleased, nil)
}

// withHardStop returns workload with Config.HardStop armed: once its
// context is cancelled because the tenure ended (not by a shutdown), the
// process exits if workload has not returned HardStop later, after
// observing e (made on Run's goroutine) with the cause.
func (s *Supervisor) withHardStop(workload func(context.Context) error, e Event) func(context.Context) error {
	return func(ctx context.Context) error {
		fired := make(chan struct{}) // closed when the hard stop fires
		var mu sync.Mutex
		var timer *time.Timer
		stop := context.AfterFunc(ctx, func() {
			cause := context.Cause(ctx)
			if !tenureEnded(cause) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			timer = time.AfterFunc(s.cfg.HardStop, func() {
				close(fired)
				s.log.Error("workload has not returned after its tenure ended; exiting the process (Config.HardStop)",
					"hard_stop", s.cfg.HardStop, "cause", cause, "exit_code", HardStopExitCode)
				e.Err = cause
				s.cfg.observe(e)
				s.exit(HardStopExitCode)
			})
		})
		defer func() {
			stop()
			mu.Lock()
			defer mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
		}()
		return workload(ctx)
	}
}

// stuck reports a workload that has not returned StopTimeout after its
// context was cancelled.
func (s *Supervisor) stuck(cause error) { s.observe(EventStuck, cause) }

// standby waits until the lease is taken, or ctx ends. Each blocking
// attempt is bounded by the TTL, so that a hanging network is retried
// rather than waited on forever.
func (s *Supervisor) standby(ctx context.Context) (held, error) {
	s.seen = refusal{}
	var backoff time.Duration
	for {
		actx, cancel := context.WithTimeout(ctx, s.cfg.TTL)
		t, err := s.take(actx)
		cancel()
		switch {
		case err == nil:
			return t, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, pglease.ErrInvalidArgument):
			return nil, err
		case errors.Is(err, context.DeadlineExceeded): // the attempt's bound
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		wait := backoff/2 + rand.N(backoff/2)
		s.log.Warn("cannot reach the lease; retrying", "err", err, "retry_in", wait)
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// refused reports a refusal while standing by: a new holder is logged and
// observed once.
func (s *Supervisor) refused(err error) {
	var ref refusal
	var wait time.Duration
	if held, ok := errors.AsType[*pglease.HeldError](err); ok {
		ref, wait = refusal{holder: held.Holder, fence: held.Fence, value: held.Value}, held.ExpiresIn
	} else if full, ok := errors.AsType[*runslots.FullError](err); ok {
		wait = full.RetryIn
	}
	if ref != s.seen {
		s.seen = ref
		s.log.Info("standing by", "leader", ref.holder, "leader_fence", ref.fence, "leader_value", ref.value, "retry_in", wait)
		s.cfg.observe(Event{Kind: EventLeaderSeen, Name: s.name, Holder: ref.holder, Fence: ref.fence, Value: ref.value})
	}
	if s.waiting != nil {
		s.waiting()
	}
}

// observe reports an event of the held tenure.
func (s *Supervisor) observe(kind EventKind, err error) {
	s.cfg.observe(s.event(kind, err))
}

// event returns an Event of kind about the tenure held now, if any.
func (s *Supervisor) event(kind EventKind, err error) Event {
	e := Event{Kind: kind, Name: s.name, Holder: s.cfg.Holder, Err: err, Value: s.cfg.Value}
	if s.current != nil {
		e.Fence = s.current.Fence()
		if slot, ok := s.current.(*runslots.Slot); ok {
			e.Slot = slot.Number()
		}
	}
	return e
}

// sleep waits d or until ctx ends, returning ctx.Err() then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lossOf returns the cause and the workload's error of a tenure lost while
// the workload ran, as Lease.Run and Slot.Run report it.
func lossOf(err error) (cause, workErr error, ok bool) {
	if lost, ok := errors.AsType[*pglease.LostError](err); ok {
		return lost.Cause, lost.WorkErr, true
	}
	if lost, ok := errors.AsType[*runslots.LostError](err); ok {
		return lost.Cause, lost.WorkErr, true
	}
	return nil, nil, false
}
