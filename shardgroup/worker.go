package shardgroup

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/notify"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// ErrLeft is returned by Run after Leave handed the shards over.
var ErrLeft = errors.New("shardgroup: left the group")

// Shard is one shard this worker owns, for one tenure.
type Shard struct {
	// Group is the group's name.
	Group string
	// Name is the shard's name.
	Name string
	// Fence is the tenure's fence: larger than every earlier owner's.
	Fence int64
}

// LeaseName returns the name of the shard's lease, '{group}/shard', as
// pglease.assert_held and pglease.lease_status know it: fence the shard's
// writes with pglease.WithFence(ctx, db, s.LeaseName(), s.Fence, fn).
func (s Shard) LeaseName() string { return "{" + s.Group + "}/" + s.Name }

// Func is the work of one shard, given to Run: it runs while the worker owns the shard
// and must return soon after ctx ends (the shard moved, was lost, or the
// worker leaves). Its error is logged; while the shard stays owned it runs
// again after the next sync.
type Func func(ctx context.Context, s Shard) error

// Worker is one member of a group. Build it with New; call Run once.
type Worker struct {
	cfg Config
	q   *db.Queries
	hub *notify.Hub

	leave     chan struct{}
	leaveOnce sync.Once
	done      chan struct{}

	mu    sync.Mutex
	owned []string
}

// New returns a worker of group cfg.Group that syncs on database. It does
// not take ownership: closing database stays the caller's job. It hears
// handovers at once when database is a *pgxpool.Pool or a
// pglease.Listener (see pglease.DB), otherwise at the next Interval. It
// refuses an invalid cfg with an error naming the field.
func New(database pglease.DB, cfg Config) (*Worker, error) {
	if database == nil {
		return nil, invalid("database must not be nil: pass a *pgxpool.Pool, *pgx.Conn or pgx.Tx")
	}
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Worker{
		cfg: cfg, q: db.New(database),
		hub:   tenure.NewHub(database, cfg.Logger),
		leave: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Member returns the worker's member name.
func (w *Worker) Member() string { return w.cfg.Member }

// Owned returns the shards the worker's last sync said it owns, in shard
// order.
func (w *Worker) Owned() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.owned)
}

