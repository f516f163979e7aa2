// Package notify waits for pglease's release notifications (NOTIFY on
// channel "pglease") with a timeout, so that blocked acquires and claims wake
// at a release and otherwise at the holder's expiry.
//
// All waiters on one pool share one dedicated connection (opened with the
// pool's connection settings, outside the pool, so waiting never starves
// the pool). It is opened by the first waiter and closed by the last.
package notify

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/db"
)

// Channel is the channel the SQL functions NOTIFY on.
const Channel = "pglease"

// Payload is the JSON payload of a NOTIFY on Channel.
type Payload struct {
	Kind   string `json:"kind"`   // "lease" or "slot"
	Event  string `json:"event"`  // "released"
	Name   string `json:"name"`   // lease name or slot scope
	Slot   *int32 `json:"slot"`   // slot number; nil for leases
	Fence  int64  `json:"fence"`  // fence of the tenure that began or ended
	Holder string `json:"holder"` // holder of that tenure
}

// maxJitter caps the random delay added to each wait, which keeps many
// waiters from retrying in the same instant.
const maxJitter = 20 * time.Millisecond

// Waiter waits for a release of one lease or slot scope, or for a timeout.
type Waiter struct {
	kind, name string
	pool       *pgxpool.Pool // nil: no notifications, timeouts only
	hub        *hub          // nil while not listening
	wake       chan struct{} // buffered 1: a release of kind/name, or the hub broke
}

// Listen subscribes to releases of kind ("lease" or "slot") name. With a
// nil pool, or when listening fails, the waiter only sleeps: waking at
// expiry stays correct, only slower after a release. Call it before checking
// whether the lease is free, so that a release in between is not missed,
// and Close the waiter when done.
func Listen(ctx context.Context, pool *pgxpool.Pool, kind, name string) *Waiter {
	w := &Waiter{kind: kind, name: name, pool: pool, wake: make(chan struct{}, 1)}
	if pool != nil {
		w.hub = subscribe(ctx, pool, w)
	}
	return w
}

// Wait returns after d plus a little jitter, or earlier when a release of
// the waited-for lease or scope is notified (or notifications broke, which
// is worth a retry). A waiter that is not listening (its connection broke,
// say in a failover, or could not be opened) listens again first and, when
// that works, returns at once so that the caller looks again before
// waiting. It returns ctx.Err() unchanged when ctx ends first.
func (w *Waiter) Wait(ctx context.Context, d time.Duration) error {
	if w.pool != nil && (w.hub == nil || w.hub.dead.Load()) {
		if w.hub != nil {
			w.hub.unsubscribe(w)
		}
		if w.hub = subscribe(ctx, w.pool, w); w.hub != nil {
			return ctx.Err()
		}
	}
	t := time.NewTimer(max(d, 0) + rand.N(maxJitter))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-w.wake:
		return nil
	}
}

// Close unsubscribes; the last waiter of a pool closes the shared
// connection and waits for its goroutine to end.
func (w *Waiter) Close(context.Context) {
	if w.hub != nil {
		w.hub.unsubscribe(w)
		w.hub = nil
	}
}

// hub is one LISTEN connection shared by the waiters of one pool.
type hub struct {
	pool   *pgxpool.Pool
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}
	dead   atomic.Bool // the connection broke; waiters must listen anew

	mu      sync.Mutex // guards waiters; registryMu is taken first
	waiters map[*Waiter]struct{}
}

var (
	registryMu sync.Mutex
	registry   = map[*pgxpool.Pool]*hub{}
)

// connectTimeout bounds opening the shared LISTEN connection: a standby
// whose network hangs must fall back to sleeping, not hang.
const connectTimeout = 5 * time.Second

// subscribe adds w to the pool's hub, starting the hub when needed. It
// returns nil when no LISTEN connection can be made. The connection is made
// without holding registryMu, so a hanging network for one pool never
// delays waiters of another.
func subscribe(ctx context.Context, pool *pgxpool.Pool, w *Waiter) *hub {
	if h := join(pool, w); h != nil {
		return h
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil
	}
	if err := db.New(conn).NotifyListen(cctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if h := registry[pool]; h != nil { // another waiter won the race
		_ = conn.Close(context.WithoutCancel(ctx))
		h.add(w)
		return h
	}
	hctx, stop := context.WithCancel(context.Background())
	h := &hub{pool: pool, conn: conn, cancel: stop, done: make(chan struct{}), waiters: map[*Waiter]struct{}{}}
	registry[pool] = h
	h.add(w)
	go h.run(hctx)
	return h
}

// join adds w to the pool's running hub, if there is one.
func join(pool *pgxpool.Pool, w *Waiter) *hub {
	registryMu.Lock()
	defer registryMu.Unlock()
	h := registry[pool]
	if h != nil {
		h.add(w)
	}
	return h
}

func (h *hub) add(w *Waiter) {
	h.mu.Lock()
	h.waiters[w] = struct{}{}
	h.mu.Unlock()
}

// unsubscribe removes w; the last waiter stops the hub.
func (h *hub) unsubscribe(w *Waiter) {
	registryMu.Lock()
	h.mu.Lock()
	delete(h.waiters, w)
	last := len(h.waiters) == 0
	h.mu.Unlock()
	if last && registry[h.pool] == h {
		delete(registry, h.pool)
	} else {
		last = false
	}
	registryMu.Unlock()
	if last {
		h.cancel()
		<-h.done
	}
}

// run reads notifications and wakes the waiters they concern. When the
// connection breaks it wakes every waiter (they retry, and fall back to
// sleeping until expiry) and leaves the registry, so the next Listen opens
// a new connection.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	defer func() { _ = h.conn.Close(context.Background()) }()
	for {
		n, err := h.conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.broken()
			}
			return
		}
		var p Payload
		if json.Unmarshal([]byte(n.Payload), &p) != nil || p.Event != "released" {
			continue
		}
		h.mu.Lock()
		for w := range h.waiters {
			if w.kind == p.Kind && w.name == p.Name {
				w.signal()
			}
		}
		h.mu.Unlock()
	}
}

// broken detaches the hub from the registry and wakes all its waiters.
func (h *hub) broken() {
	h.dead.Store(true)
	registryMu.Lock()
	if registry[h.pool] == h {
		delete(registry, h.pool)
	}
	registryMu.Unlock()
	h.mu.Lock()
	for w := range h.waiters {
		w.signal()
	}
	h.mu.Unlock()
}

func (w *Waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
