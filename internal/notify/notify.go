// Package notify waits for pglease's release notifications (NOTIFY on
// channel "pglease") with a timeout, so that blocked acquires and claims wake
// at a release and otherwise at the holder's expiry.
//
// Each client owns a Hub: all its waiters share one dedicated connection,
// opened by a Dial (for a *pgxpool.Pool: with the pool's connection
// settings and its BeforeConnect and AfterConnect hooks, outside the pool,
// so that waiting never starves it). The connection is opened by the first
// waiter and kept for a linger after the last one leaves, so that the next
// waiter does not pay a new connection; while nobody waits, no goroutine
// reads it. When no connection can be opened, waiters fall back to waiting
// for the expiry the server reported, looking again at a backoff capped at
// maxRelisten while they try to listen anew, and the hub logs that once at
// warn.
//
// A connection that goes through a pooler (its startup reported a backend
// PID that is not the server's) is closed before it LISTENs, and the hub
// stops listening for good, logging that once at warn: behind transaction
// pooling a LISTEN stays on whichever server connection ran it, which the
// pooler lends to others and whose notifications then reach no client
// (PgBouncer 1.18 logs each one, and can abort when a cancel request meets
// one). Waiters then wake at the expiry the server reported.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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

// DefaultLinger is how long a hub keeps its connection open after its last
// waiter left.
const DefaultLinger = 30 * time.Second

// Payload is the JSON payload of a NOTIFY on Channel. It names no holder,
// fence or slot (anyone may LISTEN): a waiter only learns to try again.
type Payload struct {
	Kind  string `json:"kind"`  // "lease" or "slot"
	Event string `json:"event"` // "released", or "changed" for an observed lease
	Name  string `json:"name"`  // lease name or slot scope
	// Free is, for a slot release while the scope has queued claims
	// (0.3.0), the units the release leaves free as it counts them: a
	// waiter of more units has no room yet and is not woken. nil: unknown
	// (any waiter is woken).
	Free *int `json:"free,omitempty"`
}

// maxJitter caps the random delay added to each wait, which keeps many
// waiters from retrying in the same instant.
const maxJitter = 20 * time.Millisecond

// A waiter that cannot listen (no connection can be opened: the server's
// connection limit, a network blip) tries again after a backoff from
// minRelisten doubling to maxRelisten, and its caller looks again each
// time, rather than sleeping until the expiry: a release meanwhile would go
// unheard for up to a TTL.
const (
	minRelisten = 100 * time.Millisecond
	maxRelisten = 2 * time.Second
)

// connectTimeout bounds opening the LISTEN connection: a standby whose
// network hangs must fall back to sleeping, not hang.
const connectTimeout = 5 * time.Second

// Dial opens a new connection of the caller's own, which the hub LISTENs
// on and closes.
type Dial func(ctx context.Context) (*pgx.Conn, error)

// DialPool returns a Dial that connects as pool does: with its ConnConfig,
// BeforeConnect (where rotating passwords are set) and AfterConnect.
func DialPool(pool *pgxpool.Pool) Dial {
	return func(ctx context.Context) (*pgx.Conn, error) {
		cfg := pool.Config()
		cc := cfg.ConnConfig.Copy()
		if cfg.BeforeConnect != nil {
			if err := cfg.BeforeConnect(ctx, cc); err != nil {
				return nil, err
			}
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return nil, err
		}
		if cfg.AfterConnect != nil {
			if err := cfg.AfterConnect(ctx, conn); err != nil {
				_ = conn.Close(ctx)
				return nil, err
			}
		}
		return conn, nil
	}
}

// errPooled is what connect returns for a connection that goes through a pooler:
// the backend PID its startup reported is not the server's.
var errPooled = errors.New("the connection goes through a pooler (its backend PID is not the server's), where LISTEN does not reach the client")

// Hub shares one LISTEN connection among the waiters of one client.
type Hub struct {
	dial   Dial // nil: no notifications, expiry waits only
	linger time.Duration
	log    *slog.Logger
	warned atomic.Bool
	pooled atomic.Bool // a connection went through a pooler: never listen

	mu      sync.Mutex
	link    *link // the current connection; nil when none
	dialing bool  // a waiter is opening a connection
}

// NewHub returns a hub that opens its connection with dial (nil: waiters
// only sleep until the reported expiry) and keeps it linger after its last
// waiter left.
func NewHub(dial Dial, linger time.Duration, log *slog.Logger) *Hub {
	return &Hub{dial: dial, linger: linger, log: log}
}

// Listens reports whether the hub can listen at all: it has a Dial, and
// no connection of it went through a pooler.
func (h *Hub) Listens() bool { return h.dial != nil && !h.pooled.Load() }

// link is one LISTEN connection. Its fields other than conn and dead are
// guarded by the hub's mu.
type link struct {
	h       *Hub
	conn    *pgx.Conn
	dead    atomic.Bool // the connection broke; waiters must listen anew
	waiters map[*Waiter]struct{}
	stop    context.CancelFunc // stops the reader; nil while none runs
	stopped chan struct{}      // closed when the last reader returned
	idle    *time.Timer        // closes the connection after the linger
}

