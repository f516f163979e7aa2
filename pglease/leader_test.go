package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// observeInterval is the Observe interval of the tests: a minute when
// notifications work, so that a change seen in time was seen by its
// NOTIFY; short behind a pooler in transaction mode, which loses them.
func observeInterval(t *testing.T) time.Duration {
	if pgtest.ThroughPooler(t) {
		return 100 * time.Millisecond
	}
	return time.Minute
}

// watch observes name with a client of its own and returns a function
// that waits for the next state and checks it equals want (ExpiresIn
// aside): every change must be delivered, in order, none twice.
func watch(t *testing.T, db pglease.DB, name string) func(what string, want pglease.LeaseState) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := pglease.New(db, pglease.Config{Holder: "watcher", ObserveInterval: observeInterval(t)})
	if err != nil {
		t.Fatal(err)
	}
	states, err := w.Observe(ctx, name)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	return func(what string, want pglease.LeaseState) {
		t.Helper()
		want.Name = name
		select {
		case got := <-states:
			got.ExpiresIn = 0
			if got != want {
				t.Fatalf("%s: observed %+v, want %+v", what, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no state observed in 30s, want %+v", what, want)
		}
	}
}

// killListeners terminates the LISTEN connections of the test database.
func killListeners(t *testing.T, db pglease.DB) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE '%LISTEN pglease%' AND pid <> pg_backend_pid()`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestObserveHandovers: a watcher sees every tenure of a lease in order,
// with its holder, fence and value, and every vacancy between them,
// across 100 handovers, a value change, a release request, a killed
// LISTEN connection (twice) and an expiry. Each step waits until the
// watcher saw it, so every state must be delivered exactly once. Through
// PgBouncer (no notifications) it sees them by polling.
func TestObserveHandovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	next := watch(t, pool, "lead")
	next("initial state", pglease.LeaseState{})
	clients := []*pglease.Client{newClient(t, pool, "a"), newClient(t, pool, "b")}
	for i := range 100 {
		c := clients[i%2]
		value := fmt.Sprintf("%s:%d", c.Holder(), i)
		l, err := c.TryAcquire(ctx, "lead", time.Minute, pglease.WithValue(value))
		if err != nil {
			t.Fatal(err)
		}
		next(fmt.Sprintf("tenure %d", i), pglease.LeaseState{Holder: c.Holder(), Fence: l.Fence(), Value: value})
		if i == 40 || i == 70 {
			// Behind a pooler the LISTEN ran on a shared server connection
			// (and hears nothing): killing it would cut other clients off.
			if !pgtest.ThroughPooler(t) && killListeners(t, pool) == 0 {
				t.Fatal("no LISTEN connection to kill")
			}
			if err := l.SetValue(ctx, value+"+"); err != nil {
				t.Fatal(err)
			}
			next("a new value after the LISTEN connection died", pglease.LeaseState{Holder: c.Holder(), Fence: l.Fence(), Value: value + "+"})
			if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, "lead", pgleaseadmin.ReleaseRequest{}); err != nil {
				t.Fatal(err)
			}
			next("a release request", pglease.LeaseState{Holder: c.Holder(), Fence: l.Fence(), Value: value + "+", ReleaseRequested: true})
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next(fmt.Sprintf("vacancy %d", i), pglease.LeaseState{Fence: l.Fence()})
	}
	// An expiry is a vacancy too (the watcher reads at the expiry).
	l, err := clients[0].TryAcquire(ctx, "lead", 500*time.Millisecond, pglease.WithValue("short"))
	if err != nil {
		t.Fatal(err)
	}
	next("a short tenure", pglease.LeaseState{Holder: "a", Fence: l.Fence(), Value: "short"})
	next("its expiry", pglease.LeaseState{Fence: l.Fence()})
}

// TestValue: a value published with the tenure is in a refusal's
// HeldError and in the operator view; too long a value is refused before
// a round trip and changes nothing.
func TestValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a, b := newClient(t, pool, "a"), newClient(t, pool, "b")
	l, err := a.TryAcquire(ctx, "lead", time.Minute, pglease.WithValue("10.0.0.1:8080"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, "lead", time.Minute, pglease.WithValue("10.0.0.2:8080"))
	var held *pglease.HeldError
	if !errors.As(err, &held) || held.Value != "10.0.0.1:8080" {
		t.Fatalf("refused TryAcquire: got %v, want a *HeldError with value 10.0.0.1:8080", err)
	}
	long := strings.Repeat("x", pglease.MaxValueLen+1)
	if _, err := b.TryAcquire(ctx, "other", time.Minute, pglease.WithValue(long)); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with a long value: got %v, want ErrInvalidArgument", err)
	}
	if err := l.SetValue(ctx, long); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("SetValue with a long value: got %v, want ErrInvalidArgument", err)
	}
	leases, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0].Value != "10.0.0.1:8080" {
		t.Fatalf("Leases: got %+v, want lead with value 10.0.0.1:8080 only", leases)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.SetValue(ctx, "late"); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("SetValue after Release: got %v, want ErrLeaseLost", err)
	}
	if _, err := pglease.New(pool, pglease.Config{ObserveInterval: -time.Second}); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "ObserveInterval") {
		t.Fatalf("New with a negative ObserveInterval: got %v, want ErrInvalidArgument naming the field", err)
	}
}

// TestReleaseRequested: a renewal after a release request closes
// ReleaseRequested; RequestRelease's refusals are typed.
func TestReleaseRequested(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a, b := newClient(t, pool, "a"), newClient(t, pool, "b")
	if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, "lead", pgleaseadmin.ReleaseRequest{}); !errors.Is(err, pgleaseadmin.ErrNotHeld) {
		t.Fatalf("RequestRelease of a free lease: got %v, want ErrNotHeld", err)
	}
	l := mustAcquire(t, a, "lead", time.Minute)
	if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, "lead", pgleaseadmin.ReleaseRequest{To: "b"}); !errors.Is(err, pgleaseadmin.ErrNotCandidate) {
		t.Fatalf("RequestRelease to a holder that never asked: got %v, want ErrNotCandidate", err)
	}
	if _, err := b.TryAcquire(ctx, "lead", time.Minute); !errors.Is(err, pglease.ErrLeaseHeld) {
		t.Fatalf("b's TryAcquire: got %v, want ErrLeaseHeld", err)
	}
	r, requested, err := pgleaseadmin.RequestRelease(ctx, pool, "lead", pgleaseadmin.ReleaseRequest{To: "b"})
	if err != nil || !requested || r.Holder != "a" || r.Fence != l.Fence() {
		t.Fatalf("RequestRelease: got %+v (requested %t), %v", r, requested, err)
	}
	select {
	case <-l.ReleaseRequested():
		t.Fatal("ReleaseRequested closed before a renewal")
	default:
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.ReleaseRequested():
	default:
		t.Fatal("ReleaseRequested still open after a renewal that saw the request")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The next grant is b's alone: a is refused, for b.
	_, err = a.TryAcquire(ctx, "lead", time.Minute)
	var held *pglease.HeldError
	if !errors.As(err, &held) || held.Holder != "b" {
		t.Fatalf("a's TryAcquire during the reservation: got %v, want held for b", err)
	}
	if _, err := b.TryAcquire(ctx, "lead", time.Minute); err != nil {
		t.Fatalf("b's TryAcquire: %v", err)
	}
}

// TestWatchReleaseRequests: a tenure acquired with WatchReleaseRequests
// learns a release request without renewing on its own schedule (a TTL of
// an hour: no renewal is due), also when a Keeper keeps it, and registers
// no observation. Behind a pooler, where the client cannot listen, the
// Keeper's tenure looks every third of its TTL and the other learns it at
// its next renewal, as documented.
func TestWatchReleaseRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	pooled := pgtest.ThroughPooler(t)
	keeperTTL := time.Hour
	if pooled {
		keeperTTL = 3 * time.Second
	}
	_, kept, _ := startKeeper(t, pool, keeperTTL)
	for _, tc := range []struct {
		name   string
		c      *pglease.Client
		ttl    time.Duration
		learns bool // without a renewal of its own
	}{
		{"own renewals", newClient(t, pool, "a"), time.Hour, !pooled},
		{"kept by a Keeper", kept, keeperTTL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "watched/" + tc.name
			l, err := tc.c.TryAcquire(ctx, name, tc.ttl, pglease.WatchReleaseRequests())
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}()
			if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, name, pgleaseadmin.ReleaseRequest{}); err != nil {
				t.Fatal(err)
			}
			if !tc.learns {
				select {
				case <-l.ReleaseRequested():
					t.Fatal("ReleaseRequested closed without a renewal behind a pooler")
				case <-time.After(200 * time.Millisecond):
				}
				if err := l.Renew(ctx); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-l.ReleaseRequested():
			case <-time.After(30 * time.Second):
				t.Fatal("ReleaseRequested still open 30s after the request")
			}
			var observers int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pglease.observers WHERE name = $1`, name).Scan(&observers); err != nil {
				t.Fatal(err)
			}
			if observers != 0 {
				t.Fatalf("%d observer registrations of the watched lease, want none: watching must not make its changes NOTIFY", observers)
			}
		})
	}
}

