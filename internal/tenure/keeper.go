package tenure

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/asyncrelease"
	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/notify"
)

// DefaultTTL is the TTL a Keeper renews to when its config leaves it zero
// (pglease.DefaultTTL, the default of every Config's TTL).
const DefaultTTL = 15 * time.Second

// KeeperConfig configures a Keeper (pglease.KeeperConfig documents each
// field).
type KeeperConfig struct {
	Holder        string
	TTL           time.Duration
	Interval      time.Duration
	RetryDelay    time.Duration
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
}

// Keeper renews every lease and slot of one holder with one
// pglease.renew_holder call per interval, and settles each registered
// tenure from the call's result: renewed (its deadline moves, from the
// time the call was sent), or lost (it ends). It is safe for concurrent use.
type Keeper struct {
	db      DB
	q       *db.Queries
	hub     *notify.Hub  // the LISTEN connection its clients' blocking calls share
	cfg     KeeperConfig // with defaults applied
	running atomic.Bool

	// Its instruments, and what a tenure's deadline needs to say why it
	// passed: a round in flight, or the last one's outcome unknown.
	roundTime    metric.Float64Histogram
	roundTenures metric.Int64Histogram
	roundOpts    [nOutcomes]Opts
	inflight     atomic.Bool
	failing      atomic.Bool

	mu        sync.Mutex
	sent      uint64            // rounds sent so far
	held      map[key][]*Tenure // registered tenures, by lease name or (scope, slot)
	next      *round            // the round a Renew waits for
	releasing map[key]*zombie   // releases of tenures that ended locally but were renewed
}

// key identifies a lease (slot 0) or one slot of a scope.
type key struct {
	name string
	slot int
}

// round is the outcome of one renew_holder call, for the Renews waiting on
// it: done closes once it is settled, err is then set when its outcome is
// unknown.
type round struct {
	done chan struct{}
	err  error
}

// zombie is the release of a tenure whose local deadline passed but that a
// round renewed on the server: done closes once the release returned, and
// released says whether it ended the server's tenure (or may have).
type zombie struct {
	fence    int64
	done     chan struct{}
	released bool
}

// KeeperOf returns the Keeper inside public, a *pglease.Keeper: nil for a
// nil one (or anything else). Package pglease sets it when it is
// initialised, before any package importing it runs, so that runslots and
// supervisor reach the core of the keeper in their Config without pglease
// exporting it.
var KeeperOf func(public any) *Keeper

// NewKeeper returns a keeper on database, or an error naming the invalid
// setting.
func NewKeeper(database DB, cfg KeeperConfig) (*Keeper, error) {
	if database == nil {
		return nil, Invalidf("database must not be nil: pass a *pgxpool.Pool, *pgx.Conn or pgx.Tx")
	}
	cfg.Holder = cmp.Or(cfg.Holder, NewHolderID())
	if err := CheckText("Holder", cfg.Holder); err != nil {
		return nil, err
	}
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	if cfg.TTL < time.Millisecond || cfg.TTL > MaxTTL {
		return nil, Invalidf("TTL must be from 1ms to %s, got %s", MaxTTL, cfg.TTL)
	}
	if cfg.Interval < 0 || cfg.RetryDelay < 0 {
		return nil, Invalidf("Interval and RetryDelay must not be negative, got %s and %s", cfg.Interval, cfg.RetryDelay)
	}
	cfg.Interval = cmp.Or(cfg.Interval, cfg.TTL/renewDivisor)
	if limit := cfg.TTL - cfg.TTL/10; cfg.Interval >= limit {
		return nil, Invalidf("Interval %s leaves no time to retry: it must be shorter than TTL minus a tenth (%s)", cfg.Interval, limit)
	}
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, cfg.Interval/retryDivisor)
	if cfg.RetryDelay >= cfg.Interval {
		return nil, Invalidf("RetryDelay %s must be shorter than Interval %s", cfg.RetryDelay, cfg.Interval)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.MeterProvider = MeterProvider(cfg.MeterProvider)
	k := &Keeper{
		db: database, q: db.New(database), cfg: cfg, hub: NewHub(database, cfg.Logger),
		held: make(map[key][]*Tenure), releasing: make(map[key]*zombie),
		next: &round{done: make(chan struct{})},
	}
	b := NewInstruments(cfg.MeterProvider)
	k.roundTime = b.Seconds("pglease.keeper.round.duration",
		"Round trip of a Keeper's renew_holder call, by outcome (renewed, or error: outcome unknown).", durationBuckets)
	k.roundTenures = b.Count("pglease.keeper.round.tenures", "{tenure}",
		"Tenures (leases and slots) each successful Keeper round renewed.", countBuckets)
	b.Done()
	for o := range nOutcomes {
		k.roundOpts[o] = NewOpts(AttrRenewOutcome.String(outcomeNames[o]))
	}
	return k, nil
}