// Waiter waits for a release of one lease or slot scope, or for a timeout.
type Waiter struct {
	kind, name string
	units      int  // of a slot claim; woken only when a release leaves that many free (0: always)
	changes    bool // woken only by 'changed' events (ListenChanges)
	h          *Hub
	link       *link         // nil while not listening
	wake       chan struct{} // buffered 1: a release of kind/name, or the link broke
	relisten   time.Duration // the backoff before listening anew; 0 while listening works
}

// Listen subscribes to releases of kind ("lease" or "slot") name. When the
// hub has no Dial, or listening fails, the waiter only sleeps: waking at
// expiry stays correct, only slower after a release. Call it before
// checking whether the lease is free, so that a release in between is not
// missed, and Close the waiter when done.
func (h *Hub) Listen(ctx context.Context, kind, name string) *Waiter {
	return h.ListenUnits(ctx, kind, name, 0)
}

// ListenUnits is Listen for a claim of units units of a slot scope: a
// release whose notification says it leaves fewer units free does not
// wake the waiter (there is no room for it yet; a later release will say
// so, and Wait's timeout still applies).
func (h *Hub) ListenUnits(ctx context.Context, kind, name string, units int) *Waiter {
	return h.listen(ctx, &Waiter{kind: kind, name: name, units: units})
}

// ListenChanges is Listen for 'changed' events of lease name only (a
// release request, a change of an observed lease): a release does not
// wake it.
func (h *Hub) ListenChanges(ctx context.Context, name string) *Waiter {
	return h.listen(ctx, &Waiter{kind: "lease", name: name, changes: true})
}

// listen subscribes w, made by Listen's variants, to the hub.
func (h *Hub) listen(ctx context.Context, w *Waiter) *Waiter {
	w.h, w.wake = h, make(chan struct{}, 1)
	w.link = h.subscribe(ctx, w)
	return w
}

// Wait returns after d plus a little jitter, or earlier when a release of
// the waited-for lease or scope is notified (or notifications broke, which
// is worth a retry). A waiter that is not listening (its connection broke,
// say in a failover, or could not be opened) listens again first and, when
// that works, returns at once so that the caller looks again before
// waiting; when it does not, Wait returns after the relisten backoff if
// that is shorter than d, so that the caller looks again and Wait tries to
// listen again. It returns ctx.Err() unchanged when ctx ends first.
func (w *Waiter) Wait(ctx context.Context, d time.Duration) error {
	_, err := w.WaitNotified(ctx, d)
	return err
}

// WaitNotified is Wait, and reports whether it returned before d for a
// reason other than ctx: a notification, a broken connection, or listening
// again after one (each worth a look, as a change may have been missed).
func (w *Waiter) WaitNotified(ctx context.Context, d time.Duration) (bool, error) {
	if w.h.Listens() && (w.link == nil || w.link.dead.Load()) {
		w.Close(ctx)
		if w.link = w.h.subscribe(ctx, w); w.link != nil {
			w.relisten = 0
			return true, ctx.Err()
		}
		w.relisten = min(max(2*w.relisten, minRelisten), maxRelisten)
		d = min(d, w.relisten)
	}
	t := time.NewTimer(max(d, 0) + rand.N(maxJitter))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	case <-w.wake:
		return true, nil
	}
}

// Close unsubscribes. The last waiter of a connection stops its reader and
// leaves it open for the hub's linger.
func (w *Waiter) Close(context.Context) {
	if w.link != nil {
		w.link.remove(w)
		w.link = nil
	}
}

// subscribe adds w to the hub's connection, opening one when needed. It
// returns nil when there is none and none can be opened, or while another
// waiter opens one (the caller tries again after its backoff, by when it
// is open): the connection is made by one waiter at a time, without
// holding the hub's lock, so a hanging network delays only the waiter that
// opens it.
func (h *Hub) subscribe(ctx context.Context, w *Waiter) *link {
	if !h.Listens() {
		return nil
	}
	for {
		if l := h.join(w); l != nil {
			return l
		}
		h.mu.Lock()
		if h.dialing {
			h.mu.Unlock()
			return nil
		}
		if l := h.link; l == nil || l.dead.Load() {
			h.dialing = true
			h.mu.Unlock()
			break
		}
		h.mu.Unlock() // a connection was opened since join looked: join it
	}
	conn, err := h.connect(ctx)
	h.mu.Lock()
	h.dialing = false
	if err != nil {
		h.mu.Unlock()
		switch {
		case errors.Is(err, errPooled):
			if !h.pooled.Swap(true) {
				h.log.Warn("pglease: not listening for release notifications through a pooler; blocked calls wait for the holder's expiry instead (give the client a direct connection to LISTEN on with a pglease.Listener to wake at releases)",
					"err", err)
			}
		case ctx.Err() == nil && h.warned.CompareAndSwap(false, true):
			h.log.Warn("pglease: cannot LISTEN for release notifications; blocked calls wait for the holder's expiry instead (logged once)",
				"err", err)
		}
		return nil
	}
	l := &link{h: h, conn: conn, waiters: map[*Waiter]struct{}{}}
	h.link = l
	l.addLocked(w)
	h.mu.Unlock()
	return l
}

