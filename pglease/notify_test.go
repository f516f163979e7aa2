package pglease_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/internal/testing/testsignal"
	"github.com/pglease/pglease/pglease"
)

// listener is a wrapped pool: a DB that is not a *pgxpool.Pool but opens
// dedicated connections for notifications (pglease.Listener).
type listener struct {
	*pgxpool.Pool
	dials atomic.Int32
	fail  error // when set, ListenConn fails with it
}

func (l *listener) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	l.dials.Add(1)
	if l.fail != nil {
		return nil, l.fail
	}
	return pgx.ConnectConfig(ctx, l.Config().ConnConfig.Copy())
}

// blockedAcquire starts an Acquire of name by waiter while owner holds it,
// waits until the Acquire listens, releases, and returns how long the
// Acquire took after the release.
func blockedAcquire(t *testing.T, owner, waiter *pglease.Client, waiting testsignal.Signal[string], name string, ttl time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	l := mustAcquire(t, owner, name, ttl)
	done := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, name, time.Minute)
		if err == nil {
			err = wl.Release(ctx)
		}
		done <- err
	}()
	waiting.Await(t, "the blocked Acquire to wait")
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocked Acquire did not return")
	}
	return time.Since(released)
}

// TestNotifyListener: a DB that implements Listener gets NOTIFY wake-ups,
// and the waiters of one client share one connection, kept open between
// waits (the linger).
func TestNotifyListener(t *testing.T) {
	t.Parallel()
	db := &listener{Pool: pgtest.NewDirectPool(t)}
	owner := newClient(t, db, "owner")
	waiter := newClient(t, db, "waiter")
	waiting := waitingHook(waiter)
	for i := range 2 {
		took := blockedAcquire(t, owner, waiter, waiting, "jobs", 30*time.Second)
		t.Logf("wait %d: woken %s after the release", i+1, took)
		if took > 10*time.Second {
			t.Fatalf("woken %s after the release: at the expiry, not by the NOTIFY", took)
		}
	}
	if n := db.dials.Load(); n != 1 {
		t.Fatalf("%d LISTEN connections opened for two waits in a row, want 1 (kept for the linger)", n)
	}
}