// troubled reports whether a round is in flight or the last one failed:
// a kept tenure whose deadline passes then was lost to the connection.
func (k *Keeper) troubled() bool { return k.inflight.Load() || k.failing.Load() }

// Holder returns the holder the keeper renews.
func (k *Keeper) Holder() string { return k.cfg.Holder }

// TTL returns the TTL each round renews to.
func (k *Keeper) TTL() time.Duration { return k.cfg.TTL }

// Len returns how many tenures are registered.
func (k *Keeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, ts := range k.held {
		n += len(ts)
	}
	return n
}

// Serve renews until ctx ends, then returns ctx.Err(). Rounds are sent
// every Interval (from one send to the next, however long a call takes),
// or RetryDelay after a failed one. It refuses to start while another Serve
// of the same keeper runs.
func (k *Keeper) Serve(ctx context.Context) error {
	if !k.running.CompareAndSwap(false, true) {
		return Invalidf("the Keeper is already running: call Serve once")
	}
	defer k.running.Store(false)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		sent := time.Now()
		if err := k.renewAll(ctx, sent); err != nil && ctx.Err() == nil {
			k.cfg.Logger.Warn("pglease: renew_holder failed, outcome unknown; retrying",
				"holder", k.cfg.Holder, "err", err, "retry_in", k.cfg.RetryDelay)
			t.Reset(k.cfg.RetryDelay)
			continue
		}
		t.Reset(time.Until(sent.Add(k.cfg.Interval)))
	}
}

// renewAll makes one renew_holder call, sent no earlier than sent, and
// settles the registered tenures with its result. An error leaves the
// outcome unknown: nothing is extended, nothing ends. Renews waiting for a
// round get this one's verdict, also when they started waiting after it
// was sent.
func (k *Keeper) renewAll(ctx context.Context, sent time.Time) error {
	k.mu.Lock()
	k.sent++
	n := k.sent
	k.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, k.cfg.TTL) // a later reply extends nothing
	k.inflight.Store(true)
	start := time.Now()
	row, err := k.q.HolderRenew(cctx, db.HolderRenewParams{Holder: k.cfg.Holder, Ttl: k.cfg.TTL})
	now := time.Now()
	cancel()
	if err != nil {
		err = Interpret(ctx, fmt.Sprintf("pglease: renew_holder for holder %q, outcome unknown", k.cfg.Holder), ErrLeaseLost, err)
		if ctx.Err() == nil {
			k.failing.Store(true)
			k.roundTime.Record(ctx, now.Sub(start).Seconds(), k.roundOpts[renewError].Record...)
		}
		k.inflight.Store(false)
		k.settled(err)
		return err
	}
	k.failing.Store(false)
	k.inflight.Store(false)
	k.roundTime.Record(ctx, now.Sub(start).Seconds(), k.roundOpts[renewOK].Record...)
	k.roundTenures.Record(ctx, int64(len(row.Leases)+len(row.Slots)))
	zombies := k.settle(n, sent, now, row)
	k.settled(nil)
	k.release(zombies)
	return nil
}

// settled hands the outcome of a round to the Renews waiting for it.
func (k *Keeper) settled(err error) {
	k.mu.Lock()
	r := k.next
	k.next = &round{done: make(chan struct{})}
	k.mu.Unlock()
	r.err = err
	close(r.done)
}