// connect opens a new connection and LISTENs on it, unless it goes
// through a pooler (errPooled): the check comes first, so that no LISTEN
// is left behind on a pooled server connection.
func (h *Hub) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := h.dial(cctx)
	if err != nil {
		return nil, err
	}
	q := db.New(conn)
	pid, err := q.NotifyBackendPID(cctx)
	if err == nil && uint32(pid) != conn.PgConn().PID() {
		err = errPooled
	}
	if err == nil {
		err = q.NotifyListen(cctx)
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// join adds w to the hub's live connection, if there is one, once a reader
// that is stopping has returned.
func (h *Hub) join(w *Waiter) *link {
	for {
		h.mu.Lock()
		l := h.link
		if l == nil || l.dead.Load() {
			h.mu.Unlock()
			return nil
		}
		if l.stop == nil && l.stopped != nil {
			select {
			case <-l.stopped:
			default: // the reader is stopping: wait for it outside the lock
				stopped := l.stopped
				h.mu.Unlock()
				<-stopped
				continue
			}
		}
		l.addLocked(w)
		h.mu.Unlock()
		return l
	}
}

// addLocked adds w, and starts the reader when none runs.
func (l *link) addLocked(w *Waiter) {
	l.waiters[w] = struct{}{}
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if l.stop == nil {
		ctx, stop := context.WithCancel(context.Background())
		l.stop, l.stopped = stop, make(chan struct{})
		go l.read(ctx, l.stopped)
	}
}

// remove removes w. The last waiter stops the reader, waits for it, and
// arms the linger.
func (l *link) remove(w *Waiter) {
	h := l.h
	h.mu.Lock()
	delete(l.waiters, w)
	if l.dead.Load() && l.stop != nil { // the reader has returned or is returning
		l.stop()
		l.stop = nil
	}
	if len(l.waiters) > 0 || l.stop == nil {
		h.mu.Unlock()
		return
	}
	stop, stopped := l.stop, l.stopped
	l.stop = nil
	h.mu.Unlock()
	stop()
	<-stopped
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(l.waiters) == 0 && l.stop == nil && l.idle == nil {
		l.idle = time.AfterFunc(h.linger, l.expire)
	}
}

// CloseIdle closes the hub's connection now when no waiter uses it,
// instead of after the linger: a later waiter opens a new one.
func (h *Hub) CloseIdle() {
	h.mu.Lock()
	l := h.link
	if l == nil || len(l.waiters) > 0 || l.idle == nil { // in use, or its reader is stopping
		h.mu.Unlock()
		return
	}
	l.idle.Stop()
	l.idle = nil
	h.link = nil
	h.mu.Unlock()
	_ = l.conn.Close(context.Background())
}

// expire closes the connection once the linger has passed with no waiter.
func (l *link) expire() {
	h := l.h
	h.mu.Lock()
	if len(l.waiters) > 0 || l.stop != nil {
		h.mu.Unlock()
		return
	}
	l.idle = nil
	if h.link == l {
		h.link = nil
	}
	h.mu.Unlock()
	_ = l.conn.Close(context.Background())
}

// read reads notifications and wakes the waiters they concern, until ctx
// is cancelled (no waiter left) or the connection breaks: then it wakes
// every waiter (they listen again, or back off as Wait does) and detaches
// the link from the hub.
func (l *link) read(ctx context.Context, stopped chan struct{}) {
	defer close(stopped)
	for {
		n, err := l.conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() == nil || l.conn.IsClosed() {
				l.broken(err)
			}
			return
		}
		var p Payload
		if json.Unmarshal([]byte(n.Payload), &p) != nil || (p.Event != "released" && p.Event != "changed") {
			continue
		}
		l.h.mu.Lock()
		for w := range l.waiters {
			if w.kind == p.Kind && w.name == p.Name && (p.Free == nil || w.units <= *p.Free) && (!w.changes || p.Event == "changed") {
				w.signal()
			}
		}
		l.h.mu.Unlock()
	}
}

// broken marks the link dead, detaches it and wakes all its waiters.
func (l *link) broken(err error) {
	l.dead.Store(true)
	h := l.h
	h.mu.Lock()
	if h.link == l {
		h.link = nil
	}
	for w := range l.waiters {
		w.signal()
	}
	h.mu.Unlock()
	h.log.Debug("pglease: the LISTEN connection broke; waiters listen again", "err", err)
	_ = l.conn.Close(context.Background())
}

func (w *Waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