// Leave hands every shard over and makes Run return ErrLeft: it removes the
// worker from the group (its share goes to the others at once), cancels
// each shard's context, waits for each function to return and releases its
// shard. It returns when Run has returned, or ctx.Err() when ctx ends
// first (Run keeps leaving).
func (w *Worker) Leave(ctx context.Context) error {
	w.leaveOnce.Do(func() { close(w.leave) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// running is one shard's function in flight.
type running struct {
	fence    int64
	cancel   context.CancelFunc
	done     chan struct{}
	handover atomic.Bool // release after the function returned
}

func (r *running) handoverNow() bool { return r.handover.Load() }
func (r *running) setHandover()      { r.handover.Store(true) }

// Run joins the group and runs fn for each shard the worker owns, in a
// goroutine of its own, until ctx ends or Leave is called; either way it
// leaves gracefully before returning (when ctx ended, within TTL). It
// returns ErrLeft after Leave, else ctx.Err().
func (w *Worker) Run(ctx context.Context, fn Func) error {
	defer close(w.done)
	if fn == nil {
		return invalid("fn must not be nil")
	}
	log := w.cfg.Logger.With("group", w.cfg.Group, "member", w.cfg.Member)
	shards := make(map[string]*running)

	// Create the group (idempotent), until it works or ctx ends.
	create := db.GroupCreateParams{GroupName: w.cfg.Group, ShardNames: w.cfg.Names}
	if len(w.cfg.Names) == 0 {
		create.ShardCount = pgtype.Int4{Int32: int32(w.cfg.Shards), Valid: true}
	}
	for {
		_, err := w.q.GroupCreate(ctx, create)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fatal(err) {
			return err
		}
		log.Warn("shardgroup: create the group", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.leave:
			return ErrLeft
		case <-time.After(w.cfg.Interval):
		}
	}

	waiter := w.hub.Listen(ctx, "group", w.cfg.Group)
	defer waiter.Close(context.Background())
	var validUntil time.Time
	maxShards := pgtype.Int4{Int32: int32(w.cfg.MaxShards), Valid: w.cfg.MaxShards > 0}

	stopAll := func(handover bool) {
		for _, r := range shards {
			if handover {
				r.setHandover()
			}
			r.cancel()
		}
	}
	reap := func() {
		for name, r := range shards {
			select {
			case <-r.done:
				delete(shards, name)
			default:
			}
		}
	}
	for {
		select {
		case <-w.leave:
			w.depart(log, shards)
			return ErrLeft
		case <-ctx.Done():
			w.depart(log, shards)
			return ctx.Err()
		default:
		}
		reap()
		sent := time.Now()
		// The call may take until the shards' deadline (then they are
		// stopped as lost), or TTL - SafetyMargin before the first success.
		callDeadline := sent.Add(w.cfg.TTL - w.cfg.SafetyMargin)
		if validUntil.After(sent) {
			callDeadline = validUntil
		}
		callCtx, cancel := context.WithDeadline(ctx, callDeadline)
		res, err := w.q.GroupSync(callCtx, db.GroupSyncParams{
			GroupName: w.cfg.Group, Member: w.cfg.Member, Ttl: w.cfg.TTL, MaxShards: maxShards,
		})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("shardgroup: sync failed; retrying at the next interval", "err", err)
			}
			if fatal(err) {
				stopAll(false)
				w.wait(shards)
				return err
			}
		} else {
			validUntil = sent.Add(res.ExpiresIn - w.cfg.SafetyMargin)
			owned := make(map[string]int64, len(res.Shards))
			for i, s := range res.Shards {
				owned[s] = res.Fences[i]
			}
			for name, r := range shards {
				if f, ok := owned[name]; !ok || f != r.fence {
					r.cancel() // lost: the server no longer lists this tenure
				}
			}
			asked := make(map[string]bool, len(res.Release))
			for _, s := range res.Release {
				asked[s] = true
			}
			for name, fence := range owned {
				r, ok := shards[name]
				switch {
				case asked[name] && ok:
					r.setHandover()
					r.cancel()
				case asked[name]:
					shards[name] = w.start(ctx, log, fn, name, fence, true)
				case !ok:
					shards[name] = w.start(ctx, log, fn, name, fence, false)
				}
			}
			w.mu.Lock()
			w.owned = res.Shards
			w.mu.Unlock()
		}
		if !time.Now().Before(validUntil) {
			stopAll(false) // no successful sync for TTL - SafetyMargin: lost
		}
		next := w.cfg.Interval
		if d := time.Until(validUntil); d > 0 && d < next {
			next = d
		}
		wctx, wcancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-w.leave:
				wcancel()
			case <-wctx.Done():
			}
		}()
		_ = waiter.Wait(wctx, next)
		wcancel()
	}
}

// start runs the shard's function; with handover it only releases the
// shard (asked to hand over a shard whose function is not running).
func (w *Worker) start(ctx context.Context, log interface {
	Warn(string, ...any)
}, fn Func, name string, fence int64, handover bool) *running {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &running{fence: fence, cancel: cancel, done: make(chan struct{})}
	if handover {
		r.setHandover()
	}
	shard := Shard{Group: w.cfg.Group, Name: name, Fence: fence}
	go func() {
		defer close(r.done)
		if !handover {
			if err := fn(sctx, shard); err != nil && sctx.Err() == nil {
				log.Warn("shardgroup: shard function failed", "shard", name, "err", err)
			}
		}
		cancel()
		if r.handoverNow() {
			rctx, rcancel := context.WithTimeout(context.Background(), w.cfg.TTL)
			defer rcancel()
			if _, err := w.q.GroupRelease(rctx, db.GroupReleaseParams{
				GroupName: w.cfg.Group, Shard: name, Member: w.cfg.Member, Fence: fence,
			}); err != nil {
				log.Warn("shardgroup: release failed; the shard frees at its expiry", "shard", name, "err", err)
			}
		}
	}()
	return r
}

// depart leaves the group: group_leave, then every shard handed over.
func (w *Worker) depart(log interface{ Warn(string, ...any) }, shards map[string]*running) {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
	defer cancel()
	if _, err := w.q.GroupLeave(ctx, db.GroupLeaveParams{GroupName: w.cfg.Group, Member: w.cfg.Member}); err != nil {
		log.Warn("shardgroup: leave failed; the others drop this member at its expiry", "err", err)
	}
	for _, r := range shards {
		r.setHandover()
		r.cancel()
	}
	w.wait(shards)
	w.mu.Lock()
	w.owned = nil
	w.mu.Unlock()
}

func (w *Worker) wait(shards map[string]*running) {
	for _, r := range shards {
		<-r.done
	}
}

// fatal reports whether err is a refusal no retry can change: a bad
// argument, an unknown group, or a group of another role.
func fatal(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "22004", "22023", "PGL10", "PGL11", "42501":
		return true
	}
	return false
}
