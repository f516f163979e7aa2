package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/keep"
	"github.com/pglease/pglease/internal/purge"
	"github.com/pglease/pglease/pglease"
)

// Supervisor runs a workload only while it holds a lease (or a slot), and
// cancels it the moment that is no longer certain. Create it with New; call
// Run once.
type Supervisor struct {
	cfg    Config
	guard  guard
	name   string // lease name or slot scope
	log    *slog.Logger
	leader atomic.Bool
	fence  atomic.Int64
	pool   *pgxpool.Pool // non-nil when the database is a pool: purges run on it

	// waiting, when set by a test, is called each time a standby has been
	// refused and is about to wait (listening for releases).
	waiting func()
}

// New returns a Supervisor that keeps its lease (or slot) in the pglease
// schema of database. With a *pgxpool.Pool, standbys wake at a release
// notification; with a *pgx.Conn or pgx.Tx, at the holder's expiry. It does
// not take ownership of database.
func New(database pglease.DB, cfg Config) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pool, _ := database.(*pgxpool.Pool)
	s := &Supervisor{cfg: cfg, pool: pool}
	if cfg.Scope != "" {
		s.name = cfg.Scope
		s.guard, err = newSlotGuard(database, pool, cfg)
	} else {
		s.name = cfg.Name
		s.guard, err = newLeaseGuard(database, pool, cfg)
	}
	if err != nil {
		return nil, err
	}
	kind := "lease"
	if cfg.Scope != "" {
		kind = "slot"
	}
	s.log = cfg.Logger.With(kind, s.name, "holder", cfg.Holder)
	return s, nil
}

func newLeaseGuard(database pglease.DB, pool *pgxpool.Pool, cfg Config) (guard, error) {
	c, err := pglease.New(database, pglease.Config{Holder: cfg.Holder, SafetyMargin: cfg.SafetyMargin})
	if err != nil {
		return nil, err
	}
	return &leaseGuard{c: c, pool: pool, name: cfg.Name, ttl: cfg.TTL}, nil
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
// its own while renewing the lease, and cancels that context as soon as:
// a renewal is refused; a renewal fails and no retry could finish before
// the local deadline; the local deadline passes while a renewal hangs; or
// ctx ends. After cancelling, it waits for workload to return (reporting it
// after StopTimeout, but never releasing the lease while it may still run),
// releases the lease if still held, and stands by again; or, when ctx has
// ended, returns ctx.Err(). What happens when workload returns on its own
// is set by Config.OnExit. Errors while standing by (database down) are
// logged and retried with capped backoff. No goroutine started by Run
// outlives it.
func (s *Supervisor) Run(ctx context.Context, workload func(ctx context.Context) error) error {
	if s.pool != nil && s.cfg.PurgeEvery > 0 {
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { purge.Loop(pctx, s.pool, s.cfg.PurgeEvery, purge.DefaultFreeFor, s.log) })
		defer wg.Wait()
		defer stop()
	}
	for {
		t, err := s.standby(ctx)
		if err != nil {
			return err
		}
		if done, err := s.hold(ctx, t, workload); done {
			return err
		}
	}
}