// settle applies the result of round n, sent at sent and answered at now,
// to the tenures registered before it was sent, and returns the releases
// to make.
func (k *Keeper) settle(n uint64, sent, now time.Time, row db.HolderRenewRow) []*Tenure {
	renewed := make(map[key]int64, len(row.Leases)+len(row.Slots))
	for i, name := range row.Leases {
		renewed[key{name, 0}] = row.LeaseFences[i]
	}
	for i, scope := range row.SlotScopes {
		renewed[key{scope, int(row.Slots[i])}] = row.SlotFences[i]
	}
	var ended, zombies []*Tenure
	k.mu.Lock()
	for kk, ts := range k.held {
		fence, ok := renewed[kk]
		kept := ts[:0]
		for _, t := range ts {
			if t.reg >= n { // granted while the round ran: the next one judges it
				kept = append(kept, t)
				continue
			}
			switch t.settle(ok && fence == t.fence, sent, now, k.cfg.TTL) {
			case settleKept:
				kept = append(kept, t)
			case settleLost:
				ended = append(ended, t)
			case settleDrop:
			case settleZombie:
				if ok && fence == t.fence && !holdsLive(fence, ts) && k.releasing[kk] == nil {
					k.releasing[kk] = &zombie{fence: fence, done: make(chan struct{})}
					zombies = append(zombies, t)
				}
			}
		}
		if len(kept) == 0 {
			delete(k.held, kk)
		} else {
			k.held[kk] = kept
		}
	}
	k.mu.Unlock()
	for _, t := range ended {
		t.lose()
	}
	return zombies
}

// holdsLive reports whether one of ts is a live tenure with fence.
func holdsLive(fence int64, ts []*Tenure) bool {
	for _, t := range ts {
		if t.fence == fence && !t.isEnded() {
			return true
		}
	}
	return false
}

// release ends on the server the tenures whose local deadline passed but
// that a round renewed: nothing local holds them any more, and the next
// rounds would keep them for ever. A tenure granted again with the same
// fence meanwhile waits in register for the release, then ends.
func (k *Keeper) release(zombies []*Tenure) {
	for _, t := range zombies {
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.TTL)
		released, err := t.release(ctx, asyncrelease.OK(k.db))
		cancel()
		kk := key{t.name, t.slot}
		k.mu.Lock()
		z := k.releasing[kk]
		delete(k.releasing, kk)
		z.released = released || err != nil
		k.mu.Unlock()
		close(z.done)
		if err != nil {
			t.c.unsure.remember(t, err)
			k.cfg.Logger.Warn("pglease: release of a tenure past its local deadline failed; it frees when it expires",
				"name", t.name, "slot", t.slot, "fence", t.fence, "err", err)
		}
	}
}

// register makes k keep t from its next round on.
func (k *Keeper) register(t *Tenure) {
	kk := key{t.name, t.slot}
	k.mu.Lock()
	if z := k.releasing[kk]; z != nil && z.fence == t.fence {
		// The grant re-pinned the tenure being released: wait for the
		// release, which may have ended it.
		k.mu.Unlock()
		<-z.done
		if z.released {
			t.lose()
			return
		}
		k.mu.Lock()
	}
	t.reg = k.sent
	k.held[kk] = append(k.held[kk], t)
	k.mu.Unlock()
}

// deregister stops keeping t.
func (k *Keeper) deregister(t *Tenure) {
	kk := key{t.name, t.slot}
	k.mu.Lock()
	defer k.mu.Unlock()
	ts := k.held[kk]
	for i, o := range ts {
		if o == t {
			ts = append(ts[:i], ts[i+1:]...)
			break
		}
	}
	if len(ts) == 0 {
		delete(k.held, kk)
	} else {
		k.held[kk] = ts
	}
}

// renew is Tenure.Renew for a kept tenure: it makes no call of its own.
// When a round moved t's deadline since the previous renew returned, it
// returns at once: a caller that renews every RenewInterval (Run) learns
// each new deadline within one interval, not two. Otherwise it waits for
// the keeper's next round and returns its verdict on t.
func (k *Keeper) renew(ctx context.Context, t *Tenure) error {
	k.mu.Lock()
	r := k.next // before news: a round settled after this closes r
	k.mu.Unlock()
	if t.news() {
		return nil
	}
	defer t.news()
	select {
	case <-t.done:
		return t.endErr()
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
	}
	select {
	case <-t.done:
		return t.endErr()
	default:
		return r.err
	}
}