// lookCounter is a direct pool that tells each read of a release request
// (the watch's look) once its row was scanned.
type lookCounter struct {
	*pgxpool.Pool
	looked chan bool // the value read
}

func (d *lookCounter) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	row := d.Pool.QueryRow(ctx, sql, args...)
	if !strings.Contains(sql, "name: LeaseReleaseAsked") {
		return row
	}
	return lookRow{row, d.looked}
}

func (d *lookCounter) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, d.Config().ConnConfig.Copy())
}

type lookRow struct {
	pgx.Row
	looked chan bool
}

func (r lookRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if err == nil {
		r.looked <- *dest[0].(*bool)
	}
	return err
}

// TestWatchForgedNotification: anyone may NOTIFY channel pglease (see
// docs/security.md). A forged 'changed' notification of a watched lease
// costs its tenure one read, which finds no request: ReleaseRequested
// stays open, and the real request after it closes it. A 'released' one
// costs nothing: the watch hears changes only.
func TestWatchForgedNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDirectPool(t)
	db := &lookCounter{Pool: pool, looked: make(chan bool, 8)}
	c, err := pglease.New(db, pglease.Config{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "lead", time.Hour, pglease.WatchReleaseRequests())
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) bool {
		t.Helper()
		select {
		case v := <-db.looked:
			return v
		case <-time.After(30 * time.Second):
			t.Fatalf("no look for a release request within 30s of %s", what)
			return false
		}
	}
	// A release's notification does not wake the watch (a second look
	// would come below, and read false after the request); delivered in
	// order, it comes before the forged change.
	for _, event := range []string{"released", "changed"} {
		if _, err := pool.Exec(ctx, `SELECT pg_notify('pglease', json_build_object('kind', 'lease', 'event', $1::text, 'name', 'lead')::text)`, event); err != nil {
			t.Fatal(err)
		}
	}
	if next("a forged notification") {
		t.Fatal("the look after a forged notification read a request")
	}
	select {
	case <-l.ReleaseRequested():
		t.Fatal("ReleaseRequested closed by a forged notification")
	default:
	}
	if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, "lead", pgleaseadmin.ReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	if !next("the request") {
		t.Fatal("the look after the request read none")
	}
	<-l.ReleaseRequested()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