// TestNotifyPoolHooks: the LISTEN connection of a pool is made with the
// pool's BeforeConnect and AfterConnect hooks.
func TestNotifyPoolHooks(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewMigrated(t)) // direct: NOTIFY needs a session
	if err != nil {
		t.Fatal(err)
	}
	var before, after atomic.Int32
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		before.Add(1)
		cc.RuntimeParams["application_name"] = "pglease-hooked"
		return nil
	}
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error {
		after.Add(1)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	owner := newClient(t, pool, "owner")
	waiter := newClient(t, pool, "waiter")
	waiting := waitingHook(waiter)
	l := mustAcquire(t, owner, "jobs", 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "jobs", time.Minute)
		done <- err
	}()
	waiting.Await(t, "the blocked Acquire to wait")
	var listening int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'pglease-hooked' AND query LIKE '%LISTEN pglease%' AND pid <> pg_backend_pid()`).Scan(&listening); err != nil {
		t.Fatal(err)
	}
	if listening != 1 {
		t.Fatalf("%d LISTEN sessions made through BeforeConnect, want 1", listening)
	}
	if before.Load() != after.Load() {
		t.Fatalf("BeforeConnect ran %d times, AfterConnect %d: want both for every connection", before.Load(), after.Load())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Acquire: %v", err)
	}
}

// TestNotifyFallbackWarnsOnce: when no LISTEN connection can be opened,
// blocked calls wait for the expiry, and the fallback is logged once at
// warn.
func TestNotifyFallbackWarnsOnce(t *testing.T) {
	t.Parallel()
	db := &listener{Pool: pgtest.NewPool(t), fail: errors.New("no dedicated connections here")}
	var mu sync.Mutex
	var warnings int
	logger := slog.New(handlerFunc(func(r slog.Record) {
		if r.Level == slog.LevelWarn {
			mu.Lock()
			warnings++
			mu.Unlock()
		}
	}))
	owner := newClient(t, db, "owner")
	waiter, err := pglease.New(db, pglease.Config{Holder: "waiter", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		mustAcquire(t, owner, "jobs", 200*time.Millisecond)
		l, err := waiter.Acquire(ctx, "jobs", time.Minute)
		if err != nil {
			t.Fatalf("Acquire falling back to the expiry: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if warnings != 1 || db.dials.Load() < 2 {
		t.Fatalf("%d warnings over %d failed LISTEN attempts, want exactly 1", warnings, db.dials.Load())
	}
}

// handlerFunc is a slog.Handler that passes each record to a function.
type handlerFunc func(slog.Record)

func (f handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (f handlerFunc) Handle(_ context.Context, r slog.Record) error { f(r); return nil }
func (f handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return f }
func (f handlerFunc) WithGroup(string) slog.Handler                 { return f }

// flakyListener is a listener whose ListenConn fails until ok is set.
type flakyListener struct {
	*pgxpool.Pool
	dials atomic.Int32
	ok    atomic.Bool
	tried chan struct{} // receives after each failed dial (dropped when full)
}

func (l *flakyListener) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	l.dials.Add(1)
	if !l.ok.Load() {
		select {
		case l.tried <- struct{}{}:
		default:
		}
		return nil, errors.New("sorry, too many clients already")
	}
	return pgx.ConnectConfig(ctx, l.Config().ConnConfig.Copy())
}

// TestNotifyRelistens: a waiter that could not open its LISTEN connection
// (the server's connection limit, say) keeps trying, and once it can, a
// release wakes it long before the holder's expiry (a minute here).
func TestNotifyRelistens(t *testing.T) {
	t.Parallel()
	db := &flakyListener{Pool: pgtest.NewDirectPool(t), tried: make(chan struct{}, 1)}
	owner := newClient(t, db.Pool, "owner")
	waiter, err := pglease.New(db, pglease.Config{Holder: "waiter", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := mustAcquire(t, owner, "jobs", time.Minute)
	done := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "jobs", time.Minute)
		if err == nil {
			err = wl.Release(ctx)
		}
		done <- err
	}()
	for range 3 { // the Acquire's Listen, then two Waits that tried again
		select {
		case <-db.tried:
		case <-time.After(30 * time.Second):
			t.Fatalf("the waiter tried to listen %d times in 30s, want 3", db.dials.Load())
		}
	}
	db.ok.Store(true)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		t.Logf("acquired %s after the release, %d LISTEN attempts", time.Since(released), db.dials.Load())
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not take the released lease within 30s (the holder's TTL is a minute): it stopped trying to listen")
	}
}

// directListener is a pool (through a pooler, when the run uses one) whose
// LISTEN connections go straight to the server: what docs/compatibility.md
// tells users behind transaction pooling to give a client.
type directListener struct {
	*pgxpool.Pool
	direct string // the server's URL, not the pooler's
}

func (l directListener) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, l.direct)
}

// TestNotifyThroughPooler: a client does not LISTEN through a pooler (a
// LISTEN left on a pooled server connection reaches no client, and
// PgBouncer 1.18 aborts when a cancel request meets its notification). It
// says so once at warn, and its blocked Acquire wakes at the holder's
// expiry. Given a Listener that connects directly, the same client wakes
// at the release. Directly connected, neither case warns and both wake at
// the release.
func TestNotifyThroughPooler(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	pool := pgtest.Pool(t, url)
	pooled := pgtest.ThroughPooler(t)
	const ttl = 6 * time.Second
	for _, tc := range []struct {
		name string
		db   pglease.DB
		late bool // wakes at the expiry rather than at the release
	}{
		{"pool", pool, pooled},
		{"direct listener", directListener{Pool: pool, direct: url}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var warnings []string
			logger := slog.New(handlerFunc(func(r slog.Record) {
				if r.Level == slog.LevelWarn {
					mu.Lock()
					warnings = append(warnings, r.Message)
					mu.Unlock()
				}
			}))
			owner := newClient(t, tc.db, "owner")
			waiter, err := pglease.New(tc.db, pglease.Config{Holder: "waiter", Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			waiting := waitingHook(waiter)
			for range 2 {
				after := blockedAcquire(t, owner, waiter, waiting, "jobs-"+tc.name, ttl)
				if tc.late && after < ttl/2 || !tc.late && after >= ttl/2 {
					t.Fatalf("through pooler %v: the blocked Acquire took %v after the release of a %v tenure, want it to wake at the %s",
						pooled, after, ttl, map[bool]string{true: "expiry", false: "release"}[tc.late])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := 0
			if tc.late {
				want = 1
			}
			if len(warnings) != want {
				t.Fatalf("through pooler %v: warnings %q, want %d", pooled, warnings, want)
			}
		})
	}
}