// hold runs the workload under t until it must stand by again (done false)
// or Run must return err (done true).
func (s *Supervisor) hold(ctx context.Context, t tenure, workload func(context.Context) error) (done bool, err error) {
	log := s.log.With("fence", t.Fence())
	s.fence.Store(t.Fence())
	s.leader.Store(true)
	defer func() {
		s.leader.Store(false)
		s.fence.Store(0)
	}()
	log.Info("acquired; starting workload")
	s.observe(Event{Kind: EventAcquired, Name: s.name, Slot: s.guard.slot(t), Holder: s.cfg.Holder, Fence: t.Fence()})

	kcfg := keep.Config{
		RenewInterval: s.cfg.RenewInterval,
		RetryDelay:    s.cfg.RetryDelay,
		StopTimeout:   s.cfg.StopTimeout,
		IsLost:        func(err error) bool { return errors.Is(err, pglease.ErrLeaseLost) },
		Logger:        log,
		OnStuck: func(cause error) {
			s.observe(Event{Kind: EventStuck, Name: s.name, Slot: s.guard.slot(t), Holder: s.cfg.Holder, Fence: t.Fence(), Err: cause})
		},
	}
	run := workload
	for {
		res := keep.Hold(ctx, t, kcfg, run)
		if res.Lost {
			log.Warn("lease lost; workload cancelled", "cause", res.Cause, "workload_err", res.WorkErr)
			s.observe(Event{Kind: EventLost, Name: s.name, Slot: s.guard.slot(t), Holder: s.cfg.Holder, Fence: t.Fence(), Err: res.Cause})
			return false, nil
		}
		if res.Cause != nil { // ctx ended: shut down
			s.release(ctx, t, log)
			return true, ctx.Err()
		}
		switch s.cfg.OnExit {
		case Restart:
			log.Info("workload returned; restarting it", "workload_err", res.WorkErr, "after", s.cfg.RestartDelay)
			run = func(ctx context.Context) error {
				if err := sleep(ctx, s.cfg.RestartDelay); err != nil {
					return nil
				}
				return workload(ctx)
			}
		case Return:
			log.Info("workload returned; releasing and returning", "workload_err", res.WorkErr)
			s.release(ctx, t, log)
			return true, res.WorkErr
		default:
			log.Info("workload returned; releasing and standing by", "workload_err", res.WorkErr)
			s.release(ctx, t, log)
			if err := sleep(ctx, s.cfg.RestartDelay); err != nil {
				return true, err
			}
			return false, nil
		}
	}
}

// release gives the lease back after the workload returned. It runs even
// when ctx has ended, bounded by the TTL.
func (s *Supervisor) release(ctx context.Context, t tenure, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.TTL)
	defer cancel()
	if err := t.Release(rctx); err != nil {
		log.Warn("release failed; the lease will expire on its own", "err", err)
		return
	}
	log.Info("released")
	s.observe(Event{Kind: EventReleased, Name: s.name, Slot: s.guard.slot(t), Holder: s.cfg.Holder, Fence: t.Fence()})
}

// standby waits until the lease is taken, or ctx ends.
func (s *Supervisor) standby(ctx context.Context) (tenure, error) {
	w := s.guard.listen(ctx)
	defer w.Close(ctx)
	var (
		seen    refusal
		backoff time.Duration
	)
	for {
		t, ref, err := s.try(ctx)
		var wait time.Duration
		switch {
		case err == nil && ref == nil:
			return t, nil
		case ref != nil:
			backoff = 0
			if ref.holder != seen.holder || ref.fence != seen.fence {
				seen = *ref
				s.log.Info("standing by", "leader", ref.holder, "leader_fence", ref.fence, "retry_in", ref.wait)
				s.observe(Event{Kind: EventLeaderSeen, Name: s.name, Holder: ref.holder, Fence: ref.fence})
			}
			wait = ref.wait
			if s.waiting != nil {
				s.waiting()
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, pglease.ErrInvalidArgument):
			return nil, err
		default:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			wait = backoff/2 + rand.N(backoff/2)
			s.log.Warn("cannot reach the lease; retrying", "err", err, "retry_in", wait)
		}
		if err := w.Wait(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// try makes one attempt, bounded by the TTL so that a hanging network is
// reported and retried rather than waited on forever.
func (s *Supervisor) try(ctx context.Context) (tenure, *refusal, error) {
	tctx, cancel := context.WithTimeout(ctx, s.cfg.TTL)
	defer cancel()
	return s.guard.try(tctx)
}

func (s *Supervisor) observe(e Event) {
	if s.cfg.Observer != nil {
		s.cfg.Observer(e)
	}
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
